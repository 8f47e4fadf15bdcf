"""A request in flight, and the compact per-request log that outlives it.

A `Req` exists from arrival to completion only; what a finished request leaves behind is one
row of the `RequestLog` (times and counts in flat arrays), so a million-request run keeps a few
tens of bytes per request.
"""
from __future__ import annotations

from array import array
from typing import Any

import numpy as np

# Request outcomes in the log.
IN_FLIGHT, COMPLETED, REJECTED = 0, 1, 2
REJECT_REASONS = ("context_limit", "kv_capacity", "token_budget", "cancelled")


class Req:
    """One request while the engines hold it. Token counts follow vLLM's: `computed` tokens
    have KV in the cache; `output` tokens have been sampled; the request's known tokens are
    prompt + output. While it decodes, the live counts sit in its engine's `DecodeSet`."""

    __slots__ = ("rid", "arrival_s", "prompt_tokens", "output_tokens", "prefix_id", "prefix_tokens",
                 "computed", "scheduled", "output", "shared_blocks", "private_blocks",
                 "lane", "slot", "seq", "finish_k", "first_token_s", "last_token_s",
                 "kv_ready", "parked_start", "reserved_blocks", "engine", "state", "queued_s", "cancelled")

    def __init__(self, rid: int, arrival_s: float, prompt_tokens: int, output_tokens: int,
                 prefix_id: int = -1, prefix_tokens: int = 0) -> None:
        self.rid = rid
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.prefix_id = prefix_id
        self.prefix_tokens = prefix_tokens
        self.computed = 0          # tokens with KV in the cache
        self.scheduled = 0         # tokens computed or scheduled in a step in flight
        self.output = 0            # tokens sampled so far
        self.shared_blocks = 0     # blocks of a shared prefix entry this request reads
        self.private_blocks = 0    # blocks it owns
        self.lane = -1             # decode lane (pipeline micro-batch group) while decoding
        self.slot = -1             # slot in that lane's DecodeSet, -1 when not decoding
        self.seq = 0               # admission order on its engine (preemption picks the newest)
        self.finish_k = 0
        self.first_token_s = -1.0
        self.last_token_s = -1.0
        self.kv_ready = False      # its prompt's KV arrived from a prefill engine
        self.parked_start = -1     # shared blocks it read when its own blocks were parked
        self.reserved_blocks = 0   # blocks reserved at admission (TensorRT-LLM policy)
        self.engine: Any = None    # the engine holding it
        self.state = 0             # 0 waiting, 1 running, 2 done
        self.queued_s = 0.0        # when it joined its engine's queue (-1: known there already)
        self.cancelled = False     # its client went away (online mode)

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.output

    @property
    def held_blocks(self) -> int:
        return self.shared_blocks + self.private_blocks


class RequestLog:
    """Per-request outcomes in flat growable arrays, indexed by request id."""

    _FLOATS = ("arrival_s", "first_scheduled_s", "first_token_s", "last_token_s", "seen_s")
    _INTS = ("input_tokens", "output_tokens", "tokens", "status", "reason", "preemptions",
             "prefix_hit_tokens")

    def __init__(self, capacity: int = 0) -> None:
        self.n = 0
        self.capacity = 0
        self.arrival_s, self.first_scheduled_s = array("d"), array("d")
        self.first_token_s, self.last_token_s = array("d"), array("d")
        self.seen_s = array("d")   # the engine's first scheduling pass at or after the request reached it
        self.input_tokens, self.output_tokens, self.tokens = array("q"), array("q"), array("q")
        self.status, self.reason, self.preemptions = array("q"), array("q"), array("q")
        self.prefix_hit_tokens = array("q")
        self._grow(max(capacity, 16))

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.capacity
        for name in self._FLOATS:
            getattr(self, name).frombytes(np.full(extra, -1.0).tobytes())
        for name in self._INTS:
            getattr(self, name).frombytes(bytes(8 * extra))
        self.capacity = capacity

    def add(self, arrival_s: float, input_tokens: int, output_tokens: int) -> int:
        rid = self.n
        if rid >= self.capacity:
            self._grow(2 * self.capacity)
        self.n += 1
        self.arrival_s[rid] = arrival_s
        self.input_tokens[rid] = input_tokens
        self.output_tokens[rid] = output_tokens
        return rid

    def column(self, name: str) -> np.ndarray:
        """A copy of one column for the requests logged so far."""
        dtype = np.float64 if name in self._FLOATS else np.int64
        return np.frombuffer(getattr(self, name), dtype=dtype, count=self.n).copy()


class ItlLog:
    """Inter-token latencies as (value, how many tokens saw it): steps give every sequence in
    them the same latency, so a step adds one pair, not one value per sequence."""

    __slots__ = ("values", "weights")

    def __init__(self) -> None:
        self.values = array("d")
        self.weights = array("d")

    def add(self, value: float, weight: float) -> None:
        self.values.append(value)
        self.weights.append(weight)

    def add_many(self, values: np.ndarray, weight: float) -> None:
        self.values.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        self.weights.frombytes(np.full(len(values), float(weight)).tobytes())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.frombuffer(self.values, dtype=np.float64).copy(),
                np.frombuffer(self.weights, dtype=np.float64).copy())
