"""Time series for plots, sampled at step boundaries and capped in size.

Every `stride`-th step is kept; when the cap is reached every other kept point is dropped and
the stride doubles, so a run of any length keeps between cap/2 and cap evenly spread points.
"""
from __future__ import annotations


class Series:
    __slots__ = ("cap", "stride", "count", "time_s", "batch_size", "kv_blocks_used", "queue_length")

    def __init__(self, cap: int = 2000) -> None:
        self.cap = max(2, cap)
        self.stride = 1
        self.count = 0
        self.time_s: list[float] = []
        self.batch_size: list[int] = []
        self.kv_blocks_used: list[int] = []
        self.queue_length: list[int] = []

    def due(self) -> bool:
        """Count a step; whether it is one to keep (then `add` its point)."""
        count = self.count
        self.count = count + 1
        return not count % self.stride

    def add(self, time_s: float, batch_size: int, kv_blocks_used: int, queue_length: int) -> None:
        self.time_s.append(time_s)
        self.batch_size.append(batch_size)
        self.kv_blocks_used.append(kv_blocks_used)
        self.queue_length.append(queue_length)
        if len(self.time_s) >= self.cap:
            for name in ("time_s", "batch_size", "kv_blocks_used", "queue_length"):
                setattr(self, name, getattr(self, name)[::2])
            self.stride *= 2

    def to_dict(self) -> dict:
        return {"time_s": list(self.time_s), "batch_size": list(self.batch_size),
                "kv_blocks_used": list(self.kv_blocks_used), "queue_length": list(self.queue_length)}
