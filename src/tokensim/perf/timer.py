"""The cost model as the serving simulator's step timer: the time of one engine step for an exact batch.

`CostModelTimer.step_s(batch)` prices a step of one replica (decode sequences, each with its own context,
plus prefill chunks, each with the tokens its request already has cached) through `perf.step.step_cost`,
the same function every prediction uses. The batch is reduced to the sums the ops read: decode sequences
and their mean context (exact for full attention, whose reads grow linearly with context; for sliding-window
and sparse layers, which cap what they read, the mean can only overstate the reads, by Jensen's
inequality: a stated approximation, not yet measured per model), prefill chunks with their mean size, cached prefix and
attended position (token-weighted, again exact for full attention). Under speculative decoding (`draft`) a step
whose decodes verify q = 1 + k tokens each also runs the k draft passes (`prediction.predictor.draft_step_s`).

Speed: a call to step_cost takes 0.1-0.3 ms; a million-request simulation asks for millions of steps. Steps
are therefore cached by a key that rounds the continuous sums to RELATIVE_BUCKET (1/128 in log space) and
keeps the counts exact; the rounding changes a step's time by far less than 1 % (tested) and is the only
approximation this layer adds.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.perf.context import Context, make_context
from tokensim.perf.layers import Batch
from tokensim.perf.step import step_cost
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import ModelSpec

RELATIVE_BUCKET = 1.0 / 128     # continuous sums are rounded to this relative step in log space
SHARED_PRICE_TABLES = 1024      # step-price tables a process keeps for timers of the same replica (least recent out)
_SHARED: OrderedDict = OrderedDict()


def _bucket(x: float) -> int:
    """Index of x on a log grid of relative step RELATIVE_BUCKET (0 for x <= 0)."""
    return 0 if x <= 0 else 1 + round(math.log(x) / RELATIVE_BUCKET)


def _unbucket(i: int) -> float:
    return 0.0 if i == 0 else math.exp((i - 1) * RELATIVE_BUCKET)


@dataclass
class CostModelTimer:
    """Step times of one replica of `dep`: the busiest of its attention-DP ranks (Batch.on_busiest_rank)."""

    model: ModelSpec
    hw: HardwareSpec
    dep: Deployment
    constants: ConstantsTable | None = None
    exact: bool = False                      # True: no rounding, no cache (slow; for checks)
    draft: SpecDecode | None = None          # speculative decoding: a verify step (q > 1) also runs q - 1 drafts
    _ctx: Context = field(init=False, repr=False)
    _cache: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._ctx = make_context(self.model, self.hw, self.dep, for_hardware(self.hw, self.dep.engine, self.constants))
        if not self.exact:
            # A step's price depends on the model, the chip, the layout, the resolved constants and the drafts, not on
            # the deployment's batch: timers of one replica (the runs of one configuration at every concurrency, in
            # validation and in the fit) share one table of prices, each priced once per process.
            key = (self.model, self.hw, replace(self.dep, batch=1), self._ctx.k, self.draft)
            table = _SHARED.get(key)
            if table is None:
                table = _SHARED[key] = {}
                if len(_SHARED) > SHARED_PRICE_TABLES:
                    _SHARED.popitem(last=False)
            else:
                _SHARED.move_to_end(key)
            self._cache = table

    def batch_of(self, decode_seqs: int, decode_context: float, prefill_seqs: int, prefill_tokens: float,
                 prefill_cached: float, prefill_position: float, query_per_decode: int) -> Batch:
        return Batch.on_busiest_rank(self.dep.attn_dp, float(decode_seqs), float(prefill_seqs),
                                     query_per_decode=float(query_per_decode), decode_context=decode_context,
                                     prefill_tokens=prefill_tokens, prefill_cached=prefill_cached,
                                     prefill_position=prefill_position if prefill_seqs else None)

    def _time(self, key: tuple) -> float:
        nd, ctx_i, npf, chunk_i, cached_i, pos_i, q = key
        return self._priced(nd, _unbucket(ctx_i), npf, _unbucket(chunk_i), _unbucket(cached_i), _unbucket(pos_i), q)

    def _priced(self, nd: int, ctx: float, npf: int, chunk: float, cached: float, pos: float, q: int) -> float:
        t = step_cost(self._ctx, self.batch_of(nd, ctx, npf, chunk, cached, pos, q)).latency_s
        if q > 1 and nd and self.draft is not None:
            from tokensim.prediction.predictor import draft_step_s
            t += (q - 1) * draft_step_s(self._ctx, self.draft, nd / self.dep.attn_dp, context=ctx)
        return t

    def step_s(self, batch) -> float:
        """Wall time of one engine step (a tokensim.sim.timer.StepBatch: decode contexts, prefill chunks)."""
        ctxs = batch.decode_context_tokens
        chunks, cached = batch.prefill_chunk_tokens, batch.prefill_cached_tokens
        if chunks.size and not chunks.all():              # a chunk of no tokens is no work
            keep = chunks > 0
            chunks, cached = chunks[keep], cached[keep]
        nd, npf = int(ctxs.size), int(chunks.size)
        if nd == 0 and npf == 0:
            return 0.0
        mean_ctx = batch.context_sum / nd if nd else 0.0
        if npf:
            new = float(chunks.sum())
            mean_chunk = new / npf
            mean_cached = float(cached.mean())
            position = float(np.dot(chunks, cached + chunks / 2.0)) / new
        else:
            mean_chunk = mean_cached = position = 0.0
        q = int(batch.query_tokens_per_decode)
        if self.exact:
            return self._priced(nd, mean_ctx, npf, mean_chunk, mean_cached, position, q)
        return self._cached((nd, _bucket(mean_ctx), npf, _bucket(mean_chunk), _bucket(mean_cached), _bucket(position), q))

    def _cached(self, key: tuple) -> float:
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._time(key)
        return t

    def decode_run_s(self, contexts: np.ndarray, n_steps: int) -> np.ndarray:
        """Times of `n_steps` pure-decode steps over `contexts`, each step one token longer: step j priced exactly as
        `step_s` prices a decode batch of contexts + j (same key, same cache), without building each batch. The
        simulator asks for these to skip ahead through runs of decode steps with nothing else happening."""
        nd = int(contexts.size)
        if nd == 0 or n_steps <= 0:
            return np.zeros(max(n_steps, 0))
        total = int(contexts.sum())
        if self.exact:
            return np.array([self._priced(nd, (total + nd * j) / nd, 0, 0.0, 0.0, 0.0, 1) for j in range(n_steps)])
        out = []
        last, t = -1, 0.0
        for j in range(n_steps):
            i = _bucket((total + nd * j) / nd)
            if i != last:                       # the mean grows a token a step: a new bucket every ~mean / 128 steps
                t, last = self._cached((nd, i, 0, 0, 0, 0, 1)), i
            out.append(t)
        return np.array(out, dtype=np.float64)

    @property
    def cached_steps(self) -> int:
        return len(self._cache)
