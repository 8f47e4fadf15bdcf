"""Fit the engine profiles' constants on measured serving runs, and their out-of-sample error.

Each engine profile (vLLM, SGLang, TensorRT-LLM) gets its own achieved bandwidth and GEMM fractions and its
per-step and per-sequence host time, fitted on the time per output token of that engine's runs by the rule of
`validate/fit.py` (coordinate descent, golden section in log space inside physical bounds, loss
mean min(|ln(predicted / measured)|, ln 4)). Out of sample: leave one (system, engine) pair out, refit, and
predict its rows: what a user would see on hardware that engine was never measured on.
"""
from __future__ import annotations

import numpy as np

from tokensim.perf.constants import default_table
from tokensim.validate.fit import LOSS_CAP, Param, golden_log, table_for
from tokensim.validate.serving import ServingCase, steady_tpot

SERVING_ENGINES = ("vllm", "sglang", "trtllm")


def engine_params(engines=SERVING_ENGINES) -> tuple[Param, ...]:
    """The constants each serving engine's profile fits: bounds are physical (a fraction of a datasheet peak, a
    latency between a kernel launch and a slow host step)."""
    out = []
    for e in engines:
        out += [
            Param("default", e, "hbm_bandwidth_fraction", 0.30, 0.95, "achieved share of HBM bandwidth streaming weights"),
            Param("default", e, "attention_bandwidth_fraction", 0.15, 0.95, "achieved share of HBM bandwidth reading paged KV"),
            Param("default", e, "gemm_flops_fraction", 0.15, 0.90, "achieved share of dense FLOP/s in decode GEMMs"),
            Param("default", e, "prefill_flops_fraction", 0.15, 0.90, "achieved share of dense FLOP/s over prompt tokens"),
            Param("default", e, "host_overhead_s", 1e-5, 5e-3, "host time per step (scheduling, launch or graph replay)"),
            Param("default", e, "host_overhead_per_seq_s", 1e-8, 2e-4, "host time per running sequence per step"),
            Param("default", e, "kernel_gap_s", 2e-7, 1e-5, "idle time per kernel launch (graph replay or eager)"),
            Param("default", e, "collective_latency_s", 2e-6, 5e-5, "one small all-reduce, end to end"),
            Param("default", e, "all_to_all_latency_s", 5e-6, 2e-4, "one expert-parallel dispatch or combine, end to end"),
        ]
    return tuple(out)


def loss(cases: list[ServingCase], values: dict) -> float:
    """Mean of min(|ln(predicted / measured)|, ln 4) over the cases' time per output token."""
    if not cases:
        return 0.0
    pred = steady_tpot(cases, table_for(values))
    measured = np.array([c.run.tpot_s for c in cases])
    r = np.abs(np.log(pred / measured))
    return float(np.mean(np.minimum(np.nan_to_num(r, nan=LOSS_CAP), LOSS_CAP)))


def priors(params) -> dict[Param, float]:
    """Each engine constant's prior: constants.toml and the engine profile, never a previous fit."""
    table = default_table().without_fitted()
    return {p: getattr(table.constants_for("default", "gpu", p.engine), p.name) for p in params}


def fit_engines(cases: list[ServingCase], start: dict[Param, float], sweeps: int = 2, steps: int = 8,
                fixed: dict | None = None, progress=None) -> dict[Param, float]:
    """Each engine's constants on its own rows (the other constants held at `fixed`); an engine with no rows takes
    its prior, never a value fitted on rows it was not given."""
    values = dict(start)
    fixed = fixed or {}
    prior = priors(values.keys())
    by_engine = {e: [c for c in cases if c.deployment.engine == e] for e in {p.engine for p in values}}
    for _ in range(sweeps):
        for p in list(values):
            rows = by_engine[p.engine]
            if not rows:
                values[p] = prior[p]
                continue
            values[p] = golden_log(lambda v, rows=rows, p=p: loss(rows, {**fixed, **values, p: v}), p.lo, p.hi, steps)
            if progress:
                progress()
    return values


def leave_pair_out(cases: list[ServingCase], fitted: dict[Param, float], fixed: dict | None = None,
                   progress=None) -> np.ndarray:
    """Each row's TPOT predicted with constants fitted without its (system, engine) pair (warm start, one sweep)."""
    out = np.full(len(cases), np.nan)
    for pair in sorted({c.pair for c in cases}):
        train = [c for c in cases if c.pair != pair]
        held = [i for i, c in enumerate(cases) if c.pair == pair]
        engine_values = {p: v for p, v in fitted.items() if p.engine == pair[1]}
        values = fit_engines(train, {**fitted, **engine_values}, sweeps=1, steps=6, fixed=fixed)
        out[held] = steady_tpot([cases[i] for i in held], table_for({**(fixed or {}), **values}))
        if progress:
            progress()
    return out
