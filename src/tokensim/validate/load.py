"""Validation under load: measured serving runs replayed through the serving simulator.

- Traces (folders laid out as data/serving/traces: meta.json + requests.jsonl of a real vLLM run): every request
  replayed at its recorded arrival time on the engine meta.json describes; TTFT and TPOT mean, p50, p90 and p99
  compared with the run's own, beside the error of the simulator that published the trace (summary.txt, column Sim).
- Fixed-concurrency runs (silicon_dev.csv): closed-loop clients as aiperf runs them (aiconfigurator's bench_run.sh:
  --concurrency C --num-requests 20 C --warmup-request-count 2 C). Simulating 22 C requests per row is slow for the
  largest C, so a few rounds per client (validation uses 2, after one warm-up round) stand for the 20: the closed
  loop reaches its steady state within a round or two; the rounds are a stated approximation, not a fitted constant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable
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


LIGHT_LOAD_CLIENTS = 4      # runs with at most this many clients have (almost) no queue: their TTFT is the request path


def request_path_s(cases: list[ServingCase], constants: ConstantsTable | None = None) -> dict[str, float]:
    """Per engine, what a request spends outside the engine's steps before its first token (HTTP, tokenization, the
    frontend and router, detokenizing the first token): the median over the lightly loaded runs (at most
    LIGHT_LOAD_CLIENTS clients) of measured TTFT minus the time of the prompt's prefill alone. A general rule, one
    number per engine, fitted here and applied to every run of that engine, whatever its load."""
    from tokensim.perf.timer import CostModelTimer
    from tokensim.sim.timer import StepBatch

    empty = np.zeros(0, dtype=np.int64)
    gaps: dict[str, list[float]] = {}
    for c in cases:
        if c.concurrency > LIGHT_LOAD_CLIENTS or c.run.mode != "agg":
            continue
        timer = CostModelTimer(catalog_model(c.run.model), catalog()[c.run.system], c.deployment, constants)
        prefill = timer.step_s(StepBatch(empty, np.array([c.run.isl]), np.array([0])))
        gaps.setdefault(c.deployment.engine, []).append(c.run.ttft_s - prefill)
    return {engine: max(0.0, float(np.median(v))) for engine, v in gaps.items()}


def benchmark_scheduler(case: ServingCase):
    """The scheduler settings aiconfigurator's generator writes for the engine of a run (its rule files
    src/aiconfigurator/generator/rule_plugin/benchmark/{vllm,sglang,trtllm}.rule at commit 095f58a51c4c): the
    running batch capped at the configured batch size, and a token budget of batch + isl + 1,500."""
    from tokensim.sim import SglangScheduler, TrtllmScheduler, VllmScheduler

    run, d = case.run, case.deployment
    pool = run.agg if run.agg is not None else run.decode
    batch = max(1, (pool.batch_size if pool is not None and pool.batch_size else int(round(case.concurrency))) * d.attn_dp)
    budget = batch + run.isl + 1500
    if d.engine == "trtllm":
        return TrtllmScheduler(max_batch_size=batch, max_num_tokens=-(-budget // 32) * 32)
    if d.engine == "sglang":
        return SglangScheduler(max_running_requests=batch, max_prefill_tokens=run.isl + 1500,
                               chunked_prefill_size=max(run.isl + 1500, 8192), enable_mixed_chunk=True)
    return VllmScheduler(max_num_seqs=batch, max_num_batched_tokens=max(budget, batch))


def simulate_case(case: ServingCase, constants: ConstantsTable | None = None, requests_per_client: int = 4,
                  warmup_rounds: int = 1, request_path: float = 0.0) -> LoadResult:
    """One fixed-concurrency run, simulated: closed-loop clients, the first `warmup_rounds` x C requests left out
    of the statistics as aiperf's warm-up requests are."""
    run = case.run
    model, hw = catalog_model(run.model), catalog()[run.system]
    clients = max(1, int(round(case.concurrency)))
    n = (requests_per_client + warmup_rounds) * clients
    spec = engine_for(model, hw, case.deployment, constants=constants, scheduler=benchmark_scheduler(case))
    work = Workload(np.zeros(n), np.full(n, run.isl, dtype=np.int64), np.full(n, run.osl, dtype=np.int64))
    result = simulate(ClosedLoop(clients, work), spec, seed=0)
    req = result.requests
    keep = np.arange(len(req["arrival_s"])) >= warmup_rounds * clients        # aiperf leaves its warm-up requests out
    done = keep & np.isfinite(req["last_token_s"]) & (req["tokens"] > 1)
    ttft = float(np.mean((req["first_token_s"] - req["arrival_s"])[done])) if done.any() else math.nan
    tpot = float(np.mean(((req["last_token_s"] - req["first_token_s"]) / (req["tokens"] - 1))[done])) if done.any() else math.nan
    if not (math.isfinite(ttft) and math.isfinite(tpot)):
        raise TokensimError(f"{run.id}: the simulation finished no request")
    return LoadResult(case, ttft + request_path, tpot)


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


def simulate_cases(cases: list[ServingCase], constants: ConstantsTable | None = None, progress=None,
                   request_path: dict[str, float] | None = None) -> list[LoadResult]:
    """Each fixed-concurrency run simulated, its engine's request path added to TTFT; runs the memory model cannot
    lay out are left out (with no result)."""
    out = []
    paths = request_path or {}
    for c in cases:
        try:
            out.append(simulate_case(c, constants, requests_per_client=2, warmup_rounds=1,
                                     request_path=paths.get(c.deployment.engine, 0.0)))
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
