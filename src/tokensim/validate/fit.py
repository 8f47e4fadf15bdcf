"""`tokensim fit`: fit the few empirical constants on the shipped measurements, reproducibly.

Objective: mean of min(|ln(predicted / measured)|, ln 4) over the modelled rows: a row off by more
than 4x is left unexplained rather than allowed to drag every constant (robust regression). Method: coordinate descent with a
golden-section search per constant in log space, inside physical bounds, frontier rows pinned at the
operating point the current constants choose and re-pinned between sweeps. Leave-one-source-out:
refit without each source document (warm start, one sweep) and predict its rows; a constant with no training
rows left falls back to its prior in constants.toml, never to a value fitted on the held-out rows.
Every evaluation gets its own ConstantsTable: nothing shared changes while a fit runs.
"""
from __future__ import annotations

import datetime as _dt
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable, default_table
from tokensim.stats import quantile
from tokensim.validate.evaluate import freeze, predict_case
from tokensim.validate.rules import Case, Skip, build_case
from tokensim.validate.run import evaluate_row, summarize
from tokensim.validate.table import read_rows
from tokensim.validate.uncertainty import batch_regime

if TYPE_CHECKING:
    from tokensim.validate.serving import ServingCase


@dataclass(frozen=True)
class Param:
    family: str
    engine: str
    name: str
    lo: float
    hi: float
    why: str


PARAMS = (
    Param("default", "default", "hbm_bandwidth_fraction", 0.25, 0.95, "achieved HBM bandwidth of GPU serving engines"),
    Param("default", "llamacpp", "hbm_bandwidth_fraction", 0.20, 0.95, "achieved HBM bandwidth, llama.cpp-class engines"),
    Param("default", "default", "attention_bandwidth_fraction", 0.25, 0.95, "achieved HBM bandwidth reading the KV cache"),
    Param("default", "default", "gemm_flops_fraction", 0.30, 0.90, "achieved dense FLOP/s in decode GEMMs"),
    Param("default", "default", "prefill_flops_fraction", 0.20, 0.90, "achieved dense FLOP/s over a prefill"),
    Param("default", "default", "kernel_gap_s", 0.2e-6, 10e-6, "idle time per kernel launch"),
    Param("default", "default", "host_overhead_s", 1e-5, 3e-3, "host time per decode step"),
    Param("default", "default", "host_overhead_per_seq_s", 1e-7, 1e-4, "host time per running sequence per step"),
    Param("default", "default", "request_overhead_s", 1e-3, 0.5, "request handling in served TTFT"),
    Param("amd", "default", "hbm_bandwidth_fraction", 0.25, 0.95, "achieved HBM bandwidth on AMD Instinct (ROCm engines)"),
    Param("amd", "default", "gemm_flops_fraction", 0.15, 0.90, "achieved dense FLOP/s on AMD Instinct (ROCm GEMMs reached "
          "38-47 % of MI300X peak in SemiAnalysis' Dec-2024 microbenchmarks, less on serving shapes)"),
    Param("cerebras-wafer", "default", "layer_latency_s", 1e-6, 60e-6, "wafer per-layer dataflow floor, fixed part"),
    Param("cerebras-wafer", "default", "layer_latency_s_per_byte", 1e-17, 1e-13,
          "wafer per-layer time per byte of the layer's weights"),
    Param("groq-lpu", "default", "layer_latency_s", 1e-6, 60e-6, "LPU per-layer floor"),
    Param("sambanova-rdu", "default", "layer_latency_s", 1e-6, 60e-6, "RDU per-layer dataflow floor"),
)
GOLDEN = (math.sqrt(5) - 1) / 2
LOSS_CAP = math.log(4.0)


def overlay(values: dict[Param, float]) -> dict:
    out: dict = {}
    for p, v in values.items():
        out.setdefault(p.family, {}).setdefault(p.engine, {})[p.name] = v
    return out


def table_for(values: dict[Param, float]) -> ConstantsTable:
    """constants.toml and the engine profiles with `values` over them (the fitted table in use left out, so a fit
    is reproducible)."""
    return default_table().without_fitted().with_overlay(overlay(values))


def _loss(cases: list[Case], values: dict[Param, float]) -> float:
    total = 0.0
    table = table_for(values)
    for c in cases:
        try:
            v, _ = predict_case(c, table)
            total += min(abs(math.log(v / c.row.value)), LOSS_CAP)
        except TokensimError:
            total += LOSS_CAP
    return total / max(len(cases), 1)


def golden_log(f, lo: float, hi: float, steps: int) -> float:
    """Golden-section search for the minimum of f on [lo, hi] in log space (positive parameters), `steps` narrowings."""
    a, b = math.log(lo), math.log(hi)
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(math.exp(d))
    return math.exp((a + b) / 2)


def _relevant(p: Param, cases: list[Case]) -> list[Case]:
    from tokensim.specs.hardware.catalog import catalog
    out = []
    for c in cases:
        hw = catalog()[c.hardware]
        if p.family == "default":
            if hw.kind in ("wafer", "lpu", "rdu"):
                continue
        elif p.family not in (hw.family, hw.vendor.lower()):
            continue
        if p.engine != "default" and c.deployment.engine != p.engine:
            continue
        out.append(c)
    return out


def fit(cases: list[Case], start: dict[Param, float], sweeps: int = 2, steps: int = 9, progress=None) -> dict[Param, float]:
    """Fit every constant that has relevant rows; one without any takes its prior (constants.toml), not `start`."""
    values = dict(start)
    priors = start_values()
    for _ in range(sweeps):
        table = table_for(values)
        pinned = [freeze(c, table) for c in cases]
        for p in PARAMS:
            rel = _relevant(p, pinned)
            if rel:
                values[p] = golden_log(lambda v, rel=rel, p=p: _loss(rel, {**values, p: v}), p.lo, p.hi, steps)
            else:
                values[p] = priors[p]
            if progress:
                progress()
    return values


def start_values() -> dict[Param, float]:
    """The values in constants.toml (never a previous fit), so that a fit is reproducible."""
    base = default_table().without_fitted()
    return {p: _base_value(p, base) for p in PARAMS}


def _base_value(p: Param, table: ConstantsTable) -> float:
    kind = {"cerebras-wafer": "wafer", "groq-lpu": "lpu", "sambanova-rdu": "rdu"}.get(p.family, "gpu")
    vendor = p.family if p.family == "amd" else ""
    family = p.family if p.family not in ("default", "amd") else ""
    return getattr(table.constants_for(family, kind if family else "", p.engine, vendor), p.name)


def buildable(path) -> list[Case]:
    cases = []
    for row in read_rows(path):
        try:
            cases.append(build_case(row))
        except Skip:
            continue
    return cases


def _stats(errors: list[float]) -> dict:
    a = [abs(e) for e in errors]
    return {"rows": len(a), "median_abs_error": statistics.median(a) if a else None,
            "p90_abs_error": quantile(a, 0.9) if a else None}


def shipped_silicon() -> Path:
    """The measured serving runs shipped with the package (aiconfigurator's silicon sample, data/serving)."""
    from importlib import resources
    return Path(str(resources.files("tokensim") / "data" / "serving" / "silicon_dev.csv"))


SAME_FIGURE = 0.05    # rows of one provider, model, hardware and metric within 5 % report one measurement


def source_groups(cases: list[Case]) -> dict[str, str]:
    """Row id -> the group of rows that share an origin, for leave-one-source-out: one source document, and rows
    elsewhere that relay the same figure (same provider, model, hardware, metric and stated conditions, values
    within SAME_FIGURE: an Artificial Analysis number quoted by the vendor and again by a competitor is one
    measurement)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for c in cases:
        find("src:" + c.row.source_key)
    for i, a in enumerate(cases):
        for b in cases[i + 1:]:
            same = (a.model, a.hardware, a.row.metric, a.row.provider_or_engine, a.row.batch, a.row.input_tokens,
                    a.row.output_tokens) == (b.model, b.hardware, b.row.metric, b.row.provider_or_engine, b.row.batch,
                                             b.row.input_tokens, b.row.output_tokens)
            if same and abs(math.log(a.row.value / b.row.value)) <= SAME_FIGURE:
                parent[find("src:" + a.row.source_key)] = find("src:" + b.row.source_key)
    return {c.row.id: find("src:" + c.row.source_key) for c in cases}


def _error_table(errors: dict[str, list[float]]) -> dict:
    return {k: _stats(v) for k, v in sorted(errors.items())}


def run_fit(path, out_path: Path, loso: bool = True, progress=None, silicon_path=False) -> dict:
    """Fit the general constants on the published measurements; report in-sample and out-of-sample errors; write
    `out_path`. With `silicon_path` (None: the shipped silicon_dev.csv), first fit the serving engines' profiles on
    the time per output token of the measured serving runs and hold them. That second fit is not what ships: fitted
    on silicon_dev alone, the profiles do not carry over to the published rows or the vLLM traces
    (docs/engine-profiles.md), so by default the engine profiles keep their priors."""
    from tokensim.validate.serving import build_cases, steady_tpot
    from tokensim.validate.serving_fit import engine_params, fit_engines, leave_pair_out
    from tokensim.validate.serving_fit import priors as engine_priors
    from tokensim.validate.serving_rows import read_silicon

    serving: list[ServingCase]
    engine_values: dict[Param, float]
    if silicon_path is False:           # no serving runs: the engine profiles keep their priors
        serving, engine_values = [], {}
    else:
        runs, _ = read_silicon(silicon_path or shipped_silicon())
        serving, _ = build_cases(runs)
        engine_values = fit_engines(serving, engine_priors(engine_params()), fixed=start_values(), progress=progress)
    cases = buildable(path)
    fitted = fit(cases, {**start_values(), **engine_values}, progress=progress)
    table = table_for(fitted)
    results = [evaluate_row(c.row, table) for c in cases]
    summary = summarize(results)
    loso_errors: list[float] = []
    loso_by: dict[str, list[float]] = {}
    row_loso: dict[str, float] = {}
    group_of = source_groups(cases)
    by_id = {c.row.id: c for c in cases}
    if loso:
        group = group_of
        for src in sorted(set(group.values())):
            train = [c for c in cases if group[c.row.id] != src]
            test = [c for c in cases if group[c.row.id] == src]
            values = fit(train, fitted, sweeps=1, steps=6)
            held_out = table_for(values)
            for c in test:
                r = evaluate_row(c.row, held_out)
                if r.error is not None and r.predicted is not None:      # one is None exactly when the other is
                    loso_errors.append(r.error)
                    row_loso[r.row.id] = math.log(r.predicted / r.row.value)
                    loso_by.setdefault(f"{r.family} / {r.row.metric}", []).append(r.error)
            if progress:
                progress()
    measured = np.array([c.run.tpot_s for c in serving])
    in_tpot = steady_tpot(serving, table_for(fitted)) / measured - 1 if serving else np.zeros(0)
    out_tpot = leave_pair_out(serving, engine_values, fixed={p: v for p, v in fitted.items() if p not in engine_values},
                              progress=progress) / measured - 1 if loso and serving else in_tpot
    pairs: dict[str, list[float]] = {}
    for e, sc in zip(out_tpot, serving, strict=True):
        pairs.setdefault(f"{sc.run.system} / {sc.run.engine}", []).append(float(e))
    report = {
        "objective": "mean of min(|ln(predicted / measured)|, ln 4)",
        "date": _dt.date.today().isoformat(), "rows": summary.modelled, "fitted_constants": len(fitted),
        "in_sample": {"median_abs_error": summary.median_abs_error, "p90_abs_error": summary.p90_abs_error},
        "leave_one_source_out": _stats(loso_errors) if loso else None,
        "leave_one_source_out_by_family_metric": _error_table(loso_by),
        "serving": {"rows": len(serving), "metric": "time per output token, steady-state estimate",
                    "in_sample": _stats(list(in_tpot)), "leave_one_pair_out": _stats(list(out_tpot)),
                    "leave_one_pair_out_by_system_engine": _error_table(pairs)} if serving else None,
        "values": {f"{p.family}.{p.engine}.{p.name}": v for p, v in fitted.items()},
        "residuals": [{"id": r.row.id, "group": group_of.get(r.row.id, r.row.id), "family": r.family,
                       "engine": by_id[r.row.id].deployment.engine, "metric": r.row.metric,
                       "regime": batch_regime(by_id[r.row.id].deployment.batch),
                       "log_ratio": math.log(r.predicted / r.row.value), "log_ratio_out_of_sample": row_loso.get(r.row.id)}
                      for r in results if r.predicted],
    }
    write_fitted(out_path, fitted, report)
    return report


def write_fitted(path: Path, fitted: dict[Param, float], report: dict) -> None:
    lines = ["# Written by `tokensim fit`; do not edit by hand. Values here override constants.toml.",
             f'date = "{report["date"]}"', f'rows = {report["rows"]}', f'fitted_constants = {report["fitted_constants"]}',
             f'objective = "{report["objective"]} over the modelled rows"',
             f'in_sample_median_abs_error = {report["in_sample"]["median_abs_error"]:.4f}',
             f'in_sample_p90_abs_error = {report["in_sample"]["p90_abs_error"]:.4f}']
    lo = report.get("leave_one_source_out")
    if lo and lo["rows"]:
        lines += [f'loso_median_abs_error = {lo["median_abs_error"]:.4f}', f'loso_p90_abs_error = {lo["p90_abs_error"]:.4f}',
                  f'loso_rows = {lo["rows"]}']
    tables: dict = {}
    for p, v in fitted.items():
        tables.setdefault((p.family, p.engine), []).append((p, v))
    for (fam, eng), items in tables.items():
        lines.append(f"\n[constants.{fam}.{eng}]")
        for p, v in items:
            lines.append(f"{p.name} = {v:.6g}    # {p.why}; bounds [{p.lo:g}, {p.hi:g}]")
    srv = report.get("serving")
    if srv:
        lines.append("\n[serving]")
        lines.append(f'rows = {srv["rows"]}')
        lines.append(f'metric = "{srv["metric"]}"')
        for key in ("in_sample", "leave_one_pair_out"):
            st = srv[key]
            lines.append(f'{key}_median_abs_error = {st["median_abs_error"]:.4f}')
            lines.append(f'{key}_p90_abs_error = {st["p90_abs_error"]:.4f}')
        for pair, st in srv["leave_one_pair_out_by_system_engine"].items():
            lines.append(f'\n[[serving.leave_one_pair_out_by_pair]]\npair = "{pair}"\nrows = {st["rows"]}\n'
                         f'median_abs_error = {st["median_abs_error"]:.4f}\np90_abs_error = {st["p90_abs_error"]:.4f}')
    for fm, st in report.get("leave_one_source_out_by_family_metric", {}).items():
        lines.append(f'\n[[loso_by_family_metric]]\ngroup = "{fm}"\nrows = {st["rows"]}\n'
                     f'median_abs_error = {st["median_abs_error"]:.4f}\np90_abs_error = {st["p90_abs_error"]:.4f}')
    for res in report["residuals"]:
        lines.append("\n[[residuals]]")
        for key in ("id", "group", "family", "engine", "metric", "regime"):
            lines.append(f'{key} = "{res[key]}"')
        lines.append(f'log_ratio = {res["log_ratio"]:.5f}')
        if res["log_ratio_out_of_sample"] is not None:
            lines.append(f'log_ratio_out_of_sample = {res["log_ratio_out_of_sample"]:.5f}')
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)
