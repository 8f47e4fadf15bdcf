"""`--json` output: strict JSON on stdout."""
from __future__ import annotations

import json
import math
import sys


def emit_json(obj: object) -> None:
    """Strict JSON: non-finite numbers (an unbounded figure, a missing power) become null."""
    sys.stdout.write(json.dumps(finite(obj), indent=2, default=str, allow_nan=False) + "\n")


def finite(o: object) -> object:
    """`o` with NaN and infinities as None, tuples as lists, objects with `to_dict` and numpy scalars as plain values."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    to_dict = getattr(o, "to_dict", None)
    if callable(to_dict):
        return finite(to_dict())
    item = getattr(o, "item", None)
    if callable(item):                                  # numpy scalars
        return finite(item())
    return o


__all__ = ["emit_json", "finite"]
