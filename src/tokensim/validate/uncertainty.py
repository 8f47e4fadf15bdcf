"""A range for every prediction, from the residuals of comparable validated rows.

Residuals are r = ln(predicted / measured), saved by `tokensim fit`. For a prediction in hardware
family F and metric M, the measured value is expected within pred * exp(-r) over the 10th-90th
percentile of the comparable rows' r. With fewer than MIN_ROWS comparable rows the band is taken
from every row of that metric and widened, and says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tokensim.perf.constants import fitted_table
from tokensim.stats import quantile

MIN_ROWS = 5


@dataclass(frozen=True)
class Band:
    low: float
    high: float
    comparable_rows: int
    note: str


def band(residuals: list[tuple[str, str, float]], family: str, metric: str, value: float) -> Band:
    """10th-90th percentile range of the true value given a prediction `value` (residuals: family, metric, r)."""
    comparable = [r for f, m, r in residuals if f == family and m == metric]
    pool = [r for f, m, r in residuals if m == metric] or [r for _, _, r in residuals]
    n = len(comparable)
    base = comparable if n >= MIN_ROWS else pool
    if not base:
        return Band(value / 3.0, value * 3.0, 0, "no validated rows at all: a factor of 3 either way")
    center = quantile(base, 0.5)
    q10, q90 = quantile(base, 0.1), quantile(base, 0.9)
    widen = 1.0 if n >= MIN_ROWS else 1.0 + (MIN_ROWS - n) / MIN_ROWS
    lo_r = center - (center - q10) * widen
    hi_r = center + (q90 - center) * widen
    note = (f"10th-90th percentile of {n} {family} {metric} rows" if n >= MIN_ROWS else
            f"only {n} {family} {metric} rows: band from all {len(pool)} {metric} rows, widened x{widen:.1f}")
    return Band(value * math.exp(-hi_r), value * math.exp(-lo_r), n, note)


def shipped_residuals() -> list[tuple[str, str, float]]:
    """(family, metric, log ratio) of every row in the last `tokensim fit`."""
    return [(r["family"], r["metric"], float(r["log_ratio"])) for r in fitted_table().get("residuals", [])]
