"""Validation under load: measured serving runs replayed through the serving simulator.

- Traces (folders laid out as data/serving/traces: meta.json + requests.jsonl of a real vLLM run): every request
  replayed at its recorded arrival time on the engine meta.json describes; TTFT and TPOT mean, p50, p90 and p99
  compared with the run's own, beside the error of the simulator that published the trace (summary.txt, column Sim).
- Fixed-concurrency runs (silicon_dev.csv): closed-loop clients as aiperf runs them (aiconfigurator's bench_run.sh:
  --concurrency C --num-requests 20 C --warmup-request-count 2 C, the warm-up drained before the measured requests
  start together). Simulating 20 C requests per row is slow for the largest C, so three rounds stand for the 20: the
  first round (the burst) and the later ones are weighed as in a full run; the closed loop reaches its steady state
  within a round, and the rounds are a stated approximation, not a fitted constant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.prediction.serving import engine_for, read_trace_folder, trace_engine
from tokensim.sim import ClosedLoop, Workload, load_trace, load_trace_measurements, simulate
from tokensim.specs.hardware.catalog import catalog
from tokensim.specs.model.catalog import catalog_model, find_name
from tokensim.validate.serving import ServingCase

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


def replay_trace(folder: str | Path, constants: ConstantsTable | None = None, model: str | None = None) -> TraceResult:
    tf = read_trace_folder(folder)
    spec, _, _ = trace_engine(tf, catalog_model(model or _model_for_trace(tf.meta)), constants)
    result = simulate(load_trace(tf.requests), spec, seed=0)
    m = load_trace_measurements(tf.requests)
    measured = {"ttft_s": _stats(m["ttft_s"]), "tpot_s": _stats(m["tpot_s"])}
    simulated = {k: {s: result.summary[k][s] for s in STATS} for k in ("ttft_s", "tpot_s")}
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


def benchmark_scheduler(case: ServingCase):
    """The scheduler settings aiconfigurator's generator writes for the engine of a run (its rule files
    src/aiconfigurator/generator/rule_plugin/benchmark/{vllm,sglang,trtllm}.rule at commit 095f58a51c4c): the
    running batch capped at the configured batch size, and a token budget of batch + isl + 1,500. Both are per
    attention data-parallel rank (each rank runs its own scheduler: SGLang's and TensorRT-LLM's attention DP, vLLM's
    data-parallel engine cores); the simulated engine holds every rank, so its caps are the ranks' sums."""
    from tokensim.sim import SglangScheduler, TrtllmScheduler, VllmScheduler

    run, d = case.run, case.deployment
    pool = run.agg if run.agg is not None else run.decode
    ranks = d.attn_dp
    per_rank = max(1, case.batch_cap or (pool.batch_size if pool is not None and pool.batch_size
                                         else int(round(case.concurrency / ranks))))
    batch = per_rank * ranks
    budget = per_rank + run.isl + 1500
    if d.engine == "trtllm":
        return TrtllmScheduler(max_batch_size=batch, max_num_tokens=ranks * (-(-budget // 32) * 32))
    if d.engine == "sglang":
        return SglangScheduler(max_running_requests=batch, max_prefill_tokens=ranks * (run.isl + 1500),
                               chunked_prefill_size=ranks * max(run.isl + 1500, 8192), enable_mixed_chunk=True)
    return VllmScheduler(max_num_seqs=batch, max_num_batched_tokens=max(ranks * budget, batch))


# The benchmark protocol behind silicon_dev.csv: closed-loop clients whose measured requests start together on an
# idle server (aiperf 0.3 and genai-perf run the profiling phase only after every warm-up request has returned:
# aiperf timing/credit_issuing_strategy.py), so the mean covers that burst and the closed-loop rounds after it.
# Rounds: the harness that measured the rows is not public; aiconfigurator's own benchmark runner asked for 10 C
# requests ("assume we have requests 10x of concurrency ... to mitigate the impact of first round latency",
# aic-core backends/trtllm_backend.py before commit 4b9d9dc51; eval/benchmarks/genai_perf_runner.py:
# --request-count C*10 --warmup-request-count C*2), its later bench_run.sh 50 C and then 20 C. Ten rounds it is.
MEASURED_ROUNDS = 10


def simulate_case(case: ServingCase, constants: ConstantsTable | None = None, rounds: int = 3,
                  spread_s: float = 0.0, think_s: float = 0.0) -> LoadResult:
    """One fixed-concurrency run, simulated as aiperf measures it: C closed-loop clients starting together on an idle
    engine. `rounds` rounds of C requests stand for aiperf's MEASURED_ROUNDS: the first (the burst) weighs 1 /
    MEASURED_ROUNDS of the mean, the later ones together the rest, as in a full run. The engine's request path
    (request_overhead_s) is added to every TTFT."""
    run = case.run
    model, hw = catalog_model(run.model), catalog()[run.system]
    clients = max(1, int(round(case.concurrency)))
    rounds = max(2, min(rounds, MEASURED_ROUNDS))       # at least the burst and one round after it
    n = rounds * clients
    spec = engine_for(model, hw, case.deployment, constants=constants, scheduler=benchmark_scheduler(case))
    work = Workload(np.zeros(n), np.full(n, run.isl, dtype=np.int64), np.full(n, run.osl, dtype=np.int64))
    result = simulate(ClosedLoop(clients, work, start_spread_s=spread_s, think_s=think_s), spec, seed=0)
    req = result.requests
    done = np.isfinite(req["last_token_s"]) & (req["tokens"] > 1)
    burst = np.arange(len(req["arrival_s"])) < clients
    ttft = req["first_token_s"] - req["arrival_s"]
    tpot = (req["last_token_s"] - req["first_token_s"]) / np.maximum(req["tokens"] - 1, 1)

    def mean(x):
        first, later = x[done & burst], x[done & ~burst]
        if not first.size or not later.size:
            return float(np.mean(x[done])) if done.any() else math.nan
        return (first.mean() + (MEASURED_ROUNDS - 1) * later.mean()) / MEASURED_ROUNDS

    t_first, t_out = mean(ttft), mean(tpot)
    if not (math.isfinite(t_first) and math.isfinite(t_out)):
        raise TokensimError(f"{run.id}: the simulation finished no request")
    return LoadResult(case, t_first + for_hardware(hw, case.deployment.engine, constants).request_overhead_s, t_out)


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
