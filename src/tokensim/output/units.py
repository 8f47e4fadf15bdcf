"""Display units, used only at the edges (tables, HTML): everything inside is SI."""
from __future__ import annotations


def fmt_si(value: float, unit: str) -> str:
    """1.52e10, 'B' -> '15.2 GB'."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fmt_time(s: float) -> str:
    """Seconds in s, ms or us, three significant digits."""
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"
