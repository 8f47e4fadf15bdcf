"""TensorRT-LLM in-flight batching: a capacity scheduler, then a micro-batch scheduler
(TensorRT-LLM docs, "Scheduler" and "Useful Runtime Options").

Capacity (GUARANTEED_NO_EVICT, the default policy): a started request is never paused, so a
waiting request starts only when the KV blocks for its whole length (prompt + max output)
fit beside those reserved by every started request, and fewer than `max_batch_size` run.
Micro-batch: each step takes the generation requests (one token each) and then context
requests in arrival order within `max_num_tokens`; without context chunking a prompt runs
whole or waits, with it a prompt is cut to the tokens left, in whole KV blocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tokensim.errors import require


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
    # KvCacheConfig.tokens_per_block defaults to 32.
    default_block_size: ClassVar[int] = 32

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_num_tokens"):
            v = getattr(self, name)
            require(isinstance(v, int) and v >= 1, name, v, "a whole number >= 1")
        require(self.capacity_scheduler_policy == "GUARANTEED_NO_EVICT", "capacity_scheduler_policy",
                self.capacity_scheduler_policy, "'GUARANTEED_NO_EVICT' (the only policy simulated)")

    def max_running(self) -> int:
        return self.max_batch_size

    def new_state(self, engine) -> None:
        return None

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
