"""The KV cache of one engine: fixed-size blocks, prefix reuse, LRU eviction, a host tier.

Blocks are counted, not named. A block is in one of three places:
- free: holds nothing reusable (never used, or freed without a reusable hash);
- in use: referenced by a running request (its own blocks, or a shared prefix it reads);
- evictable: freed but still holding a reusable prefix (or a preempted request's own blocks),
  kept in least-recently-freed order and reclaimed from the front when free blocks run out,
  as vLLM's free-block queue and SGLang's radix-tree LRU do.

Freed blocks that hold nothing reusable join the back of that same order once any reusable
block is queued, so a prefix freed long ago is evicted before blocks freed after it.

A shared prefix (by prefix id) is one entry: its blocks on the device, which running requests
read how many of them, and optionally a copy in host memory. Blocks some reader reads cannot be
evicted; the rest can, last blocks first, so what stays cached is always a leading run.
"""
from __future__ import annotations

from collections import OrderedDict


class _Prefix:
    """One shared prefix's cached blocks, and its running readers by how many blocks they read."""
    __slots__ = ("blocks", "readers", "pinned")

    def __init__(self) -> None:
        self.blocks = 0                     # leading blocks of the prefix on the device
        self.readers: dict[int, int] = {}   # extent read -> running requests reading it
        self.pinned = 0                     # the largest extent read: not evictable


class KVCache:
    """Block accounting for one engine. All counts are blocks of `block_size` tokens."""

    __slots__ = ("num_blocks", "block_size", "prefix_caching", "free", "lru", "evictable",
                 "prefix", "host", "host_blocks", "host_used", "_dead_seq", "_dead_key",
                 "evicted_blocks")

    def __init__(self, num_blocks: int, block_size: int, *, prefix_caching: bool = True,
                 host_blocks: int = 0) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.free = num_blocks
        self.lru: OrderedDict = OrderedDict()   # key -> evictable blocks, least recently freed first
        self.evictable = 0
        self.prefix: dict[int, _Prefix] = {}    # prefix id -> its cached blocks and readers
        self.host: OrderedDict = OrderedDict()  # prefix id -> blocks held in host memory (LRU)
        self.host_blocks = host_blocks
        self.host_used = 0
        self._dead_seq = 0
        self._dead_key: tuple | None = None
        self.evicted_blocks = 0

    # -- counts ---------------------------------------------------------------------------
    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free - self.evictable

    def available(self) -> int:
        """Blocks an allocation may take now (free, then evictable)."""
        return self.free + self.evictable

    # -- allocate and free ----------------------------------------------------------------
    def allocate(self, n: int) -> bool:
        """Take `n` blocks (evicting the least recently freed reusable blocks if needed)."""
        if n <= self.free:
            self.free -= n
            return True
        if n > self.free + self.evictable:
            return False
        n -= self.free
        self.free = 0
        lru = self.lru
        while n:
            key = next(iter(lru))
            blocks = lru[key]
            take = blocks if blocks <= n else n
            n -= take
            self.evictable -= take
            if take == blocks:
                del lru[key]
            else:
                lru[key] = blocks - take
            self._evict(key, take)
        return True

    def release(self, n: int) -> None:
        """Give back `n` blocks that hold nothing reusable."""
        if n <= 0:
            return
        lru = self.lru
        if not lru:
            self.free += n
            return
        key = self._dead_key
        if key is not None and key in lru and next(reversed(lru)) == key:
            lru[key] += n
        else:
            key = ("freed", self._dead_seq)
            self._dead_seq += 1
            self._dead_key = key
            lru[key] = n
        self.evictable += n

    def _evict(self, key, n: int) -> None:
        if type(key) is not int:                # blocks that held nothing reusable
            return
        self.evicted_blocks += n                # reusable blocks lost (a prefix's, or parked)
        if key >= 0:                            # a shared prefix: drop its last n blocks
            entry = self.prefix[key]
            if self.host_blocks:
                self._to_host(key, entry.blocks)
            entry.blocks -= n
            if entry.blocks == 0 and not entry.readers:
                del self.prefix[key]

    # -- shared prefixes ------------------------------------------------------------------
    def cached_prefix_blocks(self, prefix_id: int) -> int:
        entry = self.prefix.get(prefix_id)
        return entry.blocks if entry else 0

    def pin_cost(self, prefix_id: int, extent: int) -> int:
        """Evictable blocks that reading the prefix's first `extent` blocks would pin."""
        entry = self.prefix.get(prefix_id)
        return max(0, min(extent, entry.blocks) - entry.pinned) if entry else 0

    def acquire_prefix(self, prefix_id: int, extent: int) -> None:
        """A running request reads the prefix's first `extent` blocks: they cannot be evicted
        while it runs (the entry's blocks past every reader's extent still can)."""
        entry = self.prefix.get(prefix_id)
        if entry is None:
            entry = self.prefix[prefix_id] = _Prefix()
        entry.readers[extent] = entry.readers.get(extent, 0) + 1
        if extent > entry.pinned:
            entry.pinned = extent
            self._sync(prefix_id, entry, to_tail=False)

    def release_prefix(self, prefix_id: int, extent: int) -> None:
        """A reader of the first `extent` blocks is done; blocks no one reads become evictable
        as the most recently freed."""
        entry = self.prefix[prefix_id]
        left = entry.readers[extent] - 1
        if left:
            entry.readers[extent] = left
        else:
            del entry.readers[extent]
        pinned = max(entry.readers, default=0)
        if pinned < entry.pinned:
            entry.pinned = pinned
            self._sync(prefix_id, entry, to_tail=True)
        if entry.blocks == 0 and not entry.readers:
            del self.prefix[prefix_id]

    def extend_prefix(self, prefix_id: int, old_extent: int, new_extent: int) -> None:
        """A request reading `old_extent` blocks (0: none) whose own next blocks continue the
        cached run hands them to the entry and reads `new_extent` (the caller has checked the
        entry holds exactly `old_extent` blocks)."""
        entry = self.prefix.get(prefix_id)
        if entry is None:
            entry = self.prefix[prefix_id] = _Prefix()
        readers = entry.readers
        if old_extent:
            left = readers[old_extent] - 1
            if left:
                readers[old_extent] = left
            else:
                del readers[old_extent]
        readers[new_extent] = readers.get(new_extent, 0) + 1
        entry.blocks = max(entry.blocks, new_extent)
        entry.pinned = max(readers)
        self._sync(prefix_id, entry, to_tail=False)

    def _sync(self, prefix_id: int, entry: _Prefix, *, to_tail: bool) -> None:
        """Keep the entry's evictable blocks (those past every reader) in the LRU order."""
        want = max(entry.blocks - entry.pinned, 0)
        have = self.lru.get(prefix_id, 0)
        self.evictable += want - have
        if want <= 0:
            self.lru.pop(prefix_id, None)
        elif to_tail:
            self.lru.pop(prefix_id, None)
            self.lru[prefix_id] = want
        else:
            self.lru[prefix_id] = want

    # -- a preempted request's own blocks ---------------------------------------------------
    def park(self, request_id: int, blocks: int) -> None:
        """Keep a preempted request's full blocks reusable (evictable) for when it resumes."""
        key = -1 - request_id
        old = self.lru.pop(key, 0)
        if old:
            self.evictable -= old
            self.release(old)
        if blocks > 0:
            self.lru[key] = blocks
            self.evictable += blocks

    def unpark(self, request_id: int, keep: int) -> int:
        """Take back up to `keep` of a resuming request's parked blocks; returns how many."""
        got = self.lru.pop(-1 - request_id, 0)
        if not got:
            return 0
        self.evictable -= got
        if got > keep:
            self.release(got - keep)
            got = keep
        return got

    def parked_blocks(self, request_id: int) -> int:
        return self.lru.get(-1 - request_id, 0)

    # -- host tier ------------------------------------------------------------------------
    def _to_host(self, prefix_id: int, extent: int) -> None:
        """The prefix's blocks [0, extent) are (or were) written to host memory."""
        have = self.host.pop(prefix_id, 0)
        extent = min(max(have, extent), self.host_blocks)
        self.host_used += extent - have
        self.host[prefix_id] = extent
        while self.host_used > self.host_blocks:
            old_id, old = self.host.popitem(last=False)
            self.host_used -= old

    def host_prefix_blocks(self, prefix_id: int) -> int:
        return self.host.get(prefix_id, 0)

    def check(self) -> None:
        """Internal consistency (tests)."""
        assert 0 <= self.free <= self.num_blocks
        assert self.evictable == sum(self.lru.values())
        assert self.used_blocks >= 0
        for pid, entry in self.prefix.items():
            assert 0 <= entry.pinned <= entry.blocks or not entry.readers
            assert self.lru.get(pid, 0) == max(entry.blocks - entry.pinned, 0)
