"""The contract between the serving simulator and a cost model: one engine step, one wall time.

The simulator forms each step's batch the way the engine would and asks a `StepTimer` how long
that exact batch takes. It treats the timer as a black box; a timer may also offer
`decode_run_s(contexts, n_steps)` (the times of `n_steps` pure-decode steps whose contexts grow
by one token a step), which the simulator uses when present to skip ahead through runs of
identical decode steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from tokensim.errors import require

_EMPTY = np.zeros(0, dtype=np.int64)
_sum = np.add.reduce


class StepBatch(NamedTuple):
    """One engine step: the decoding sequences and the prefill chunks scheduled together.

    An immutable tuple: the simulator builds one per step, and a frozen dataclass took 2.4 times as
    long to build (0.99 against 0.41 us)."""
    decode_context_tokens: np.ndarray   # int, per decoding sequence: tokens already in its KV cache before this step
    prefill_chunk_tokens: np.ndarray    # int, per prefill chunk scheduled this step: its new tokens
    prefill_cached_tokens: np.ndarray   # int, per chunk: its request's tokens already in cache (earlier chunks, prefix hits)
    query_tokens_per_decode: int = 1    # 1, or 1 + draft tokens under speculative decoding (verify step)
    decode_context_sum: int = -1        # sum of decode_context_tokens where the caller keeps it (-1: summed here)

    @property
    def context_sum(self) -> int:
        """Tokens the decoding sequences attend to in all (the sum of their contexts)."""
        s = self.decode_context_sum
        return int(_sum(self.decode_context_tokens)) if s < 0 else s

    @property
    def num_decode_seqs(self) -> int:
        return int(self.decode_context_tokens.size)

    @property
    def num_prefill_seqs(self) -> int:
        return int(self.prefill_chunk_tokens.size)

    @property
    def num_tokens(self) -> int:
        """Tokens the step computes: each decode's query tokens plus every prefill chunk."""
        return (self.num_decode_seqs * self.query_tokens_per_decode
                + int(self.prefill_chunk_tokens.sum()))


def decode_batch(contexts) -> StepBatch:
    """A pure-decode step over sequences with these contexts (a convenience for callers)."""
    return StepBatch(np.asarray(contexts, dtype=np.int64), _EMPTY, _EMPTY)


@runtime_checkable
class StepTimer(Protocol):
    def step_s(self, batch: StepBatch) -> float: ...          # wall time of one engine step for this exact batch


def _positive(name: str, value: float) -> None:
    require(isinstance(value, (int, float)) and math.isfinite(value) and value > 0,
            name, value, "a finite number of seconds > 0")


def _non_negative(name: str, value: float) -> None:
    require(isinstance(value, (int, float)) and math.isfinite(value) and value >= 0,
            name, value, "a finite number >= 0")


@dataclass(frozen=True)
class ConstantTimer:
    """Every step takes the same time, whatever is in it (queueing-theory checks)."""
    step_time_s: float

    def __post_init__(self) -> None:
        _positive("step_time_s", self.step_time_s)

    def step_s(self, batch: StepBatch) -> float:
        return self.step_time_s

    def decode_run_s(self, contexts: np.ndarray, n_steps: int) -> np.ndarray:
        return np.full(n_steps, self.step_time_s)


@dataclass(frozen=True)
class AffineTimer:
    """time = fixed + per_token x tokens + per_context x attended context + per_seq x sequences.

    tokens = decode sequences x query tokens + prefill chunk tokens; attended context = sum of
    decode contexts + sum over chunks of chunk x (cached + chunk / 2) (a chunk's tokens attend to
    the cache and, on average, to half of the chunk itself).
    """
    fixed_s: float
    per_token_s: float
    per_context_token_s: float
    per_seq_s: float

    def __post_init__(self) -> None:
        for name in ("fixed_s", "per_token_s", "per_context_token_s", "per_seq_s"):
            _non_negative(name, getattr(self, name))
        require(self.fixed_s + self.per_token_s + self.per_seq_s > 0, "fixed_s", self.fixed_s,
                "fixed_s, per_token_s or per_seq_s > 0 (a step must take time)")

    def step_s(self, batch: StepBatch) -> float:
        contexts, chunks, cached_tokens, query, context_sum = batch    # unpacked: faster than five attribute reads
        n_decode = len(contexts)
        n_chunks = len(chunks)
        tokens = n_decode * query
        attended = float(context_sum if context_sum >= 0 else int(_sum(contexts))) if n_decode else 0.0
        if n_chunks:
            for chunk, cached in zip(chunks.tolist(), cached_tokens.tolist(), strict=True):
                tokens += chunk
                attended += chunk * (cached + chunk / 2)
        return (self.fixed_s + self.per_token_s * tokens + self.per_context_token_s * attended
                + self.per_seq_s * (n_decode + n_chunks))

    def decode_run_s(self, contexts: np.ndarray, n_steps: int) -> np.ndarray:
        """Times of `n_steps` decode steps over `contexts`, each step one token longer."""
        n = contexts.size
        first = (self.fixed_s + (self.per_token_s + self.per_seq_s) * n
                 + self.per_context_token_s * float(_sum(contexts)))
        return first + (self.per_context_token_s * n) * np.arange(n_steps, dtype=np.float64)


class ScaledTimer:
    """Every step of `inner` taking `factor` times as long: what a step-cost error of that size does downstream (a
    saturated engine's queue turns a few per cent on each step into tens of per cent on time to first token)."""

    def __init__(self, inner: StepTimer, factor: float) -> None:
        _positive("factor", factor)
        self.inner, self.factor = inner, float(factor)
        run = getattr(inner, "decode_run_s", None)
        if run is not None:                      # keep the simulator's skip through runs of decode steps
            self.decode_run_s = lambda contexts, n_steps: run(contexts, n_steps) * self.factor

    def step_s(self, batch: StepBatch) -> float:
        return self.inner.step_s(batch) * self.factor


@dataclass
class RecordingTimer:
    """Wraps a timer and keeps every batch it was asked about (tests, step-by-step inspection).

    It offers no `decode_run_s`, so the simulator asks it about every step one by one.
    """
    inner: StepTimer
    batches: list[StepBatch] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)

    def step_s(self, batch: StepBatch) -> float:
        t = self.inner.step_s(batch)
        self.batches.append(batch)
        self.times_s.append(t)
        return t
