"""The decoding sequences of one engine lane, kept as arrays so a step costs O(1) Python.

Without speculative decoding every sequence in a decode step gains exactly one token, so a
sequence's context is `base + k`, with `k` the lane's count of decode steps: a step only bumps
`k`. A sequence finishes at a known step (a heap of finishing steps), and it needs a new KV
block exactly when its context is a multiple of the block size (a histogram of `base` modulo
the block size gives the count in O(1)). Under speculative decoding each sequence gains
1 + accepted tokens, so contexts and block counts are updated as arrays instead.
"""
from __future__ import annotations

import heapq

import numpy as np

from tokensim.sim.request import ItlLog, Req


class DecodeSet:
    __slots__ = ("n", "k", "base", "base_sum", "end", "held", "seq", "reqs", "hist", "block_size", "heap",
                 "spec", "last_emit_s", "irregular", "capacity", "committed")

    def __init__(self, block_size: int, spec: bool, capacity: int = 64) -> None:
        self.n = 0
        self.k = 0
        self.block_size = block_size
        self.spec = spec
        self.capacity = capacity
        self.base = np.zeros(capacity, dtype=np.int64)
        self.base_sum = 0                                  # sum of base[:n]: contexts sum to base_sum + n k
        self.end = np.zeros(capacity, dtype=np.int64)     # context at which the sequence is done
        self.held = np.zeros(capacity, dtype=np.int64)    # blocks held (speculative mode only)
        self.seq = np.zeros(capacity, dtype=np.int64)     # admission order
        self.reqs: list[Req] = []
        self.hist = [0] * block_size                       # sequences by base % block_size
        self.heap: list[tuple[int, int, Req]] = []        # (finishing k, seq, request)
        self.last_emit_s = 0.0                             # when the sequences last got a token
        self.irregular: dict[Req, float] = {}              # ... except these
        self.committed = 0                                 # steps ahead whose blocks are held

    def _grow(self) -> None:
        cap = 2 * self.capacity
        for name in ("base", "end", "held", "seq"):
            arr = np.zeros(cap, dtype=np.int64)
            arr[:self.n] = getattr(self, name)[:self.n]
            setattr(self, name, arr)
        self.capacity = cap

    # -- membership ---------------------------------------------------------------------------
    def add(self, r: Req, held_blocks: int, last_token_s: float) -> None:
        """Start decoding `r`, whose context is `r.computed` tokens."""
        if self.n == self.capacity:
            self._grow()
        i = self.n
        self.n = i + 1
        base = r.computed - self.k
        end = r.prompt_tokens + r.output_tokens - 1
        self.base[i] = base
        self.base_sum += base
        self.end[i] = end
        self.seq[i] = r.seq
        self.reqs.append(r)
        r.slot = i
        if self.spec:
            self.held[i] = held_blocks
        else:
            self.hist[base % self.block_size] += 1
            r.finish_k = end - base
            heapq.heappush(self.heap, (r.finish_k, r.seq, r))
        if i == 0:
            self.last_emit_s = last_token_s
        elif last_token_s != self.last_emit_s:
            self.irregular[r] = last_token_s

    def context(self, r: Req) -> int:
        return int(self.base[r.slot]) + self.k

    def held_blocks(self, r: Req) -> int:
        if self.spec:
            return int(self.held[r.slot])
        return -(-(self.context(r) + self.committed) // self.block_size)

    def remove(self, r: Req) -> tuple[int, int, float]:
        """Stop decoding `r`; returns its context, the blocks it holds and when it got its last token."""
        i = r.slot
        last = self.n - 1
        base = int(self.base[i])
        ctx = base + self.k
        self.base_sum -= base
        if self.spec:
            held = int(self.held[i])
        else:
            held = -(-(ctx + self.committed) // self.block_size)
            self.hist[base % self.block_size] -= 1
        last_token_s = self.irregular.pop(r, self.last_emit_s) if self.irregular else self.last_emit_s
        if i != last:
            self.base[i] = self.base[last]
            self.end[i] = self.end[last]
            self.seq[i] = self.seq[last]
            if self.spec:
                self.held[i] = self.held[last]
            moved = self.reqs[last]
            self.reqs[i] = moved
            moved.slot = i
        self.reqs.pop()
        self.n = last
        r.slot = -1
        return ctx, held, last_token_s

    # -- one step -------------------------------------------------------------------------------
    def contexts(self) -> np.ndarray:
        return self.base[:self.n] + self.k

    def context_sum(self) -> int:
        """Sum of the sequences' contexts, in O(1)."""
        return self.base_sum + self.n * self.k

    def blocks_needed(self, query_tokens: int) -> int:
        """New KV blocks the next step needs (all sequences, `query_tokens` each)."""
        if not self.spec:
            return self.hist[-self.k % self.block_size]
        n, bs = self.n, self.block_size
        want = (self.base[:n] + (self.k + query_tokens + bs - 1)) // bs
        return int(np.maximum(want - self.held[:n], 0).sum())

    def commit_blocks(self, query_tokens: int) -> None:
        """Record the blocks `blocks_needed` asked for as held (speculative mode)."""
        if self.spec:
            n, bs = self.n, self.block_size
            want = (self.base[:n] + (self.k + query_tokens + bs - 1)) // bs
            np.maximum(self.held[:n], want, out=self.held[:n])

    def run_blocks_needed_from(self, offset: int, m: int) -> int:
        """New blocks for `m` one-token steps starting `offset` steps from now (non-speculative)."""
        bs = self.block_size
        full, part = divmod(m, bs)
        need = full * self.n
        k = self.k + offset
        for j in range(part):
            need += self.hist[-(k + j) % bs]
        return need

    def steps_to_first_finish(self) -> int:
        """Steps until the next sequence is done (non-speculative), dropping stale entries."""
        heap = self.heap
        while heap:
            fk, seq, r = heap[0]
            if r.seq == seq and r.finish_k == fk and 0 <= r.slot < self.n and self.reqs[r.slot] is r:
                return fk - self.k
            heapq.heappop(heap)
        return 1 << 62

    def advance(self, m: int) -> list[Req]:
        """`m` one-token steps for every sequence; returns the sequences now done."""
        self.k += m
        done = []
        heap, k = self.heap, self.k
        while heap and heap[0][0] <= k:
            fk, seq, r = heapq.heappop(heap)
            if r.seq == seq and r.finish_k == fk and 0 <= r.slot < self.n and self.reqs[r.slot] is r:
                done.append(r)
        return done

    def advance_tokens(self, tokens: np.ndarray) -> list[Req]:
        """One speculative step: sequence i gains tokens[i] (>= 1) tokens."""
        n = self.n
        self.base[:n] += tokens - 1
        self.base_sum += int(tokens.sum()) - n
        self.k += 1
        done_idx = np.flatnonzero(self.base[:n] + self.k >= self.end[:n])
        return [self.reqs[i] for i in done_idx]

    def record_emit(self, now: float, itl: ItlLog) -> None:
        """Every sequence got its next token at `now`: log the gaps since their last ones."""
        irregular = self.irregular
        regular = self.n - len(irregular)
        if regular > 0:
            itl.values.append(now - self.last_emit_s)
            itl.weights.append(regular)
        if irregular:
            for t in irregular.values():
                itl.add(now - t, 1)
            irregular.clear()
        self.last_emit_s = now
