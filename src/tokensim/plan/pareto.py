"""Pareto fronts over two objectives, both maximized."""
from __future__ import annotations

import numpy as np


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both x and y (ties kept once, the first seen).

    Sort by x descending (then y descending); walking down, a point is on the front when its y beats
    every y seen so far: all points seen so far have at least its x. O(n log n)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return idx
    order = idx[np.lexsort((-y[idx], -x[idx]))]
    ys = y[order]
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(ys)[:-1]))
    return np.sort(order[ys > best_before])
