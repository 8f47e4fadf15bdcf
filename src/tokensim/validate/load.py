"""Validation under load: measured serving runs replayed through the serving simulator.

- Traces (folders laid out as data/serving/traces: meta.json + requests.jsonl of a real vLLM run): every request
  replayed at its recorded arrival time on the engine meta.json describes; TTFT and TPOT mean, p50, p90 and p99
  compared with the run's own, beside the error of the simulator that published the trace (summary.txt, column Sim).
- Fixed-concurrency runs (silicon_dev.csv): closed-loop clients as aiperf runs them (aiconfigurator's bench_run.sh:
  --concurrency C --num-requests 20 C --warmup-request-count 2 C, the warm-up drained before the measured requests
  start together). Simulating 10 C requests per row is slow for the largest C, so three rounds stand for the ten:
  the first (the burst), a round in steady state and the last (the drain, which no new prompt interrupts), weighed
  1 / 8 / 1 as in a full run (`round_shares`); the closed loop reaches its steady state within a round, and the
  rounds are a stated approximation, not a fitted constant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.prediction.kv_pool import GENERATOR_TRTLLM_FREE_FRACTION
from tokensim.prediction.serving import engine_for, read_trace_folder, trace_engine
from tokensim.sim import ClosedLoop, ScaledTimer, Workload, load_trace, load_trace_measurements, simulate
from tokensim.specs.hardware.catalog import catalog
from tokensim.specs.model.catalog import catalog_model, find_name
from tokensim.validate.harness import Launch, client_lengths, harness_limits
from tokensim.validate.serving import ServingCase, harness_launch

STATS = ("mean", "p50", "p90", "p99")


def _stats(values: np.ndarray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    return {"mean": float(v.mean()), "p50": float(np.quantile(v, 0.5)), "p90": float(np.quantile(v, 0.9)),
            "p99": float(np.quantile(v, 0.99))}


def _summary_column(path: Path, column: str) -> dict[str, dict[str, float]]:
    """summary.txt of a published trace: {'ttft_s': {'mean': ...}, 'tpot_s': ...} from the named column (ms -> s)."""
    out: dict[str, dict[str, float]] = {}
    if not path.is_file():
        return out
    names = {"TTFT": "ttft_s", "TPOT": "tpot_s"}
    keys = {"Mean": "mean", "Median": "p50", "P90": "p90", "P99": "p99"}
    lines = path.read_text(encoding="utf-8").splitlines()
    header = next((line.split() for line in lines if line.startswith("Metric")), [])
    if column not in header:
        return out
    col = header.index(column) + 1      # "TTFT Mean" is two words, so values sit one place to the right
    for line in lines:
        parts = line.split()
        if len(parts) > col and parts[0] in names and parts[1] in keys:
            out.setdefault(names[parts[0]], {})[keys[parts[1]]] = float(parts[col]) / 1e3
    return out


@dataclass(frozen=True)
class TraceResult:
    name: str
    requests: int
    measured: dict            # {"ttft_s": {mean, p50, p90, p99}, "tpot_s": {...}}
    simulated: dict
    peer: dict                # the publishing simulator's own figures (LLMServingSim), where summary.txt has them

    def errors(self, which: str = "simulated") -> dict[str, dict[str, float]]:
        src = self.simulated if which == "simulated" else self.peer
        return {m: {k: src[m][k] / self.measured[m][k] - 1 for k in STATS if k in src.get(m, {})}
                for m in ("ttft_s", "tpot_s") if m in src}


def _model_for_trace(meta: dict) -> str:
    name = find_name(str(meta.get("model", "")))
    if name is None:
        raise TokensimError(f"trace model {meta.get('model')!r}: not in the model catalog")
    return name


def trace_simulation(folder: str | Path, constants: ConstantsTable | None = None, model: str | None = None,
                     p2p: bool | None = None, step_scale: float = 1.0):
    """A trace folder's requests replayed at their recorded arrivals on the engine its meta.json describes (`p2p`:
    GPU peer-to-peer on or off on its GPU's PCIe links; None: as the hardware file states; `step_scale`: every step
    that many times as long as the cost model prices it, a sensitivity check)."""
    return _replay(read_trace_folder(folder), constants, model, p2p, step_scale)


def _replay(tf, constants: ConstantsTable | None, model: str | None, p2p: bool | None = None,
            step_scale: float = 1.0):
    spec, _, _ = trace_engine(tf, catalog_model(model or _model_for_trace(tf.meta)), constants, p2p=p2p)
    if step_scale != 1.0:
        spec = replace(spec, timer=ScaledTimer(spec.timer, step_scale))
    return simulate(load_trace(tf.requests), spec, seed=0)


def trace_replay_summary(folder: str | Path, constants: ConstantsTable | None = None) -> dict:
    """A trace folder replayed at its recorded arrivals (trace_simulation), its summary on the clock that timed the
    trace (trace_summary): the folder read once."""
    tf = read_trace_folder(folder)
    return trace_summary(_replay(tf, constants, None), load_trace_measurements(tf.requests))


def trace_summary(result, measured: dict) -> dict:
    """A replay's summary on the clock that timed the trace: a vLLM trace times each request from when its engine
    loop took it in (queued_ts), between steps, so its TTFT and end-to-end latency are restated from the same moment
    (SimulationResult.engine_clock_summary); a client's trace keeps the times from arrival."""
    return result.engine_clock_summary() if measured["engine_clock"].all() else result.summary


def replay_trace(folder: str | Path, constants: ConstantsTable | None = None, model: str | None = None,
                 p2p: bool | None = None, step_scale: float = 1.0) -> TraceResult:
    tf = read_trace_folder(folder)
    result = _replay(tf, constants, model, p2p, step_scale)
    m = load_trace_measurements(tf.requests)
    measured = {"ttft_s": _stats(m["ttft_s"]), "tpot_s": _stats(m["tpot_s"])}
    summary = trace_summary(result, m)
    simulated = {k: {s: summary[k][s] for s in STATS} for k in ("ttft_s", "tpot_s")}
    return TraceResult(Path(folder).name, len(m["ttft_s"]), measured, simulated,
                       _summary_column(Path(folder) / "summary.txt", "Sim"))


def shipped_traces() -> list[Path]:
    from importlib import resources
    root = Path(str(resources.files("tokensim") / "data" / "serving" / "traces"))
    return sorted(p for p in root.iterdir() if (p / "meta.json").is_file())


@dataclass(frozen=True)
class LoadResult:
    case: ServingCase
    ttft_s: float
    tpot_s: float

    @property
    def ttft_error(self) -> float:
        return self.ttft_s / self.case.run.ttft_s - 1

    @property
    def tpot_error(self) -> float:
        return self.tpot_s / self.case.run.tpot_s - 1


def per_rank_batch(case: ServingCase) -> int:
    """Requests one attention rank of the run's worker runs at most: the stated batch size, else its share of the
    clients."""
    run, d = case.run, case.deployment
    pool = run.agg if run.agg is not None else run.decode
    return max(1, case.batch_cap or (pool.batch_size if pool is not None and pool.batch_size
                                     else int(round(case.concurrency / d.attn_dp))))


def benchmark_scheduler(case: ServingCase):
    """The scheduler settings aiconfigurator's generator writes for the engine of a run (its rule files
    src/aiconfigurator/generator/rule_plugin/benchmark/{vllm,sglang,trtllm}.rule at commit 095f58a51c4c): the
    running batch capped at the configured batch size, and a token budget of batch + isl + 1,500. Both are per
    attention data-parallel rank (each rank runs its own scheduler: SGLang's and TensorRT-LLM's attention DP, vLLM's
    data-parallel engine cores); the simulated engine holds every rank, so its caps are the ranks' sums. Runs of a
    harness whose launch scripts say otherwise (InferenceX's MTP runs, `validate.harness.harness_limits`) get those."""
    return _scheduler(case, _launch(case))


def _launch(case: ServingCase) -> Launch | None:
    return harness_launch(case.run, case.deployment, case.concurrency, case.prefill_in_decode)


def _scheduler(case: ServingCase, launch: Launch | None):
    """`benchmark_scheduler` with the run's launch (`serving.harness_launch`) already read."""
    d, run = case.deployment, case.run
    limits = harness_limits(run.image, run.engine, d.attn_dp, int(run.concurrency), run.isl, run.measured)
    if limits is not None:          # a harness whose launch script is public: its own settings (validate.harness)
        return pool_scheduler(d.engine, d.attn_dp, limits[0], run.isl, limits[1])
    scheduler = pool_scheduler(d.engine, d.attn_dp, per_rank_batch(case), run.isl)
    return scheduler if launch is None else replace(scheduler, **launch.settings)


def engine_release(run) -> str | None:
    """The engine's own version where the row states it; None where backend_version is the tag of the Dynamo runtime
    image the engine ran in (the engine's version inside it is not stated)."""
    version, image = run.engine_version, run.image or ""
    if version and "ai-dynamo" in image and image.endswith(f":{version}"):
        return None
    return version


def worker_engine(case: ServingCase, model, hw, constants: ConstantsTable | None = None):
    """The simulated engine of one worker of the run: the generator's scheduler settings, and the KV pool the engine
    sizes at the run's version, SGLang capturing CUDA graphs up to the per-rank batch (the generator's rule lists
    cuda_graph_bs 1 .. max batch size), and no further than the clients each rank serves (a batch size stated for
    the whole worker, 5,632 over 72 ranks, would otherwise reserve more than the GPU holds); TensorRT-LLM keeps the
    generator templates' free_gpu_memory_fraction of 0.80 (vLLM's and SGLang's templates leave theirs at the
    engine's default)."""
    graph = min(per_rank_batch(case), max(1, math.ceil(case.concurrency / case.deployment.attn_dp)))
    launch = _launch(case)
    fraction = (launch.memory_fraction if launch is not None else None) or generator_memory_fraction(case.deployment.engine)
    return engine_for(model, hw, case.deployment, constants=constants, scheduler=_scheduler(case, launch),
                      engine_version=engine_release(case.run), cuda_graph_batch=graph, memory_fraction=fraction)


def generator_memory_fraction(engine: str) -> float | None:
    """The memory fraction aiconfigurator's generator launches `engine` with; None: the engine's own default."""
    return GENERATOR_TRTLLM_FREE_FRACTION if engine == "trtllm" else None


def pool_scheduler(engine: str, ranks: int, per_rank: int, isl: int, budget: int | None = None):
    """`benchmark_scheduler`'s rule for one worker of `ranks` attention ranks, each running `per_rank` requests with a
    token budget per step of `budget` (default per_rank + isl + 1,500, the generator's rule)."""
    from tokensim.sim import SglangScheduler, TrtllmScheduler, VllmScheduler

    batch = per_rank * ranks
    budget = budget or per_rank + isl + 1500
    if engine == "trtllm":
        return TrtllmScheduler(max_batch_size=batch, max_num_tokens=ranks * (-(-budget // 32) * 32))
    if engine == "sglang":
        prefill = max(budget - per_rank, isl + 1500)
        return SglangScheduler(max_running_requests=batch, max_prefill_tokens=ranks * prefill,
                               chunked_prefill_size=ranks * max(prefill, 8192), enable_mixed_chunk=True)
    return VllmScheduler(max_num_seqs=batch, max_num_batched_tokens=max(ranks * budget, batch))


PREFILL_WORKER_TOKENS = 8192


def disaggregated(case: ServingCase, constants: ConstantsTable | None = None):
    """A disaggregated run's whole system: its prefill workers (their own layout and batch size), the decode workers,
    and each request's KV cache moved between them over the rack's scale-up link when every worker's chips fit one
    scale-up domain (NVLink in an NVL72 rack or an 8-GPU node), else over the scale-out network; each prefill chip
    sends its share. None when the run states no prefill or decode worker count."""
    from tokensim.perf.memory import kv_bytes_per_token
    from tokensim.sim import Disaggregated
    from tokensim.validate.serving import pool_deployment

    run = case.run
    if run.prefill is None or run.decode is None or not run.prefill.workers or not run.decode.workers:
        return None
    model, hw = catalog_model(run.model), catalog()[run.system]
    # a prefill worker packs prompts up to its token budget: the engines' default 8,192 tokens per rank (TensorRT-LLM
    # max_num_tokens, vLLM's on large GPUs, SGLang's chunk), or one prompt and the generator's 1,500 beyond it; the
    # stated prefill batch size (often 1) is the aiconfigurator's model of it, not a cap the engine applies
    budget = max(PREFILL_WORKER_TOKENS, run.isl + 1500)
    try:
        pre = pool_deployment(run, run.prefill, model, case.deployment.kv)
        pre_scheduler = pool_scheduler(pre.engine, pre.attn_dp, max(1, budget // run.isl), run.isl, budget)
        prefill = engine_for(model, hw, pre, constants=constants, scheduler=pre_scheduler,
                             engine_version=engine_release(run), cuda_graph_batch=max(1, budget // run.isl),
                             memory_fraction=generator_memory_fraction(pre.engine))
    except TokensimError:
        return None             # the memory model cannot hold the prefill worker: the decode worker alone stands in
    decode = worker_engine(case, model, hw, constants)
    chips = pre.chips * run.prefill.workers + case.deployment.chips * run.decode.workers
    up = hw.link("scale_up")
    link = up if up is not None and chips <= up.domain_chips else (hw.link("scale_out") or up)
    if link is None:
        raise TokensimError(f"{run.id}: {hw.name} states no link to move the KV cache between workers")
    return Disaggregated(prefill, decode, kv_bytes_per_token(model, case.deployment.kv),
                         transfer_bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * pre.chips,
                         transfer_latency_s=link.latency_s, prefill_count=run.prefill.workers,
                         decode_count=run.decode.workers)


# The benchmark protocol behind silicon_dev.csv: closed-loop clients whose measured requests start together on an
# idle server (aiperf 0.3 and genai-perf run the profiling phase only after every warm-up request has returned:
# aiperf timing/credit_issuing_strategy.py), so the mean covers that burst and the closed-loop rounds after it.
# Rounds: InferenceX's client sends 10 C prompts (data/serving/harness.toml [client]); aiconfigurator's own
# benchmark runner asked for 10 C requests ("assume we have requests 10x of concurrency ... to mitigate the impact
# of first round latency",
# aic-core backends/trtllm_backend.py before commit 4b9d9dc51; eval/benchmarks/genai_perf_runner.py:
# --request-count C*10 --warmup-request-count C*2), its later bench_run.sh 50 C and then 20 C. Ten rounds it is.
MEASURED_ROUNDS = 10


def simulate_case(case: ServingCase, constants: ConstantsTable | None = None, rounds: int = 3,
                  spread_s: float = 0.0, think_s: float = 0.0) -> LoadResult:
    """One fixed-concurrency run, simulated as aiperf measures it: C closed-loop clients starting together on an idle
    engine. `rounds` rounds of C requests stand for aiperf's MEASURED_ROUNDS, each weighed by `round_shares`: the
    burst and the drain one round each, the rounds between them the rest (InferenceX's client also sends 10 C
    prompts). The requests' lengths are the row's, or drawn as the run's client drew them
    (`validate.harness.client_lengths`). The engine's request path (request_overhead_s) is added to every TTFT."""
    run = case.run
    model, hw = catalog_model(run.model), catalog()[run.system]
    spec = None if case.prefill_in_decode else disaggregated(case, constants)
    # a disaggregated run with both pools stated is simulated whole: every client, prefill workers, KV transfer and
    # decode workers; otherwise one worker with its share of the clients
    clients = max(1, int(round(run.concurrency if spec is not None else case.concurrency)))
    rounds = max(2, min(rounds, MEASURED_ROUNDS))       # at least the burst and one round after it
    n = rounds * clients
    if spec is None:
        spec = worker_engine(case, model, hw, constants)
    inputs, outputs, _ = client_lengths(run.harness, run.isl, run.osl, n)
    work = Workload(np.zeros(n), inputs, outputs)
    result = simulate(ClosedLoop(clients, work, start_spread_s=spread_s, think_s=think_s), spec, seed=0)
    req = result.requests
    done = np.isfinite(req["last_token_s"]) & (req["tokens"] > 1)
    ttft = req["first_token_s"] - req["arrival_s"]
    tpot = (req["last_token_s"] - req["first_token_s"]) / np.maximum(req["tokens"] - 1, 1)
    round_of = np.arange(len(req["arrival_s"])) // clients
    rounds_done = [(done & (round_of == k), share) for k, share in enumerate(round_shares(rounds))]
    rounds_done = [(mask, share) for mask, share in rounds_done if mask.any()]

    def mean(x):
        if not rounds_done:
            return math.nan
        return sum(x[mask].mean() * share for mask, share in rounds_done) / sum(share for _, share in rounds_done)

    t_first, t_out = mean(ttft), mean(tpot)
    if not (math.isfinite(t_first) and math.isfinite(t_out)):
        raise TokensimError(f"{run.id}: the simulation finished no request")
    return LoadResult(case, t_first + for_hardware(hw, case.deployment.engine, constants).request_overhead_s, t_out)


def round_shares(rounds: int) -> list[float]:
    """The weight of each of `rounds` simulated rounds in a run's mean, so that they stand for the harness's
    MEASURED_ROUNDS. A closed-loop run has three kinds of round: the burst (every client's first request, on an
    idle engine), the rounds in steady state, and the drain (the last requests, which no new prompt interrupts: no
    client sends again). Each weighs its share of the measured run: the burst 1 / 10, the drain 1 / 10, and the
    steady rounds 8 / 10 between them. With two rounds there is no steady round to tell from the drain, and the
    second stands for the nine after the burst.

    Why the drain has its own share: 64 clients of Qwen3-32B on one H100 (TensorRT-LLM, 1,024 in / 128 out) take
    51 ms per output token in every steady round, as the other clients' next prompts stall their decodes, and
    35 ms in the drain. Ten simulated rounds give a mean of 49.8 ms; three rounds weighed 1 / 10 and 9 / 10 (the
    burst, then the later two as one) gave 44.2 ms, and weighed 1 / 8 / 1 give 49.8 ms."""
    if rounds >= 3:
        return [1.0] + [(MEASURED_ROUNDS - 2) / (rounds - 2)] * (rounds - 2) + [1.0]
    return [1.0, MEASURED_ROUNDS - 1.0][:rounds]


def shipped_silicon_cases() -> list[ServingCase]:
    from tokensim.validate.fit import shipped_silicon
    from tokensim.validate.serving import build_cases
    from tokensim.validate.serving_rows import read_silicon

    runs, _ = read_silicon(shipped_silicon())
    cases, _ = build_cases(runs)
    return cases


def sample_cases(cases: list[ServingCase], n: int, seed: int = 0) -> list[ServingCase]:
    """`n` cases drawn evenly over (system, engine) pairs (all of them when n is 0 or covers them)."""
    if n <= 0 or n >= len(cases):
        return list(cases)
    rng = np.random.default_rng(seed)
    by_pair: dict[tuple, list[int]] = {}
    for i, c in enumerate(cases):
        by_pair.setdefault(c.pair, []).append(i)
    per = max(1, n // len(by_pair))
    chosen = []
    for idx in by_pair.values():
        chosen += list(rng.choice(idx, min(per, len(idx)), replace=False))
    return [cases[i] for i in sorted(chosen)]


def simulate_cases(cases: list[ServingCase], constants: ConstantsTable | None = None, progress=None) -> list[LoadResult]:
    """Each fixed-concurrency run simulated; runs the memory model cannot lay out are left out (with no result)."""
    out = []
    for c in cases:
        try:
            out.append(simulate_case(c, constants))
        except TokensimError:
            pass
        if progress:
            progress()
    return out


def error_stats(errors) -> dict:
    a = np.abs(np.asarray(list(errors), dtype=float))
    a = a[np.isfinite(a)]
    if a.size == 0:
        return {"rows": 0, "median_abs_error": None, "p90_abs_error": None}
    return {"rows": int(a.size), "median_abs_error": float(np.median(a)), "p90_abs_error": float(np.quantile(a, 0.9))}
