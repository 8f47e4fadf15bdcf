"""Small statistics helpers shared by validation, fitting and prediction ranges."""
from __future__ import annotations


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method); nan for no values."""
    s = sorted(values)
    if not s:
        return float("nan")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
