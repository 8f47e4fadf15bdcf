"""vLLM V1's scheduler (vllm/v1/core/sched/scheduler.py, `Scheduler.schedule`).

One token budget per step, shared by everything: running requests first (in vLLM's running
list, decoders come before the one partial prefill, which was admitted last), then waiting
requests first-come first-served while the budget, `max_num_seqs` and free KV blocks allow.
When a running request's blocks cannot be allocated the newest running request is preempted
(its KV freed, recomputed later) and put back at the front of the waiting queue; no new
request is admitted in a step that preempted. A waiting request is admitted only when blocks
for all its tokens would fit (`scheduler_reserve_full_isl`), and, with async scheduling, only
once the scheduler has seen it (step n+1 is scheduled while step n runs). Prefix caching reads
cached full blocks, never the prompt's last token (vllm/v1/core/kv_cache_manager.py,
`get_computed_blocks`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tokensim.errors import require
from tokensim.sim.admission import RUNNING


@dataclass(frozen=True)
class VllmScheduler:
    # vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults: `vllm serve` (OPENAI_API_SERVER)
    # on GPUs under 70 GiB or A100s uses 2048 tokens and 256 sequences; on >= 70 GiB GPUs other
    # than A100 (H100, H200, B200, MI300X) it uses 8192 and 1024. Offline LLM(): 8192/16384.
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    # vllm/config/scheduler.py: V1 always chunks prefills; 0 = no per-request chunk cap.
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    # SchedulerConfig.scheduler_reserve_full_isl (True): a waiting request is admitted only if
    # blocks for all its tokens fit, not just its first chunk.
    reserve_full_isl: bool = True
    # SchedulerConfig.async_scheduling, on in vLLM 0.19 (resolved_config of the shared traces'
    # meta.json): step n+1 is scheduled while step n runs, so a request arriving during step n
    # is first seen when step n+2 is scheduled.
    async_scheduling: bool = True
    # vllm/config/cache.py: CacheConfig.block_size 16 on CUDA.
    default_block_size: ClassVar[int] = 16
    # vllm/v1/core/block_pool.py: BlockPool keeps one null block out of the pool.
    null_blocks: ClassVar[int] = 1

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            v = getattr(self, name)
            require(isinstance(v, int) and v >= 1, name, v, "a whole number >= 1")
        # vllm/config/scheduler.py, verify_max_model_len: the same check.
        require(self.max_num_batched_tokens >= self.max_num_seqs, "max_num_batched_tokens",
                self.max_num_batched_tokens, f">= max_num_seqs ({self.max_num_seqs}), as vLLM requires")
        require(isinstance(self.long_prefill_token_threshold, int) and self.long_prefill_token_threshold >= 0,
                "long_prefill_token_threshold", self.long_prefill_token_threshold, "a whole number >= 0")

    def max_running(self) -> int:
        return self.max_num_seqs

    def new_state(self, engine) -> None:
        return None

    def reject_reason(self, engine, r) -> str | None:
        if not self.enable_chunked_prefill and r.prompt_tokens + r.output_tokens > self.max_num_batched_tokens:
            return "token_budget"
        return None

    def schedule(self, eng, lane: int, plan, now: float) -> None:
        budget = self.max_num_batched_tokens
        threshold = self.long_prefill_token_threshold
        dec = eng.lanes[lane]
        preempted = False
        # 1. Running decoders: one query token each (1 + drafts when speculating).
        decode_ok = True
        while dec.n and not eng.try_decode_blocks(lane):
            victim = eng.newest_preemptible()
            if victim is None:
                decode_ok = False
                break
            eng.preempt(victim, now)
            preempted = True
        if dec.n and decode_ok:
            plan.decode = True
            budget -= dec.n * eng.q
        # 2. Running prefills continue in admission order.
        for r in list(eng.prefilling) if eng.prefilling else ():
            if budget <= 0:
                break
            chunk = r.prompt_tokens + r.output - r.scheduled
            if chunk <= 0 or r.state != RUNNING:
                continue
            if 0 < threshold < chunk:
                chunk = threshold
            chunk = min(chunk, budget)
            victim = r
            while not eng.grow(r, chunk):
                victim = eng.newest_preemptible()
                if victim is None:
                    break
                eng.preempt(victim, now)
                preempted = True
                if victim is r:
                    break
            if r.state != RUNNING or victim is None:
                break
            eng.schedule_chunk(plan, r, chunk)
            budget -= chunk
        # 3. Waiting requests, first come first served, unless this step preempted.
        unseen = False
        if not preempted:
            waiting = eng.waiting
            while waiting and budget > 0 and eng.running < self.max_num_seqs:
                r = waiting[0]
                if r.kv_ready:
                    break
                if self.async_scheduling and eng.unseen(r):
                    unseen = True
                    break
                hit = eng.lookup(r)
                chunk = r.prompt_tokens + r.output - hit.tokens
                if 0 < threshold < chunk:
                    chunk = threshold
                if not self.enable_chunked_prefill and chunk > budget:
                    break
                chunk = min(chunk, budget)
                full = r.prompt_tokens + r.output if self.reserve_full_isl else 0
                if not eng.admit(r, hit, chunk, plan, now, must_fit_tokens=full):
                    break
                budget -= chunk
        plan.steady = not plan.prefills and not preempted and not unseen
