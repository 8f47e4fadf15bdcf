"""serving_dev.csv under load: each published serving measurement re-run through the serving simulator.

A row states an engine, a model on some chips, a workload (mean input and output tokens) and how requests arrived:
Poisson at a rate, a fixed number of closed-loop clients, or offline (every request queued at once). Each modelled
row is one simulation of that load on that deployment with the engine's documented scheduler defaults
(`prediction.serving.default_scheduler`), judged on the row's own metric (TTFT, TPOT, ITL or E2E at a statistic,
throughput, requests per second). Rows that relay a shipped vLLM trace (LLMServingSim's recorded runs) replay the
trace's own requests on the engine its meta.json describes, as `validate.load.replay_trace` does.

Rules (each recorded in the row's assumptions): lengths fixed at the stated means where the source gives no
distribution; KV precision unstated -> FP8 for TensorRT-LLM serving an FP8/FP4 checkpoint, else bf16
(`validate.serving.kv_default`); chips beyond one replica's tp x pp are data-parallel replicas behind a
least-outstanding-requests router. A row is skipped only for a fact it does not state, and the skip says which.
None of these rows enters `tokensim fit`: every error here is out of sample.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from tokensim.deploy.deployment import Deployment
from tokensim.deploy.layout import check_against_model
from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.perf.engines import canonical_engine
from tokensim.prediction.serving import default_scheduler, engine_for
from tokensim.sim import ClosedLoop, Replicas, Workload, simulate, synthetic
from tokensim.specs.hardware.catalog import catalog
from tokensim.specs.model.catalog import catalog_model
from tokensim.validate.serving import kv_default
from tokensim.validate.serving_rows import ServingRow, read_serving

# Engines whose scheduler the simulator has (tokensim.sim.schedulers); another engine is not simulated.
SIMULATED_ENGINES = ("vllm", "sglang", "trtllm")
# Requests per simulated open-loop or closed-loop run when the source does not give its count: enough for the
# percentiles a row reports (p99 needs ~100 requests beyond warm-up), few enough to keep the whole table fast.
DEFAULT_REQUESTS = 600
# Offline runs: enough requests that the drain at the end (the last batch finishing alone) is a small share.
OFFLINE_REQUESTS = 3000

# metric -> (summary key, statistic); throughputs are handled apart
LATENCY_METRICS = {
    "ttft_s_mean": ("ttft_s", "mean"), "ttft_s_p50": ("ttft_s", "p50"), "ttft_s_p90": ("ttft_s", "p90"),
    "ttft_s_p99": ("ttft_s", "p99"), "tpot_s_mean": ("tpot_s", "mean"), "tpot_s_p50": ("tpot_s", "p50"),
    "tpot_s_p90": ("tpot_s", "p90"), "tpot_s_p99": ("tpot_s", "p99"), "itl_s_mean": ("itl_s", "mean"),
    "itl_s_mean_token_weighted": ("itl_s", "mean"), "itl_s_p50": ("itl_s", "p50"), "itl_s_p99": ("itl_s", "p99"),
    "e2e_s_mean": ("e2e_s", "mean"), "e2e_s_p50": ("e2e_s", "p50"), "e2e_s_p99": ("e2e_s", "p99"),
}
THROUGHPUT_METRICS = ("throughput_output_tokens_per_s", "throughput_tokens_per_s", "requests_per_s")


class Skip(Exception):
    """A row the simulator cannot run, with the fact it lacks."""


@dataclass(frozen=True)
class DevResult:
    row: ServingRow
    predicted: float | None
    assumptions: tuple[str, ...] = ()
    skipped_reason: str | None = None

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.row.value - 1.0

    def to_dict(self) -> dict:
        d = {"id": self.row.id, "engine": self.row.engine, "model": self.row.model, "hardware": self.row.hardware,
             "arrival": self.row.arrival, "metric": self.row.metric, "measured": self.row.value,
             "source_url": self.row.source_url}
        if self.skipped_reason:
            d["skipped_reason"] = self.skipped_reason
        else:
            d.update(predicted=self.predicted, error=self.error, assumptions=list(self.assumptions))
        return d


def shipped_serving_dev() -> Path:
    return Path(str(resources.files("tokensim") / "data" / "serving" / "serving_dev.csv"))


def relayed_trace(source_url: str) -> Path | None:
    """The shipped trace a row relays, by its source URL: LLMServingSim's bench/examples/<GPU>/<model>/ in it."""
    from tokensim.validate.load import shipped_traces

    for folder in shipped_traces():
        gpu, _, model = folder.name.partition("_")
        if f"/{gpu}/{model}/" in source_url:
            return folder
    return None


def _metric_value(summary: dict, metric: str) -> float:
    if metric in LATENCY_METRICS:
        key, stat = LATENCY_METRICS[metric]
        value = summary[key][stat]
    elif metric == "throughput_output_tokens_per_s":
        value = summary["throughput_tokens_per_s"]
    elif metric == "throughput_tokens_per_s":
        duration = summary["duration_s"]
        value = (summary["input_tokens"] + summary["output_tokens"]) / duration if duration > 0 else None
    else:
        value = summary["requests_per_s"]
    if value is None or not math.isfinite(value):
        raise TokensimError(f"the simulation gives no {metric} (no request completed)")
    return float(value)


def _deployment(row: ServingRow, notes: list[str]) -> tuple[Deployment, int]:
    """One replica's deployment and the replica count."""
    model = catalog_model(row.model)
    isl, osl = _lengths(row)
    engine = canonical_engine(row.engine) or row.engine
    if engine not in SIMULATED_ENGINES:
        raise Skip(f"engine {row.engine!r}: its scheduler is not simulated (simulated: {', '.join(SIMULATED_ENGINES)})")
    pp, adp = row.pp or 1, row.attention_dp or 1
    tp = row.tp or max(1, row.chips // (pp * adp))
    if row.tp is None:
        notes.append(f"tp: not stated; {tp} (the chips over pp {pp} x attention DP {adp})")
    per_replica = tp * pp * adp          # attention-DP ranks share one replica's experts (expert parallelism)
    if row.chips % per_replica:
        raise Skip(f"chips {row.chips} are not a whole number of tp {tp} x pp {pp} x attention DP {adp} replicas")
    replicas = row.chips // per_replica
    if replicas > 1:
        notes.append(f"{replicas} data-parallel replicas of tp {tp} x pp {pp} behind a least-outstanding router (rule)")
    kv, kv_note = kv_default(row.kv, engine, row.weights)
    notes.append(kv_note)
    if row.weights is None:
        notes.append("weights: not stated; the checkpoint's own precision")
    dep = Deployment(tp=tp, pp=pp, ep=row.ep or 1, attn_dp=adp, weights=row.weights, kv=kv,
                     engine=engine, batch=1, input_tokens=isl, output_tokens=osl)
    check_against_model(model, dep)
    return dep, replicas


def _lengths(row: ServingRow) -> tuple[int, int]:
    if row.mean_input_tokens is None:
        raise Skip("mean input tokens not stated")
    if row.mean_output_tokens is None:
        raise Skip("mean output tokens not stated")
    return max(1, round(row.mean_input_tokens)), max(1, round(row.mean_output_tokens))


def simulate_row(row: ServingRow, constants: ConstantsTable | None = None,
                 traces: dict[Path, dict] | None = None) -> DevResult:
    """The row's metric from one simulation of its load on its deployment (or Skip's reason). `traces`: summaries of
    trace replays already run, by folder (rows relaying one trace share its replay); filled as replays run."""
    from tokensim.validate.load import trace_replay_summary

    notes = list(row.assumptions)
    try:
        if row.metric not in LATENCY_METRICS and row.metric not in THROUGHPUT_METRICS:
            raise Skip(f"metric {row.metric!r} is not one the simulator reports")
        folder = relayed_trace(row.source_url)
        if folder is not None:
            notes.append(f"replays the shipped trace {folder.name} request by request (its arrivals and lengths)")
            traces = {} if traces is None else traces
            if folder not in traces:
                # on the clock the trace (and the summary its rows copy) was timed with: vLLM's engine clock
                traces[folder] = trace_replay_summary(folder, constants)
            return DevResult(row, _metric_value(traces[folder], row.metric), tuple(notes))
        dep, replicas = _deployment(row, notes)
        summary = _simulate(row, dep, replicas, constants, notes)
        value = _metric_value(summary, row.metric)
        if metric_family(row.metric) in ("ttft", "e2e"):
            # measured at a client: the engine's request path (HTTP, tokenization, detokenization) comes on top, as
            # for every served TTFT (validate.load.simulate_case)
            path = for_hardware(catalog()[row.hardware], dep.engine, constants).request_overhead_s
            notes.append(f"request path {path * 1e3:.0f} ms added (the engine profile's request_overhead_s)")
            value += path
        return DevResult(row, value, tuple(notes))
    except Skip as exc:
        return DevResult(row, None, skipped_reason=str(exc))
    except TokensimError as exc:
        return DevResult(row, None, skipped_reason=f"cannot be simulated: {exc}")


def _simulate(row: ServingRow, dep: Deployment, replicas: int, constants: ConstantsTable | None,
              notes: list[str]) -> dict:
    model, hw = catalog_model(row.model), catalog()[row.hardware]
    spec = engine_for(model, hw, dep, constants=constants, scheduler=default_scheduler(dep.engine, hw),
                      engine_version=row.engine_version)
    notes.append(f"scheduler: {dep.engine}'s documented defaults ({spec.scheduler})")
    notes.append(f"lengths: every request {dep.input_tokens} in / {dep.output_tokens} out (the stated means; the "
                 f"source gives no distribution)")
    rng = np.random.default_rng(0)
    work: Workload | ClosedLoop
    if row.arrival == "offline":
        work = synthetic(OFFLINE_REQUESTS, rng, input_tokens=dep.input_tokens, output_tokens=dep.output_tokens)
        notes.append(f"offline: {OFFLINE_REQUESTS} requests queued at once")
    elif row.arrival == "poisson":
        if row.request_rate_per_s is None:
            raise Skip("request rate not stated (the highest rate within the source's latency bounds)")
        work = synthetic(DEFAULT_REQUESTS, rng, rate_per_s=row.request_rate_per_s, input_tokens=dep.input_tokens,
                         output_tokens=dep.output_tokens)
        notes.append(f"{DEFAULT_REQUESTS} Poisson arrivals at {row.request_rate_per_s:g}/s")
    else:
        if row.concurrency is None:
            raise Skip("concurrency not stated")
        clients = row.concurrency
        work = ClosedLoop(clients, synthetic(max(DEFAULT_REQUESTS, 4 * clients), rng, input_tokens=dep.input_tokens,
                                             output_tokens=dep.output_tokens))
    deployment = spec if replicas == 1 else Replicas(spec, count=replicas, router="least_outstanding")
    return simulate(work, deployment, seed=0).summary


def validate_serving_dev(path: str | Path | None = None, constants: ConstantsTable | None = None) -> list[DevResult]:
    """Every row of a serving_dev-layout CSV (the shipped one by default): simulated, or skipped with its reason."""
    rows, unresolved = read_serving(path or shipped_serving_dev())
    traces: dict[Path, dict] = {}
    out = [simulate_row(r, constants, traces) for r in rows]
    for u in unresolved:
        out.append(DevResult(_placeholder(u.id), None, skipped_reason=u.reason))
    return out


def _placeholder(row_id: str) -> ServingRow:
    return ServingRow(id=row_id, engine="", engine_version=None, model="", hardware="", chips=0, tp=None, pp=None,
                      ep=None, attention_dp=None, weights=None, kv=None, dataset="", mean_input_tokens=None,
                      mean_output_tokens=None, arrival="", request_rate_per_s=None, concurrency=None, metric="",
                      scenario="", value=math.nan, source_url="", source_date="", notes="")


def metric_family(metric: str) -> str:
    """'ttft_s_p99' -> 'ttft'; throughputs and request rates -> 'throughput'."""
    return "throughput" if metric in THROUGHPUT_METRICS else metric.split("_")[0]


def summary(results: list[DevResult]) -> dict:
    """Median and p90 of |error| overall and by metric family, with the skip reasons."""
    from tokensim.validate.load import error_stats

    modelled = [r for r in results if r.predicted is not None]
    families: dict[str, list[float]] = {}
    for r in modelled:
        families.setdefault(metric_family(r.row.metric), []).append(float(r.error or 0.0))
    signed = [float(r.error or 0.0) for r in modelled]
    return {**error_stats(signed), "rows": len(results), "modelled": len(modelled),
            "median_signed_error": float(np.median(signed)) if signed else None,
            "by_metric": {k: error_stats(v) for k, v in sorted(families.items())},
            "results": [r.to_dict() for r in results]}
