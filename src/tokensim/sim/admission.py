"""What schedulers may ask of an engine, and the KV bookkeeping behind the answers.

A scheduler fills a step's `Plan` only through these calls: `lookup` (a waiting request's
cached tokens), `admit` (start the queue's head with a first chunk, if its blocks fit),
`schedule_chunk` and `grow` (a running prefill's next chunk), `try_decode_blocks` (blocks for a
lane's decode step), `newest_preemptible` and `preempt` (recompute later), `unseen` (arrived
after the running step began). Blocks a request holds are `shared_blocks` of a prefix entry it
reads plus its own `private_blocks`; while it decodes, its `DecodeSet` counts them.
"""
from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from tokensim.sim.decode import DecodeSet
from tokensim.sim.kv import KVCache
from tokensim.sim.request import Req

WAITING, RUNNING, DONE = 0, 1, 2


class Plan:
    """What one step runs: a lane's decoders (all of them, or none) and prefill chunks; once
    launched, also how it runs (steps taken at once, their times, speculative tokens)."""
    __slots__ = ("lane", "decode", "prefills", "chunks", "cached", "steady", "extra_s", "start_s", "steps",
                 "durations", "tokens")

    def __init__(self, lane: int, start_s: float) -> None:
        self.lane = lane
        self.start_s = start_s
        self.decode = False
        self.prefills: list[Req] = []      # requests prefilling a chunk this step, and beside them as columns:
        self.chunks: list[int] = []        # each one's chunk tokens
        self.cached: list[int] = []        # and the tokens of its prompt already in the KV cache
        self.steady = False     # the next step would be the same unless an event or a finish
        self.extra_s = 0.0      # time added to the step (host-tier restores)
        self.steps = 1                              # identical decode steps taken at once
        self.durations: np.ndarray | None = None    # their times after the first
        self.tokens: np.ndarray | None = None       # speculative decoding: tokens per sequence


class Hit:
    """Where a waiting request's cached tokens come from, in blocks."""
    __slots__ = ("shared", "restore", "parked", "pin", "tokens")

    def __init__(self, shared=0, restore=0, parked=0, pin=0, block_size=1) -> None:
        self.shared = shared      # blocks of a shared prefix on the device
        self.restore = restore    # blocks of it to bring back from host memory
        self.parked = parked      # its own blocks kept from before it was preempted
        self.pin = pin            # evictable blocks that reading these takes out of the pool
        self.tokens = (shared + restore + parked) * block_size


_NO_HIT = Hit()


class Admission:
    """Mixed into `Engine`: the calls schedulers make and the KV bookkeeping they need."""

    # set up by Engine.__init__
    kv: KVCache
    block_size: int
    q: int
    waiting: deque[Req]
    prefilling: list[Req]
    lanes: list[DecodeSet]
    lane_busy: list[bool]
    running: int
    reserved_blocks: int
    preemptions: int
    restore_s_per_block: float
    seen_before_s: float
    dropping: list[Req]
    sim: Any
    _seq: int

    def lookup(self, r: Req) -> Hit:
        """The cached tokens a waiting request would start from (never all of them: at least
        one token is computed to produce logits)."""
        kv = self.kv
        if (r.prefix_id < 0 and r.parked_start < 0) or not kv.prefix_caching:
            return _NO_HIT
        bs = self.block_size
        cap = (r.prompt_tokens + r.output - 1) // bs
        shared = restore = pin = 0
        if r.prefix_id >= 0:
            want = min(r.prefix_tokens // bs, cap)
            shared = min(kv.cached_prefix_blocks(r.prefix_id), want)
            if shared:
                pin = kv.pin_cost(r.prefix_id, shared)
            if shared < want and kv.host_blocks:
                restore = max(0, min(kv.host_prefix_blocks(r.prefix_id), want) - shared)
        parked = 0
        if r.parked_start >= 0 and r.parked_start == shared + restore:
            parked = min(kv.parked_blocks(r.rid), cap - shared - restore)
            pin += parked
        if not (shared or restore or parked):
            return _NO_HIT
        return Hit(shared, restore, parked, pin, bs)

    def admit(self, r: Req, hit: Hit, chunk: int, plan: Plan, now: float, *, must_fit_tokens: int = 0) -> bool:
        """Admit the head of the waiting queue with its first chunk, if its blocks fit (and, when
        `must_fit_tokens` is given, if blocks for that many of its tokens would fit)."""
        kv, bs = self.kv, self.block_size
        new_blocks = -(-(hit.tokens + chunk) // bs) - hit.shared - hit.parked
        free = kv.available() - hit.pin
        if free < new_blocks or free < -(-must_fit_tokens // bs) - hit.shared - hit.parked:
            return False
        self.waiting.popleft()
        if hit.shared:
            kv.acquire_prefix(r.prefix_id, hit.shared)
        if hit.parked:
            kv.unpark(r.rid, hit.parked)
        kv.allocate(new_blocks)
        if hit.restore:
            kv.extend_prefix(r.prefix_id, hit.shared, hit.shared + hit.restore)
            plan.extra_s += hit.restore * self.restore_s_per_block
        r.parked_start = -1
        r.shared_blocks = hit.shared + hit.restore
        r.private_blocks = hit.parked + new_blocks - hit.restore
        r.computed = r.scheduled = hit.tokens
        r.state = RUNNING
        r.seq = self._seq
        self._seq += 1
        self.running += 1
        self.prefilling.append(r)
        self.sim.on_scheduled(r, now, hit.tokens)
        if chunk:
            self.schedule_chunk(plan, r, chunk)
        return True

    def unseen(self, r: Req) -> bool:
        """Whether `r` joined the queue after the running step began: an engine that schedules
        the next step while one runs (async / overlap scheduling) cannot have seen it yet."""
        return r.queued_s > self.seen_before_s

    def schedule_chunk(self, plan: Plan, r: Req, chunk: int) -> None:
        plan.prefills.append(r)
        plan.chunks.append(chunk)
        plan.cached.append(r.scheduled)
        r.scheduled += chunk

    def grow(self, r: Req, chunk: int) -> bool:
        """Blocks for a running prefill's next chunk."""
        need = -(-(r.scheduled + chunk) // self.block_size) - r.shared_blocks - r.private_blocks
        if need <= 0:
            return True
        if not self.kv.allocate(need):
            return False
        r.private_blocks += need
        return True

    def try_decode_blocks(self, lane: int) -> bool:
        """Blocks for one decode step of every sequence in the lane."""
        dec = self.lanes[lane]
        if dec.spec:
            if not self.kv.allocate(dec.blocks_needed(self.q)):
                return False
            dec.commit_blocks(self.q)
        elif not self.kv.allocate(dec.hist[-dec.k % dec.block_size]):    # DecodeSet.blocks_needed, inlined
            return False
        dec.committed = 1
        return True

    def admit_ready(self, r: Req, lane: int, now: float) -> bool:
        """Admit a request whose prompt KV came from a prefill engine straight to decoding."""
        blocks = -(-r.computed // self.block_size)
        if not self.kv.allocate(blocks):
            return False
        self.waiting.popleft()
        r.private_blocks, r.shared_blocks = blocks, 0
        r.state = RUNNING
        r.seq = self._seq
        self._seq += 1
        self.running += 1
        self.sim.on_scheduled(r, now, 0)
        r.lane = lane
        self.lanes[lane].add(r, blocks, r.last_token_s)
        return True

    def newest_preemptible(self) -> Req | None:
        """The most recently admitted running request that no step in flight is using."""
        best = None
        for r in reversed(self.prefilling):
            if r.scheduled == r.computed:
                best = r
                break
        for lane, dec in enumerate(self.lanes):
            if dec.n and not self.lane_busy[lane]:
                i = int(np.argmax(dec.seq[:dec.n]))
                cand = dec.reqs[i]
                if best is None or cand.seq > best.seq:
                    best = cand
        return best

    def preempt(self, r: Req, now: float, *, front: bool = True, park: bool = True) -> None:
        """Stop `r`, free its KV (recompute later) and put it back in the waiting queue."""
        if r.slot >= 0:
            self._leave_decoding(r)
        else:
            self.prefilling.remove(r)
        self._free_kv(r, park=park)
        r.computed = r.scheduled = 0
        r.state = WAITING
        r.queued_s = -1.0               # the scheduler knows it already
        self.running -= 1
        self.preemptions += 1
        self.sim.on_preempted(r)
        if front:
            self.waiting.appendleft(r)
        else:
            self.waiting.append(r)

    def decoding_count(self) -> int:
        return sum(d.n for d in self.lanes)

    # -- internals ----------------------------------------------------------------------------
    def _leave_decoding(self, r: Req) -> None:
        ctx, held, r.last_token_s = self.lanes[r.lane].remove(r)
        r.computed = r.scheduled = ctx
        r.output = ctx - r.prompt_tokens + 1
        r.private_blocks = held - r.shared_blocks
        r.lane = -1

    def _free_kv(self, r: Req, *, park: bool) -> None:
        kv = self.kv
        private = r.private_blocks
        if park and kv.prefix_caching:
            full = min(max(r.computed // self.block_size - r.shared_blocks, 0), private)
            kv.release(private - full)
            kv.park(r.rid, full)
            r.parked_start = r.shared_blocks if full else -1
        else:
            kv.release(private)
        if r.shared_blocks:
            kv.release_prefix(r.prefix_id, r.shared_blocks)
        r.shared_blocks = r.private_blocks = 0
        if r.reserved_blocks:
            self.reserved_blocks -= r.reserved_blocks
            r.reserved_blocks = 0

    def _publish_prefix(self, r: Req) -> None:
        """Hand the request's computed blocks of its prefix to the shared entry, if they continue
        the entry's cached run (so later requests with this prefix id can read them)."""
        kv = self.kv
        extent = min(r.prefix_tokens, r.computed) // self.block_size
        if extent <= r.shared_blocks:
            return
        if kv.cached_prefix_blocks(r.prefix_id) != r.shared_blocks:
            return
        moved = extent - r.shared_blocks
        kv.extend_prefix(r.prefix_id, r.shared_blocks, extent)
        r.shared_blocks = extent
        r.private_blocks -= moved

    def cancel(self, r: Req) -> None:
        """Drop a request whose client went away: at once if it waits, else at the next step
        boundary where no step in flight uses it (its KV is freed then)."""
        r.cancelled = True
        if r.state == WAITING and r in self.waiting:
            self.waiting.remove(r)
            r.state = DONE
        elif r.state == RUNNING:
            self.dropping.append(r)

    def _drop_cancelled(self) -> None:
        keep = []
        for r in self.dropping:
            if r.state != RUNNING or r.engine is not self:
                continue
            if r.slot >= 0 and not self.lane_busy[r.lane]:
                self._leave_decoding(r)
            elif not (r in self.prefilling and r.scheduled == r.computed):
                keep.append(r)          # in a step in flight, or its KV on the way out
                continue
            else:
                self.prefilling.remove(r)
            self._free_kv(r, park=False)
            r.state = DONE
            self.running -= 1
        self.dropping = keep
