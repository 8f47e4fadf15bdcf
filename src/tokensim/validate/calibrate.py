"""`tokensim calibrate`: fit the engine constants a deployment needs to measured traces of it.

A trace is a folder (meta.json + requests.jsonl, as `tokensim bench --save` writes or the vLLM traces shipped in
data/serving/traces) or a requests.jsonl file: each request's arrival, lengths, and its measured first and last
token times, taken at the client or by the engine (vLLM's queued_ts). Every trace is replayed in the serving simulator
on the deployment (a client's TTFT: the simulated one plus the request path, request_overhead_s; an engine's: from the
scheduling pass that took the request in, `SimulationResult.engine_clock_summary`); the constants below, for the deployment's
chip and engine (the most specific level: a chip's kernel-profile level would hide a family's), are fitted so that
the simulated mean TTFT and mean TPOT match the
measured ones (loss: mean over traces of |ln(sim / measured)| of both, the same golden-section search in log space
inside physical bounds as `tokensim fit`). With two or more traces, each is also predicted from a fit on the others
(the out-of-sample error). The result is a fitted table: the one in use, with these constants added for the
deployment's chip and engine, for `TOKENSIM_FITTED=FILE`.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError, bad_value
from tokensim.perf.constants import ConstantsTable, default_table
from tokensim.prediction.serving import default_scheduler, engine_for, read_trace_folder
from tokensim.sim import load_trace, load_trace_measurements, simulate
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import ModelSpec
from tokensim.validate.fit import golden_log

CALIBRATED = (   # name, lower bound, upper bound: what a deployment's engine adds beyond the datasheet
    ("host_overhead_s", 1e-5, 0.2),
    ("host_overhead_per_seq_s", 1e-8, 1e-3),
    ("hbm_bandwidth_fraction", 0.05, 0.95),
    ("gemm_flops_fraction", 0.02, 0.9),
    ("prefill_flops_fraction", 0.02, 0.9),
    ("attention_prefill_rate_ratio", 0.02, 1.0),
    ("request_overhead_s", 1e-4, 0.5),
)


@dataclass(frozen=True)
class Trace:
    name: str
    requests: Path
    ttft_s: float          # measured mean
    tpot_s: float
    scheduler: dict        # the engine settings its meta.json states, per engine core (max_num_seqs, max_num_batched_tokens)
    kv_cache_tokens: int | None
    ttft_p90_s: float = math.nan    # measured 90th percentiles (the real-engine stage judges them too)
    tpot_p90_s: float = math.nan
    engine_clock: bool = False      # its TTFTs start when the engine took each request in (vLLM's queued_ts)


def read_trace(path: str | Path) -> Trace:
    """A trace folder or requests.jsonl, with its measured mean TTFT and TPOT."""
    path = Path(path)
    if path.is_dir():
        path = path / "requests.jsonl"
    if not path.is_file():
        raise bad_value("trace", str(path), "a trace folder with requests.jsonl, or a requests.jsonl file")
    m = load_trace_measurements(path)
    done = np.isfinite(m["ttft_s"]) & np.isfinite(m["e2e_s"])        # failed requests have no token times
    ttft, tpot = m["ttft_s"][done], m["tpot_s"][done & np.isfinite(m["tpot_s"])]
    if not len(ttft) or not len(tpot):
        raise bad_value("trace", str(path), "at least one completed request of two or more output tokens")
    scheduler: dict = {}
    kv = None
    if (path.parent / "meta.json").is_file():
        try:
            folder = read_trace_folder(path.parent)
        except TokensimError:
            folder = None                                   # a meta.json of another layout: the requests alone
        if folder is not None:
            scheduler = folder.scheduler_overrides(ranks=1)       # per engine core; times the deployment's ranks
            kv = folder.kv_cache_tokens
    return Trace(path.parent.name, path, float(np.mean(ttft)), float(np.mean(tpot)), scheduler, kv,
                 float(np.quantile(ttft, 0.9)), float(np.quantile(tpot, 0.9)), bool(m["engine_clock"].all()))


def simulated_stats(trace: Trace, model: ModelSpec, hw: HardwareSpec, dep: Deployment, table: ConstantsTable,
                    kv_cache_tokens: int | None = None) -> dict[str, dict[str, float]]:
    """The trace replayed on the deployment, with the scheduler settings and KV cache its meta.json states: the
    simulated `ttft_s` and `tpot_s` statistics (mean, p50, p90, p99)."""
    scheduler = (default_scheduler(dep.engine, hw, **{k: v * dep.attn_dp for k, v in trace.scheduler.items()})
                 if trace.scheduler else None)
    spec = engine_for(model, hw, dep, constants=table, kv_cache_tokens=kv_cache_tokens or trace.kv_cache_tokens,
                      scheduler=scheduler)
    result = simulate(load_trace(trace.requests), spec, seed=0)
    s = result.summary
    if s["ttft_s"]["mean"] is None or s["tpot_s"]["mean"] is None:
        raise TokensimError(f"trace {trace.name}: the simulation finished no request")
    if trace.engine_clock:
        # the engine's own clock (vLLM's queued_ts): from when its loop took the request in, between steps, with no
        # request path before it
        return {"ttft_s": result.engine_clock_summary()["ttft_s"], "tpot_s": s["tpot_s"]}
    # A client's clock (`tokensim bench`): each TTFT holds the request path (HTTP, tokenization, the frontend, the
    # first token's way back), request_overhead_s, outside the engine's steps. With the trace's own arrival times, a
    # constant path only translates the engine's timeline, so it adds to every TTFT and changes nothing else.
    path_s = table.for_hardware(hw, dep.engine).request_overhead_s
    ttft = {k: v + path_s for k, v in s["ttft_s"].items()}
    return {"ttft_s": ttft, "tpot_s": s["tpot_s"]}


def simulated(trace: Trace, model: ModelSpec, hw: HardwareSpec, dep: Deployment, table: ConstantsTable,
              kv_cache_tokens: int | None = None) -> tuple[float, float]:
    """Simulated mean TTFT and mean TPOT of the trace replayed on the deployment (see simulated_stats)."""
    s = simulated_stats(trace, model, hw, dep, table, kv_cache_tokens)
    return s["ttft_s"]["mean"], s["tpot_s"]["mean"]


def _table(base: ConstantsTable, hw: HardwareSpec, engine: str, values: dict[str, float]) -> ConstantsTable:
    return base.with_overlay({hw.name: {engine: values}})


def _loss(traces, model, hw, dep, base, values, kv) -> float:
    table = _table(base, hw, dep.engine, values)
    total = 0.0
    for t in traces:
        ttft, tpot = simulated(t, model, hw, dep, table, kv)
        total += abs(math.log(ttft / t.ttft_s)) + abs(math.log(tpot / t.tpot_s))
    return total / len(traces)


def fit_traces(traces: list[Trace], model: ModelSpec, hw: HardwareSpec, dep: Deployment, base: ConstantsTable,
               kv_cache_tokens: int | None = None, sweeps: int = 5, steps: int = 12, progress=None) -> dict[str, float]:
    k = base.for_hardware(hw, dep.engine)
    # the request path lies outside an engine's own clock: with engine-stamped traces alone nothing can set it
    fitted = [c for c in CALIBRATED if c[0] != "request_overhead_s" or not all(t.engine_clock for t in traces)]
    values = {name: getattr(k, name) for name, _, _ in fitted}
    for _ in range(sweeps):
        for name, lo, hi in fitted:
            values[name] = golden_log(lambda v, n=name: _loss(traces, model, hw, dep, base, {**values, n: v}, kv_cache_tokens),
                                   lo, hi, steps)
            if progress:
                progress()
    return values


def _errors(traces, model, hw, dep, table, kv) -> list[dict]:
    out = []
    for t in traces:
        ttft, tpot = simulated(t, model, hw, dep, table, kv)
        out.append({"trace": t.name, "ttft_error": ttft / t.ttft_s - 1, "tpot_error": tpot / t.tpot_s - 1,
                    "measured_ttft_s": t.ttft_s, "measured_tpot_s": t.tpot_s, "simulated_ttft_s": ttft,
                    "simulated_tpot_s": tpot})
    return out


def calibrate(paths: Sequence[str | Path], model: ModelSpec, hw: HardwareSpec, dep: Deployment,
              kv_cache_tokens: int | None = None, progress=None) -> dict:
    """Fit on every trace; errors before and after in sample, and leaving each trace out when there are two or more."""
    if not paths:
        raise bad_value("traces", paths, "one or more trace folders or requests.jsonl files")
    traces = [read_trace(p) for p in paths]
    base = default_table()
    before = _errors(traces, model, hw, dep, base, kv_cache_tokens)
    values = fit_traces(traces, model, hw, dep, base, kv_cache_tokens, progress=progress)
    after = _errors(traces, model, hw, dep, _table(base, hw, dep.engine, values), kv_cache_tokens)
    held_out = []
    if len(traces) > 1:
        for i, t in enumerate(traces):
            others = traces[:i] + traces[i + 1:]
            v = fit_traces(others, model, hw, dep, base, kv_cache_tokens, sweeps=2, steps=8)
            held_out += _errors([t], model, hw, dep, _table(base, hw, dep.engine, v), kv_cache_tokens)
    return {"chip": hw.name, "family": hw.family, "engine": dep.engine, "values": values, "before": before, "after": after,
            "held_out": held_out}


def profile_text(report: dict) -> str:
    """The fitted table in use, with the calibrated constants added for the chip and engine (a TOML file)."""
    base = default_table().fitted
    lines = ["# Written by `tokensim calibrate`: the fitted table in use, with constants calibrated on measured traces",
             "# for one chip and engine. Use it with TOKENSIM_FITTED=<this file>."]
    for key in ("date", "rows", "fitted_constants", "objective"):
        if key in base:
            lines.append(f"{key} = {json.dumps(base[key])}")
    constants = {fam: {eng: dict(v) for eng, v in engines.items()} for fam, engines in base.get("constants", {}).items()}
    constants.setdefault(report["chip"], {}).setdefault(report["engine"], {}).update(report["values"])
    for fam, engines in constants.items():
        for eng, values in engines.items():
            lines.append(f"\n[constants.{json.dumps(fam)}.{json.dumps(eng)}]")
            for name, value in values.items():
                lines.append(f"{name} = {float(value)!r}")
    for r in base.get("residuals", []):
        lines.append("\n[[residuals]]")
        for key, value in r.items():
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"
