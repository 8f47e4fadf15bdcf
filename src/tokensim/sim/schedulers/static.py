"""Static batching, the baseline continuous batching replaced: a batch is formed from the
waiting queue, runs until every member has finished, and only then is the next one formed.

All prompts of a batch are prefilled in one step; then the batch decodes, members leaving as
they finish (the step time counts only the members still decoding). A request joins a batch
only if the KV blocks for its whole length fit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tokensim.errors import require


@dataclass(frozen=True)
class StaticBatchScheduler:
    # No engine default to follow: HF-style generate() batches; 1 gives a single-server queue.
    max_batch_size: int = 32
    default_block_size: ClassVar[int] = 16

    def __post_init__(self) -> None:
        require(isinstance(self.max_batch_size, int) and self.max_batch_size >= 1, "max_batch_size",
                self.max_batch_size, "a whole number >= 1")

    def max_running(self) -> int:
        return self.max_batch_size

    def new_state(self, engine) -> None:
        return None

    def reject_reason(self, engine, r) -> str | None:
        return None

    def schedule(self, eng, lane: int, plan, now: float) -> None:
        dec = eng.lanes[lane]
        if eng.running:                                   # the batch is still running
            if dec.n and eng.try_decode_blocks(lane):
                plan.decode = True
                plan.steady = True
            elif dec.n:     # unreachable under the reservations; shed the newest member, not stall
                eng.preempt(eng.newest_preemptible(), now)
                self.schedule(eng, lane, plan, now)
            return
        bs = eng.block_size
        waiting = eng.waiting
        while waiting and eng.running < self.max_batch_size:
            r = waiting[0]
            need = -(-(r.prompt_tokens + r.output_tokens - 1) // bs)
            if eng.reserved_blocks + need > eng.kv.num_blocks:
                break
            hit = eng.lookup(r)
            if not eng.admit(r, hit, r.num_tokens - hit.tokens, plan, now):
                break
            r.reserved_blocks = need
            eng.reserved_blocks += need
