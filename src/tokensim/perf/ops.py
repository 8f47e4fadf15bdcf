"""One named op of a step: what it moves and computes on one chip, and the time a roofline gives it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

# A quantity of the cost model: a Python number for one deployment, or a numpy array over the planner's candidate
# deployments (every formula runs unchanged on both).
Num: TypeAlias = Any

_SCALARS = (int, float, bool, np.number, np.bool_)


def is_scalar(x) -> bool:
    """np.ndim(x) == 0, without np.ndim's array conversion for the plain numbers of one deployment (the simulator and
    the fit price one step at a time, and ask this a few hundred times a step)."""
    return isinstance(x, _SCALARS) or np.ndim(x) == 0


def any_true(mask) -> bool:
    """bool(np.any(mask)), with the same shortcut for a plain number or bool."""
    return bool(mask) if isinstance(mask, _SCALARS) else bool(np.any(mask))


@dataclass(frozen=True)
class OpCost:
    name: str              # e.g. "attn.proj", "moe.experts", "tp.allreduce", "floor"
    bytes: Num           # read from (or written to) the weight/KV memory tier, per chip
    flops: Num           # at the compute precision, per chip
    comm_bytes: Num      # sent over `link`, per chip
    link: str              # "", "scale_up" or "scale_out"
    t_memory_s: Num
    t_compute_s: Num
    t_comm_s: Num
    t_fixed_s: Num       # latency floors: kernel gaps, per-layer dataflow floor, host time

    @property
    def time_s(self) -> Num:
        if isinstance(self.t_memory_s, float) and isinstance(self.t_compute_s, float):
            return max(self.t_memory_s, self.t_compute_s) + self.t_comm_s + self.t_fixed_s
        t = np.maximum(self.t_memory_s, self.t_compute_s) + self.t_comm_s + self.t_fixed_s
        return float(t) if is_scalar(t) else t

    @property
    def busy_s(self) -> Num:
        """Time the chip moves data, computes or communicates (latency floors excluded)."""
        return np.maximum(self.t_memory_s, self.t_compute_s) + self.t_comm_s

    @property
    def bound(self) -> str:
        parts = {"memory": self.t_memory_s, "compute": self.t_compute_s,
                 "communication": self.t_comm_s, "latency": self.t_fixed_s}
        return max(parts, key=parts.__getitem__)

    def scaled(self, n: float) -> OpCost:
        """The same op repeated n times (n identical layers)."""
        return OpCost(self.name, self.bytes * n, self.flops * n, self.comm_bytes * n, self.link,
                      self.t_memory_s * n, self.t_compute_s * n, self.t_comm_s * n, self.t_fixed_s * n)


@dataclass(frozen=True)
class OpSummary:
    """An op summed over the layers and stages one token passes through."""

    name: str
    count: int
    time_s: float
    bytes: float
    flops: float
    comm_bytes: float
    bound: str
    t_memory_s: float
    t_compute_s: float
    t_comm_s: float
    t_fixed_s: float

    def to_dict(self) -> dict:
        return {
            "name": self.name, "count": self.count, "time_s": self.time_s, "bound": self.bound,
            "bytes": self.bytes, "flops": self.flops, "comm_bytes": self.comm_bytes,
            "t_memory_s": self.t_memory_s, "t_compute_s": self.t_compute_s,
            "t_comm_s": self.t_comm_s, "t_fixed_s": self.t_fixed_s,
        }


def summarize(ops: list[tuple[OpCost, int]]) -> tuple[OpSummary, ...]:
    """Sum ops of the same name (each given with how many layers it stands for), in first-seen order."""
    acc: dict[str, list] = {}
    for op, count in ops:
        row = acc.setdefault(op.name, [0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        row[0] += count
        row[1] += op.time_s
        row[2] += op.bytes
        row[3] += op.flops
        row[4] += op.comm_bytes
        row[5] += op.t_memory_s
        row[6] += op.t_compute_s
        row[7] += op.t_comm_s
        row[8] += op.t_fixed_s
    out = []
    for name, (count, t, b, f, c, tm, tc, tcomm, tf) in acc.items():
        parts = {"memory": tm, "compute": tc, "communication": tcomm, "latency": tf}
        out.append(OpSummary(name, count, t, b, f, c, max(parts, key=parts.__getitem__), tm, tc, tcomm, tf))
    return tuple(out)
