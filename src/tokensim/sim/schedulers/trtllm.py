"""TensorRT-LLM in-flight batching: a capacity scheduler, then a micro-batch scheduler
(TensorRT-LLM docs, "Scheduler" and "Useful Runtime Options").

Capacity (GUARANTEED_NO_EVICT, the default policy): a started request is never paused, so a
waiting request starts only when the KV blocks for its whole length (prompt + max output)
fit beside those reserved by every started request, and fewer than `max_batch_size` run.
Micro-batch: each step takes the generation requests (one token each) and then context
requests in arrival order within `max_num_tokens`; without context chunking a prompt runs
whole or waits, with it a prompt is cut to the tokens left, in whole KV blocks.

Attention data parallelism with `attention_dp_balance` (AttentionDpConfig.enable_balance; PyExecutor.
_balance_adp_requests in tensorrt_llm/_torch/pyexecutor/py_executor.py): the context requests a step would take
are held back until every attention rank has one (and every rank a free batch slot); a counter of held
iterations, which counts every iteration that condition fails, context or none, releases them when it reaches
`attention_dp_timeout_iters` or when some rank has no generation request; once every rank has one, they wait a
further `attention_dp_batching_wait_iters` iterations while every rank is generating. The engine here holds every
rank in one scheduler with summed caps, so "every rank" is read from the counts: at least as many context (or
generation) requests as ranks, the executor's router spreading new requests over the ranks one each first.

Batch waiting without attention DP (`batch_wait_timeout_iters`, `batch_wait_max_tokens_ratio`; PyExecutor.
_waiting_requests): while requests are generating, the step's context requests wait until their prompts and the
generation tokens come to `batch_wait_max_tokens_ratio` x max_num_tokens, or for `batch_wait_timeout_iters`
iterations that had both (the counter counts only those).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from tokensim.errors import require


class _AdpState:
    """The executor's attention-DP and batch-waiting counters and the loop (time) they last counted."""
    __slots__ = ("waiting_iters", "batching_iters", "batch_wait_iters", "counted_s", "hold")

    def __init__(self) -> None:
        self.waiting_iters = 0
        self.batching_iters = 0
        self.batch_wait_iters = 0
        self.counted_s = math.nan
        self.hold = False


@dataclass(frozen=True)
class TrtllmScheduler:
    # tensorrt_llm BuildConfig / LLM API defaults: max_batch_size 2048, max_num_tokens 8192.
    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    # TorchLlmArgs.enable_chunked_prefill defaults to False.
    enable_chunked_prefill: bool = False
    # SchedulerConfig.capacity_scheduler_policy defaults to GUARANTEED_NO_EVICT (the only one here).
    capacity_scheduler_policy: str = "GUARANTEED_NO_EVICT"
    # TorchLlmArgs.disable_overlap_scheduler False: the next step is scheduled while one runs,
    # so a request arriving during a step is first seen at the next one.
    overlap_scheduler: bool = True
    # The attention data-parallel ranks whose caps this engine sums (1: none), and AttentionDpConfig
    # (tensorrt_llm/llmapi/llm_args.py): enable_balance False, timeout_iters 50, batching_wait_iters 10.
    attention_dp_ranks: int = 1
    attention_dp_balance: bool = False
    attention_dp_timeout_iters: int = 50
    attention_dp_batching_wait_iters: int = 10
    # TorchLlmArgs.batch_wait_timeout_iters 0 and batch_wait_max_tokens_ratio 0.0: no batch waiting.
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    # KvCacheConfig.tokens_per_block defaults to 32.
    default_block_size: ClassVar[int] = 32

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_num_tokens", "attention_dp_ranks"):
            v = getattr(self, name)
            require(isinstance(v, int) and v >= 1, name, v, "a whole number >= 1")
        for name in ("attention_dp_timeout_iters", "attention_dp_batching_wait_iters", "batch_wait_timeout_iters"):
            v = getattr(self, name)
            require(isinstance(v, int) and v >= 0, name, v, "a whole number >= 0")
        r = self.batch_wait_max_tokens_ratio
        require(isinstance(r, (int, float)) and 0 <= r <= 1, "batch_wait_max_tokens_ratio", r, "a number in [0, 1]")
        require(self.capacity_scheduler_policy == "GUARANTEED_NO_EVICT", "capacity_scheduler_policy",
                self.capacity_scheduler_policy, "'GUARANTEED_NO_EVICT' (the only policy simulated)")

    def max_running(self) -> int:
        return self.max_batch_size

    @property
    def _balancing(self) -> bool:
        return self.attention_dp_balance and self.attention_dp_ranks > 1

    @property
    def _batch_waiting(self) -> bool:
        return self.attention_dp_ranks == 1 and (self.batch_wait_timeout_iters > 0
                                                 or self.batch_wait_max_tokens_ratio > 0)

    def new_state(self, engine) -> _AdpState | None:
        return _AdpState() if self._balancing or self._batch_waiting else None

    def _wait_for_batch(self, eng, n_gen: int, budget: int, now: float) -> bool:
        """Whether this loop's context requests wait for a fuller batch (the executor's _waiting_requests): only
        while requests generate, counted once per loop."""
        st = eng.sched
        if now == st.counted_s:
            return st.hold
        st.counted_s = now
        tokens, taken = n_gen * eng.q, 0
        for r in eng.prefilling:             # the prompts the micro-batch would take this step
            left = r.num_tokens - r.scheduled
            if left <= 0:
                continue
            if budget <= 0 or (left > budget and not self.enable_chunked_prefill):
                break
            tokens += r.num_tokens
            taken += 1
            budget -= left
        hold = False
        if taken and n_gen:
            if (st.batch_wait_iters >= self.batch_wait_timeout_iters
                    or tokens >= self.batch_wait_max_tokens_ratio * self.max_num_tokens):
                st.batch_wait_iters = 0
            else:
                st.batch_wait_iters += 1
                hold = True
        st.hold = hold
        return hold

    def _hold_contexts(self, eng, n_gen: int, now: float) -> bool:
        """Whether this loop's context requests wait (the executor's _balance_adp_requests), counted once per loop
        however often the engine asks."""
        st = eng.sched
        if now == st.counted_s:
            return st.hold
        st.counted_s = now
        ranks = self.attention_dp_ranks
        n_ctx = sum(1 for r in eng.prefilling if r.num_tokens > r.scheduled)
        all_gen = n_gen >= ranks
        if n_gen < self.max_batch_size and n_ctx >= ranks:
            st.waiting_iters = 0
            hold = False
            if all_gen:
                if st.batching_iters < self.attention_dp_batching_wait_iters:
                    st.batching_iters += 1
                    hold = True
                else:
                    st.batching_iters = 0
        else:
            st.waiting_iters += 1
            hold = True
            if st.waiting_iters >= self.attention_dp_timeout_iters or not all_gen:
                st.waiting_iters = 0
                hold = False
        st.hold = hold
        return hold

    def repeat_steady(self, eng, steps: int) -> None:
        """`steps` more decode steps with no context request: the held-iterations counter goes on counting, back
        to 0 at the timeout (or at once while some rank generates nothing)."""
        st = eng.sched
        if st is None or not self._balancing:
            return
        if eng.lanes[0].n < self.attention_dp_ranks or self.attention_dp_timeout_iters <= 0:
            st.waiting_iters = 0
        else:
            st.waiting_iters = (st.waiting_iters + steps) % self.attention_dp_timeout_iters

    def reject_reason(self, engine, r) -> str | None:
        if not self.enable_chunked_prefill and r.prompt_tokens > self.max_num_tokens:
            return "token_budget"
        return None

    def schedule(self, eng, lane: int, plan, now: float) -> None:
        budget = self.max_num_tokens
        bs = eng.block_size
        dec = eng.lanes[lane]
        while dec.n and not eng.try_decode_blocks(lane):
            # The reservations make this unreachable; should blocks still run short, pause the
            # newest request rather than stall (MAX_UTILIZATION's way).
            victim = eng.newest_preemptible()
            if victim is None:
                break
            eng.preempt(victim, now)
        if dec.n and dec.committed:
            plan.decode = True
            budget -= dec.n * eng.q
        # Capacity: start waiting requests whose whole KV fits beside the reservations.
        waiting = eng.waiting
        unseen = False
        while waiting and eng.running < self.max_batch_size:
            r = waiting[0]
            if r.kv_ready or (self.overlap_scheduler and eng.unseen(r)):
                unseen = not r.kv_ready
                break
            need = -(-(r.prompt_tokens + r.output_tokens - 1) // bs)
            if eng.reserved_blocks + need > eng.kv.num_blocks:
                break
            if not eng.admit(r, eng.lookup(r), 0, plan, now):
                break
            r.reserved_blocks = need
            eng.reserved_blocks += need
        # Micro-batch: context requests in arrival order within the token budget.
        seqs = (dec.n if plan.decode else 0)
        if ((self._balancing and self._hold_contexts(eng, seqs, now))
                or (self._batch_waiting and self._wait_for_batch(eng, seqs, budget, now))):
            plan.steady = False         # the counter must see every step until the contexts go
            return
        for r in eng.prefilling:
            if budget <= 0 or seqs >= self.max_batch_size:
                break
            left = r.num_tokens - r.scheduled
            if left <= 0:
                continue
            if left <= budget:
                chunk = left
            elif self.enable_chunked_prefill:
                chunk = budget // bs * bs
                if chunk <= 0:
                    break
            else:
                break
            if not eng.grow(r, chunk):
                break
            eng.schedule_chunk(plan, r, chunk)
            budget -= chunk
            seqs += 1
        plan.steady = not plan.prefills and not unseen
