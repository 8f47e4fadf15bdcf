"""Calibrated ranges: where a measurement is expected to fall around a prediction, from out-of-sample errors.

`tokensim fit` stores, for every validated row, r = ln(predicted / measured) with the row's source left out of
the fit (leave one source group out), and the row's operating regime: hardware family, engine, metric, batch
regime. For a new prediction of value v in a regime, the comparable rows' r give:
  estimate = v x exp(-median r)                       the bias-corrected central estimate,
  range    = [v x exp(-q90), v x exp(-q10)] widened    the 10th-90th percentile of the measured value,
so the estimate always lies inside its range. Groups, most specific first: (family, engine, metric, regime),
(family, metric), (metric), all rows; the first with at least MIN_ROWS rows is used, and the note says which.
A group of n rows is widened by (1 + SMALL_GROUP_WIDENING / n) around its median: quantiles of few rows
understate the spread. `coverage_80` in `tokensim validate` measures how often the measured value of a row falls
in the range built without that row's source group.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tokensim.perf.constants import fitted_table
from tokensim.stats import quantile

MIN_ROWS = 8
SMALL_GROUP_WIDENING = 2.0      # (1 + 2/n): x1.25 at 8 rows, x1.05 at 40


@dataclass(frozen=True)
class Residual:
    id: str
    group: str                  # source group (rows sharing an origin)
    family: str
    engine: str
    metric: str
    regime: str
    log_ratio: float            # in sample
    log_ratio_out_of_sample: float | None


@dataclass(frozen=True)
class Band:
    estimate: float
    low: float
    high: float
    rows: int
    note: str


def batch_regime(batch: int) -> str:
    """Operating regimes that behave differently: one user, a small batch, a large one."""
    return "batch 1" if batch <= 1 else "batch 2-32" if batch <= 32 else "batch > 32"


def _pool(residuals: list[Residual], family: str, engine: str, metric: str, regime: str,
          exclude_group: str | None) -> tuple[list[float], str]:
    usable = [r for r in residuals if r.group != exclude_group]
    value = [(r, r.log_ratio_out_of_sample if r.log_ratio_out_of_sample is not None else r.log_ratio) for r in usable]
    levels = (
        (f"{family} / {engine} / {metric} / {regime}",
         lambda r: (r.family, r.engine, r.metric, r.regime) == (family, engine, metric, regime)),
        (f"{family} / {metric}", lambda r: (r.family, r.metric) == (family, metric)),
        (metric, lambda r: r.metric == metric),
        ("every validated row", lambda r: True),
    )
    for name, keep in levels:
        rows = [v for r, v in value if keep(r)]
        if len(rows) >= MIN_ROWS:
            return rows, name
    return [v for _, v in value], "every validated row"


def band(residuals: list[Residual], family: str, engine: str, metric: str, regime: str, value: float,
         exclude_group: str | None = None) -> Band:
    """The calibrated estimate and 10th-90th percentile range of a measured `metric` given a prediction `value`
    (the metric's own units: tokens/s, seconds). `exclude_group` leaves one source group's rows out."""
    rows, where = _pool(residuals, family, engine, metric, regime, exclude_group)
    if not rows or not math.isfinite(value):
        return Band(value, value / 3.0, value * 3.0, 0, "no validated rows: a factor of 3 either way")
    note = f"10th-90th percentile of {len(rows)} out-of-sample residuals ({where}), widened x{_widening(len(rows)):.2f}"
    return _widened(value, quantile(rows, 0.1), quantile(rows, 0.5), quantile(rows, 0.9), len(rows), note)


def _widening(rows: int) -> float:
    return 1.0 + SMALL_GROUP_WIDENING / rows


def _log_range(q10: float, q50: float, q90: float, widen):
    """The range of r = ln(predicted / measured): q10 and q90 pushed away from q50 by `widen` (a number or an array)."""
    return q50 - (q50 - q10) * widen, q50 + (q90 - q50) * widen


def _widened(value: float, q10: float, q50: float, q90: float, rows: int, note: str, stretch: float = 1.0) -> Band:
    """The Band of a prediction `value` from the percentiles of r = ln(predicted / measured) over `rows` rows: the
    measured value's estimate value x exp(-q50) and its range, q10 and q90 pushed away from q50 by (1 + 2 / rows) x
    `stretch`."""
    lo_r, hi_r = _log_range(q10, q50, q90, _widening(rows) * stretch)
    return Band(value * math.exp(-q50), value * math.exp(-hi_r), value * math.exp(-lo_r), rows, note)


def shipped_residuals() -> list[Residual]:
    """The residuals `tokensim fit` stored with the fitted constants in use."""
    return list(_residuals(id(fitted_table())))


@lru_cache(maxsize=4)
def _residuals(_table_id: int) -> tuple[Residual, ...]:
    out = []
    for r in fitted_table().get("residuals", []):
        out.append(Residual(id=str(r["id"]), group=str(r.get("group", r["id"])), family=str(r["family"]),
                            engine=str(r.get("engine", "default")), metric=str(r["metric"]),
                            regime=str(r.get("regime", "")), log_ratio=float(r["log_ratio"]),
                            log_ratio_out_of_sample=float(r["log_ratio_out_of_sample"])
                            if "log_ratio_out_of_sample" in r else None))
    return tuple(out)


# Ranges under load: `tokensim fit` simulates every measured serving run (silicon_dev.csv: closed-loop clients at a
# fixed concurrency) with its (system, engine) pair left out of the fit and stores, per group of runs, the 10th, 50th
# and 90th percentiles of r = ln(simulated mean / measured mean) of TTFT and TPOT ([[serving.bands]] in
# fitted.toml). A simulated mean v then has its measured counterpart in [v exp(-q90), v exp(-q10)], widened for small
# groups as above. Groups, most specific first: (hardware family, engine), the family under any engine, the engine on
# any family; none for a chip family and engine that no measured run shares (a wafer's errors are not a GPU's).
#
# Pooled over other pairs' runs, those percentiles miss a new pair's shared offset: left out, each pair's runs fell
# inside the 10th-90th percentile range 74 % of the time (TTFT and TPOT alike, constants of 2026-12-07). So `tokensim
# fit` also stores a stretch per metric, the factor on each range's spread about its median (`stretch_for`: the
# smallest on a grid of 0.05 steps from 1 to 3 that makes each pair's runs, judged by ranges built without that pair,
# fall inside BAND_TARGET of the time over all pairs), and reports the coverage that choice earns out of sample: each
# pair judged by ranges built without it and stretched by the factor chosen without it (`serving_coverage`).
SERVING_BAND_METRICS = ("ttft_s", "tpot_s")
ANY = "any"
BAND_TARGET = 0.8
STRETCH_GRID = tuple(round(1.0 + 0.05 * i, 2) for i in range(41))


def serving_quantiles(metric: str, log_ratios, families, engines) -> list[dict]:
    """The [[serving.bands]] entries of one metric: rows and q10 / q50 / q90 of the finite `log_ratios` per (family,
    engine), per family over every engine, and per engine over every family."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r, fam, eng in zip(log_ratios, families, engines, strict=True):
        if math.isfinite(r):
            for key in ((fam, eng), (fam, ANY), (ANY, eng)):
                groups.setdefault(key, []).append(float(r))
    return [{"metric": metric, "family": fam, "engine": eng, "rows": len(v), "q10": quantile(v, 0.1),
             "q50": quantile(v, 0.5), "q90": quantile(v, 0.9)} for (fam, eng), v in sorted(groups.items())]


def _group_band(by_key: dict, family: str, engine: str) -> tuple[dict, str] | None:
    """The most specific stored group with at least MIN_ROWS runs for a chip family and engine, and its name."""
    for key, where in (((family, engine), f"{family} / {engine}"), ((family, ANY), f"{family} under any engine"),
                       ((ANY, engine), f"{engine} on any hardware")):
        b = by_key.get(key)
        if b is not None and b["rows"] >= MIN_ROWS:
            return b, where
    return None


def serving_band(metric: str, family: str, engine: str, value: float, bands: list[dict] | None = None,
                 stretch: float | None = None) -> Band | None:
    """Where the measured mean `metric` (ttft_s or tpot_s) of a closed-loop benchmark is expected to fall given the
    simulated mean `value`: the out-of-sample percentiles of the most specific group with at least MIN_ROWS runs,
    their spread about the median stretched by `stretch` (None: the shipped stretch, `serving_band_stretch`) (None
    when no group holds that many: no bands stored, or no measured run shares the family or the engine)."""
    if metric not in SERVING_BAND_METRICS:
        raise ValueError(f"metric {metric!r} is not one of {SERVING_BAND_METRICS}")
    entries = shipped_serving_bands() if bands is None else bands
    found = _group_band({(b["family"], b["engine"]): b for b in entries if b["metric"] == metric}, family, engine)
    if found is None or not math.isfinite(value):
        return None
    b, where = found
    k = serving_band_stretch(metric) if stretch is None else stretch
    note = (f"10th-90th percentile of {b['rows']} measured serving runs ({where}), each simulated with its (system, "
            f"engine) pair left out of the fit" + (f", stretched x{k:.2f} about the median" if k != 1.0 else ""))
    return _widened(value, b["q10"], b["q50"], b["q90"], b["rows"], note, k)


def measured_range(summary: dict, family: str, engine: str) -> dict | None:
    """Where a benchmark's measured mean TTFT and TPOT are expected to fall around a simulation's means (`summary`:
    a simulation summary, its ttft_s and tpot_s each with a mean) on `engine` and a chip of `family`: per metric the
    estimate, range, runs and basis of `serving_band` and how often such a range held for an unseen pair; None when no
    measured run shares the chip family or the engine, or the fitted constants store no ranges."""
    out = {}
    for metric in SERVING_BAND_METRICS:
        value = (summary.get(metric) or {}).get("mean")
        b = serving_band(metric, family, engine, value) if value else None
        if b is not None:
            out[f"{metric}_mean"] = {"estimate": b.estimate, "low": b.low, "high": b.high, "runs": b.rows,
                                     "basis": b.note, "coverage_pair_left_out": serving_band_coverage(metric)}
    return out or None


def shipped_serving_bands() -> list[dict]:
    """The [[serving.bands]] entries `tokensim fit` stored with the fitted constants in use."""
    return list(fitted_table().get("serving", {}).get("bands", []))


def _inside_by_stretch(metric: str, r: np.ndarray, families, engines, pairs, pair, without: frozenset,
                       grid: tuple[float, ...]) -> tuple[np.ndarray, int]:
    """For the finite runs of `pair`, judged by ranges built from the runs of every pair outside `without` and `pair`:
    how many fall inside (lo <= r <= hi, r = ln(simulated / measured)) at each stretch of `grid`, and how many were
    judged (runs with no group of MIN_ROWS runs are not)."""
    keep = [i for i, p in enumerate(pairs) if p != pair and p not in without]
    bands = serving_quantiles(metric, r[keep], [families[i] for i in keep], [engines[i] for i in keep])
    by_key = {(b["family"], b["engine"]): b for b in bands}
    k = np.asarray(grid, dtype=float)
    inside, counted = np.zeros(len(k)), 0
    for i, p in enumerate(pairs):
        if p != pair or not math.isfinite(r[i]):
            continue
        found = _group_band(by_key, families[i], engines[i])
        if found is None:
            continue
        b = found[0]
        lo, hi = _log_range(b["q10"], b["q50"], b["q90"], _widening(b["rows"]) * k)
        counted += 1
        inside += (lo <= r[i]) & (r[i] <= hi)
    return inside, counted


def stretch_for(metric: str, log_ratios, families, engines, pairs, without: frozenset = frozenset(),
                grid: tuple[float, ...] = STRETCH_GRID, target: float = BAND_TARGET) -> float:
    """The smallest stretch on `grid` at which the runs of every pair outside `without`, each judged by ranges built
    without its own pair (and without `without`), fall inside the range at least `target` of the time; the grid's
    last value when none does, 1 with no run judged."""
    r = np.asarray(log_ratios, dtype=float)
    inside, counted = np.zeros(len(grid)), 0
    for pair in sorted(set(pairs) - set(without)):
        got, n = _inside_by_stretch(metric, r, families, engines, pairs, pair, without, grid)
        inside, counted = inside + got, counted + n
    if not counted:
        return 1.0
    ok = np.nonzero(inside / counted >= target)[0]
    return float(grid[ok[0]] if len(ok) else grid[-1])


def serving_coverage(metric: str, log_ratios, families, engines, pairs, stretched: bool = True) -> float:
    """Share of the runs whose measured mean falls inside the 80 % range that bands built without their (system,
    engine) pair give (a run is inside when lo <= r <= hi, r = ln(simulated / measured)); with `stretched`, each pair's
    ranges stretched by the factor `stretch_for` chooses without that pair, so the figure is out of sample for the
    stretch too; nan with no finite run."""
    r = np.asarray(log_ratios, dtype=float)
    inside, counted = 0.0, 0
    for pair in sorted(set(pairs)):
        k = stretch_for(metric, r, families, engines, pairs, frozenset([pair])) if stretched else 1.0
        got, n = _inside_by_stretch(metric, r, families, engines, pairs, pair, frozenset(), (k,))
        inside, counted = inside + float(got[0]), counted + n
    return inside / counted if counted else float("nan")


def serving_band_stretch(metric: str) -> float:
    """The stretch `tokensim fit` chose for the shipped ranges of `metric` (`stretch_for`; 1 when not stored)."""
    return float(fitted_table().get("serving", {}).get(f"bands_stretch_{metric.removesuffix('_s')}", 1.0))


def serving_band_coverage(metric: str) -> float | None:
    """`serving_coverage` of `metric` as `tokensim fit` measured it for the shipped bands (None when not stored)."""
    v = fitted_table().get("serving", {}).get(f"bands_coverage_80_{metric.removesuffix('_s')}")
    return None if v is None else float(v)
