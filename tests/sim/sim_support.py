"""Shared test helpers: an engine-state checker that runs at every step."""
from __future__ import annotations

from tokensim.sim.engine import RUNNING


def check_engine(e) -> None:
    """KV accounting: blocks in use = blocks the running requests hold + pinned prefixes."""
    kv = e.kv
    kv.check()
    held = 0
    for r in e.prefilling:
        assert r.state == RUNNING and r.slot < 0
        assert r.private_blocks >= 0 and r.shared_blocks >= 0
        held += r.private_blocks
        assert r.held_blocks >= -(-r.scheduled // e.block_size)
    for dec in e.lanes:
        assert len(dec.reqs) == dec.n
        assert dec.context_sum() == int(dec.contexts().sum())      # the O(1) sum the timers read
        for i, r in enumerate(dec.reqs):
            assert r.slot == i
            held += dec.held_blocks(r) - r.shared_blocks
            ctx = dec.context(r)
            assert r.prompt_tokens <= ctx <= r.prompt_tokens + r.output_tokens - 1
    pinned = sum(entry.pinned for entry in kv.prefix.values())
    assert kv.used_blocks >= held + pinned, (kv.used_blocks, held, pinned)
    if e.role != "prefill":
        assert kv.used_blocks == held + pinned, (kv.used_blocks, held, pinned)
    assert 0 <= kv.used_blocks <= kv.num_blocks
    assert e.running == len(e.prefilling) + sum(d.n for d in e.lanes) or e.role == "prefill"


class CheckingTimer:
    """A timer that checks every engine of `sim` each time it is asked about a step."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.sim = None
        self.calls = 0

    def step_s(self, batch) -> float:
        self.calls += 1
        assert batch.context_sum == int(batch.decode_context_tokens.sum())
        if self.sim is not None:
            for e in self.sim.engines:
                check_engine(e)
        return self.inner.step_s(batch)
