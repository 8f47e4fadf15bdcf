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
    center = quantile(rows, 0.5)
    widen = 1.0 + SMALL_GROUP_WIDENING / len(rows)
    lo_r = center - (center - quantile(rows, 0.1)) * widen
    hi_r = center + (quantile(rows, 0.9) - center) * widen
    note = f"10th-90th percentile of {len(rows)} out-of-sample residuals ({where}), widened x{widen:.2f}"
    return Band(value * math.exp(-center), value * math.exp(-hi_r), value * math.exp(-lo_r), len(rows), note)


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
