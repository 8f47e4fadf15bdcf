"""`tokensim fit` end to end: fit, score in and out of sample, write fitted.toml with its report and residuals.

Out of sample: each published row with its source group left out of the fit (rows relaying one figure under
two URLs are one group), and each serving run with its (system, engine) pair left out: what a user would see
for a source, or a GPU and engine combination, the fit never saw.
"""
from __future__ import annotations

import datetime as _dt
import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from tokensim.perf.constants import ConstantsTable, default_table
from tokensim.specs.hardware.catalog import catalog
from tokensim.stats import quantile
from tokensim.validate.fit import (
    PARAMS,
    Param,
    buildable,
    current_values,
    fit,
    held_out,
    pinned,
    shipped_silicon,
    simulate_runs,
    source_groups,
    start_values,
    table_for,
)
from tokensim.validate.objective import FitData, log_errors
from tokensim.validate.pool import pool_map
from tokensim.validate.run import evaluate_row, summarize
from tokensim.validate.uncertainty import serving_coverage, serving_quantiles, stretch_for


def _stats(errors) -> dict:
    a = [abs(float(e)) for e in errors if math.isfinite(e)]
    return {"rows": len(a), "median_abs_error": statistics.median(a) if a else None,
            "p90_abs_error": quantile(a, 0.9) if a else None}


def _error_table(errors: dict[str, list[float]]) -> dict:
    return {k: _stats(v) for k, v in sorted(errors.items())}


def serving_cases(silicon_path) -> list:
    """The laid-out runs of a silicon_sample-layout CSV (None: the shipped silicon_dev.csv; False: none)."""
    if silicon_path is False:
        return []
    from tokensim.validate.serving import build_cases
    from tokensim.validate.serving_rows import read_silicon
    runs, _ = read_silicon(silicon_path or shipped_silicon())
    return build_cases(runs)[0]


def pair_name(system: str, engine: str) -> str:
    return f"{system} / {engine}"


class _InPair:
    """Picks the serving runs of one (system, engine) pair (a class, not a closure, so that it pickles)."""

    def __init__(self, pair: tuple[str, str]) -> None:
        self.pair = pair

    def __call__(self, c) -> bool:
        return (c.run.system, c.run.engine) == self.pair


class _InGroup:
    def __init__(self, group_of: dict[str, str], group: str) -> None:
        self.group_of, self.group = group_of, group

    def __call__(self, c) -> bool:
        return self.group_of[c.row.id] == self.group


def _never(_c) -> bool:
    return False


def _pair_task(args) -> tuple:
    """One (system, engine) pair left out: the refitted constants, and its runs predicted with them (steady-state
    TPOT, light-load TTFT, and every run simulated: TTFT and TPOT)."""
    data, fitted, pair = args
    values, test = held_out(data, fitted, _never, _InPair(pair))
    table = table_for(values)
    # the reported TPOT is the steady-state estimate itself, as in sample and as `validate --serving` prints it: the
    # objective's simulator ratio (pinned at the whole fit's constants) stays out of the report; it moves nothing else
    errs = log_errors(replace(test, tpot_ratio=()), table)
    sim_ttft, sim_tpot = [], []
    for c, r in zip(test.tpot, simulate_runs(test.tpot, table), strict=True):   # this task is already one process
        sim_ttft.append(math.log(r[0] / c.run.ttft_s) if r is not None else math.nan)
        sim_tpot.append(math.log(r[1] / c.run.tpot_s) if r is not None else math.nan)
    return pair, values, errs, np.array(sim_ttft), np.array(sim_tpot)


def _group_task(args) -> tuple:
    """One source group of published rows left out: each of its rows predicted with the refitted constants."""
    data, fitted, group_of, group, cases = args
    values, _ = held_out(data, fitted, _InGroup(group_of, group), _never)
    held = table_for(values)
    return group, [evaluate_row(c.row, held) for c in cases if group_of[c.row.id] == group]


def leave_pair_out(data: FitData, fitted: dict[Param, float], progress=None, workers: int | None = None) -> dict:
    """Every serving run predicted with its (system, engine) pair left out of the fit: ln(predicted / measured) of its
    steady-state TPOT, light-load TTFT, and simulated TTFT and TPOT; and, per pair, the constants that refit changed
    (stored, so that `tokensim validate --serving` judges each run with constants that never saw its pair)."""
    out: dict = {k: np.full(len(data.tpot), np.nan) for k in ("tpot", "sim_ttft", "sim_tpot")}
    out["ttft_light"] = np.full(len(data.ttft_light), np.nan)
    pairs = sorted({(c.run.system, c.run.engine) for c in data.tpot})
    changed: dict[str, dict[str, float]] = {}
    for pair, values, errs, sim_ttft, sim_tpot in pool_map(_pair_task, [(data, fitted, p) for p in pairs], progress,
                                                            workers):
        pick = _InPair(pair)
        runs = [i for i, c in enumerate(data.tpot) if pick(c)]
        out["tpot"][runs], out["sim_ttft"][runs], out["sim_tpot"][runs] = errs["tpot"], sim_ttft, sim_tpot
        out["ttft_light"][[i for i, c in enumerate(data.ttft_light) if pick(c)]] = errs["ttft_light"]
        changed[pair_name(*pair)] = {f"{p.family}.{p.engine}.{p.name}": v for p, v in values.items() if v != fitted[p]}
    return {**out, "held_out": changed}


def pair_tables(table: ConstantsTable | None = None) -> dict[str, ConstantsTable]:
    """Per (system, engine) pair, the constants `tokensim fit` refitted without that pair's runs, over `table` (the
    fitted table in use by default); empty when the table holds none."""
    table = table or default_table()
    out = {}
    for entry in table.fitted.get("serving", {}).get("held_out", []):
        values: dict = {}
        for key, v in entry.get("values", {}).items():
            family, engine, name = key.split(".")
            values.setdefault(family, {}).setdefault(engine, {})[name] = float(v)
        out[str(entry["pair"])] = table.with_overlay(values)
    return out


def run_fit(path, out_path: Path, loso: bool = True, progress=None, silicon_path=None,
            workers: int | None = None, keep_constants: bool = False) -> dict:
    """Fit the constants on the published measurements at `path` and the serving runs at `silicon_path` (None: the
    shipped silicon_dev.csv; False: none), report in-sample and out-of-sample errors, write `out_path`.
    `keep_constants`: no fit; the constants in use are written back as they are, with a new report (its
    out-of-sample refits redone), for a change to the simulation or to how rows are read."""
    published = buildable(path)
    data = FitData.of(published, serving_cases(silicon_path))
    if keep_constants:
        fitted = current_values()
    else:
        fitted = fit(data, start_values(), progress=progress, workers=workers)
    table = table_for(fitted)
    data = pinned(data, table, simulate=True, workers=workers)   # the step counts at the fitted constants, for every report
    results = [evaluate_row(c.row, table) for c in published]
    summary = summarize(results)
    group_of = source_groups(published)
    by_id = {c.row.id: c for c in published}
    loso_errors: list[float] = []
    loso_by: dict[str, list[float]] = {}
    row_loso: dict[str, float] = {}
    if loso:
        groups = sorted(set(group_of.values()))
        for _, held in pool_map(_group_task, [(data, fitted, group_of, g, published) for g in groups], progress,
                                 workers):
            for r in held:
                if r.error is not None and r.predicted is not None:      # one is None exactly when the other is
                    loso_errors.append(r.error)
                    row_loso[r.row.id] = math.log(r.predicted / r.row.value)
                    loso_by.setdefault(f"{r.family} / {r.row.metric}", []).append(r.error)
    serving = _serving_report(data, fitted, table, loso, progress, workers) if data.tpot else None
    report = {
        "objective": "sum over published rows, serving TPOT and light-load TTFT of the mean of "
                     "min(|ln(predicted / measured)|, ln 4)",
        "date": _dt.date.today().isoformat(), "rows": summary.modelled, "fitted_constants": len(fitted),
        "in_sample": {"median_abs_error": summary.median_abs_error, "p90_abs_error": summary.p90_abs_error},
        "leave_one_source_out": _stats(loso_errors) if loso else None,
        "leave_one_source_out_by_family_metric": _error_table(loso_by),
        "serving": serving,
        "values": {f"{p.family}.{p.engine}.{p.name}": v for p, v in fitted.items()},
        "residuals": [{"id": r.row.id, "group": group_of.get(r.row.id, r.row.id), "family": r.family,
                       "engine": by_id[r.row.id].deployment.engine, "metric": r.row.metric,
                       "regime": r.regime,
                       "log_ratio": math.log(r.predicted / r.row.value), "log_ratio_out_of_sample": row_loso.get(r.row.id)}
                      for r in results if r.predicted],
    }
    write_fitted(out_path, fitted, report)
    return report


def _serving_report(data: FitData, fitted, table, loso: bool, progress, workers) -> dict:
    inside = log_errors(data, table)                   # data pinned at the fitted constants: tpot is the simulated TPOT
    steady = log_errors(replace(data, tpot_ratio=()), table)["tpot"]
    if loso:
        outside = leave_pair_out(data, fitted, progress, workers)
    else:
        outside = {"tpot": steady, "ttft_light": inside["ttft_light"], "sim_ttft": np.full(len(data.tpot), np.nan),
                   "sim_tpot": inside["tpot"], "held_out": {}}
    out: dict = {"rows": len(data.tpot), "light_rows": len(data.ttft_light), "held_out": outside["held_out"]}
    kinds = (("tpot", "time per output token, steady-state estimate", steady, outside["tpot"], data.tpot),
             ("ttft_light", "time to first token at light load", inside["ttft_light"], outside["ttft_light"],
              data.ttft_light),
             ("simulated_ttft", "time to first token, simulated as the benchmark ran", None, outside["sim_ttft"],
              data.tpot),
             ("simulated_tpot", "time per output token, simulated as the benchmark ran", inside["tpot"],
              outside["sim_tpot"], data.tpot))
    for kind, label, own, held, cases in kinds:
        pairs: dict[str, list[float]] = {}
        for e, c in zip(np.expm1(held), cases, strict=True):
            pairs.setdefault(pair_name(c.run.system, c.run.engine), []).append(float(e))
        out[kind] = {"metric": label, "in_sample": _stats(list(np.expm1(own))) if own is not None else None,
                     "leave_one_pair_out": _stats(list(np.expm1(held))),
                     "leave_one_pair_out_by_system_engine": _error_table(pairs)}
        if kind == "simulated_ttft":
            out[kind]["median_signed_error"] = float(np.nanmedian(np.expm1(held))) if np.isfinite(held).any() else None
    if loso:        # ranges under load (`uncertainty.serving_band`), from the runs simulated without their pair
        families = [catalog()[c.run.system].family for c in data.tpot]
        engines = [c.run.engine for c in data.tpot]
        run_pairs = [c.pair for c in data.tpot]
        out["bands"], out["bands_coverage_80"], out["bands_stretch"] = [], {}, {}
        for metric, held in (("ttft_s", outside["sim_ttft"]), ("tpot_s", outside["sim_tpot"])):
            out["bands"] += serving_quantiles(metric, held, families, engines)
            out["bands_stretch"][metric] = stretch_for(metric, held, families, engines, run_pairs)
            # honest coverage: each pair's runs judged by bands built without that pair, stretched by the factor
            # chosen without it
            out["bands_coverage_80"][metric] = serving_coverage(metric, held, families, engines, run_pairs)
    return out


def _stat_lines(prefix: str, st: dict) -> list[str]:
    if not st or st.get("median_abs_error") is None:
        return []
    return [f'{prefix}_median_abs_error = {st["median_abs_error"]:.4f}', f'{prefix}_p90_abs_error = {st["p90_abs_error"]:.4f}']


def write_fitted(path: Path, fitted: dict[Param, float], report: dict) -> None:
    lines = ["# Written by `tokensim fit`; do not edit by hand. Values here override constants.toml and the engine",
             "# profiles' priors (data/engines/*.toml).",
             f'date = "{report["date"]}"', f'rows = {report["rows"]}', f'fitted_constants = {report["fitted_constants"]}',
             f'objective = "{report["objective"]}"']
    lines += _stat_lines("in_sample", report["in_sample"])
    lo = report.get("leave_one_source_out")
    if lo and lo["rows"]:
        lines += _stat_lines("loso", lo) + [f'loso_rows = {lo["rows"]}']
    tables: dict = {}
    for p, v in fitted.items():
        tables.setdefault((p.family, p.engine), []).append((p, v))
    for (fam, eng), items in tables.items():
        lines.append(f"\n[constants.{fam}.{eng}]")
        for p, v in items:
            lines.append(f"{p.name} = {v:.6g}    # {p.why}; bounds [{p.lo:g}, {p.hi:g}]")
    srv = report.get("serving")
    if srv:
        lines += ["\n[serving]", f'rows = {srv["rows"]}', f'light_rows = {srv["light_rows"]}']
        for metric, share in srv.get("bands_coverage_80", {}).items():
            lines.append(f"bands_coverage_80_{metric.removesuffix('_s')} = {share:.4f}")
        for metric, k in srv.get("bands_stretch", {}).items():
            lines.append(f"bands_stretch_{metric.removesuffix('_s')} = {k:.2f}")
        for kind in ("tpot", "ttft_light", "simulated_ttft", "simulated_tpot"):
            block = srv[kind]
            lines += [f"\n[serving.{kind}]", f'metric = "{block["metric"]}"']
            lines += _stat_lines("in_sample", block["in_sample"]) + _stat_lines("leave_one_pair_out",
                                                                                block["leave_one_pair_out"])
            for pair, st in block["leave_one_pair_out_by_system_engine"].items():
                if st["rows"]:
                    lines.append(f'\n[[serving.{kind}.by_pair]]\npair = "{pair}"\nrows = {st["rows"]}\n'
                                 f'median_abs_error = {st["median_abs_error"]:.4f}\np90_abs_error = {st["p90_abs_error"]:.4f}')
        for b in srv.get("bands", []):
            lines.append(f'\n[[serving.bands]]\nmetric = "{b["metric"]}"\nfamily = "{b["family"]}"\nengine = "{b["engine"]}"\n'
                         f'rows = {b["rows"]}\nq10 = {b["q10"]:.4f}\nq50 = {b["q50"]:.4f}\nq90 = {b["q90"]:.4f}')
        for pair, values in srv["held_out"].items():
            inline = ", ".join(f'"{k}" = {v:.6g}' for k, v in values.items())
            lines.append(f'\n[[serving.held_out]]\npair = "{pair}"\nvalues = {{ {inline} }}')
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


__all__ = ["PARAMS", "pair_tables", "pool_map", "run_fit", "write_fitted"]
