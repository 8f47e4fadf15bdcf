"""The fit's objective evaluated by several processes at once, to the same float as `objective.loss`.

A sweep of `tokensim fit` evaluates the loss some 13 times per constant, one after the other (each step of the
golden-section search needs the last one's answer), so the only way to spread one sweep over CPUs is to split each
evaluation's rows. `SplitLoss` deals the rows of a FitData into shares once (whole serving groups, which are priced
together, `ServingCase.group`; published rows one by one), keeps one share in each worker process, and for each
evaluation has every worker price the rows of its share that the constant moves (`objective.affected`). The parent
puts the log errors back in the rows' order and sums them as `loss` does, so the value, and with it the fit, is the
same float for any number of processes.
"""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import numpy as np

from tokensim.validate.objective import KINDS, FitData, affected, capped_sum, kind_sum, log_errors

_SHARE: FitData | None = None                  # this worker's rows
_POSITIONS: dict[str, np.ndarray] = {}         # their positions among all the rows, by kind
_MOVED: dict = {}                              # param -> (the rows of the share it moves, their positions by kind)


def shares(data: FitData, n: int) -> list[dict[str, np.ndarray]]:
    """Positions of each kind's rows in each of `n` shares: serving groups whole, dealt in order of first appearance,
    published rows dealt one by one (each share holds every row of a group it holds, of both serving kinds)."""
    out: list[dict[str, list[int]]] = [{k: [] for k in KINDS} for _ in range(n)]
    for i in range(len(data.published)):
        out[i % n]["published"].append(i)
    owner: dict = {}
    for kind in ("tpot", "ttft_light"):
        for i, c in enumerate(getattr(data, kind)):
            share = owner.setdefault(c.group, len(owner) % n)
            out[share][kind].append(i)
    return [{k: np.asarray(v, dtype=int) for k, v in s.items()} for s in out]


def _start(data: FitData, where: dict[str, np.ndarray]) -> None:
    global _SHARE, _POSITIONS
    _SHARE, _POSITIONS = data.take(where), where
    _MOVED.clear()


def _errors(args) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(positions, log errors) by kind of the rows of this worker's share that `param` moves, at `table`."""
    param, levels, table = args
    if param not in _MOVED:
        assert _SHARE is not None
        keep = {k: {id(c) for c in getattr(affected(param, _SHARE, levels), k)} for k in KINDS}
        picked = {k: np.asarray([j for j, c in enumerate(getattr(_SHARE, k)) if id(c) in keep[k]], dtype=int)
                  for k in KINDS}
        _MOVED[param] = (_SHARE.take(picked), {k: _POSITIONS[k][picked[k]] for k in KINDS})
    rows, positions = _MOVED[param]
    errors = log_errors(rows, table)
    return {k: (positions[k], errors[k]) for k in KINDS}


class SplitLoss:
    """`objective.loss(affected(param, data, levels), table)`, each evaluation spread over `workers` processes, each
    holding a share of `data` for the pool's life (a use: one sweep of the fit, whose data does not change)."""

    def __init__(self, data: FitData, levels, workers: int) -> None:
        self.data, self.levels = data, levels
        # one process per share, started with its rows, so that each task goes to the process holding them
        self.workers = [ProcessPoolExecutor(max_workers=1, initializer=_start, initargs=(data, w))
                        for w in shares(data, workers)]

    def loss(self, param, table) -> float:
        futures = [w.submit(_errors, (param, self.levels, table)) for w in self.workers]
        parts = [f.result() for f in futures]
        sums = {}
        for k in KINDS:
            positions = np.concatenate([p[k][0] for p in parts])
            errors = np.concatenate([p[k][1] for p in parts])
            sums[k] = capped_sum(errors[np.argsort(positions, kind="stable")])
        return kind_sum(self.data, sums)

    def close(self) -> None:
        for w in self.workers:
            w.shutdown()

    def __enter__(self) -> SplitLoss:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["SplitLoss", "shares"]
