"""ScaledTimer: every step of a timer k times as long, to see what a step-cost error does downstream."""
import numpy as np
import pytest

from tokensim.errors import TokensimError
from tokensim.sim import (ConstantTimer, EngineSpec, RecordingTimer, ScaledTimer, StepBatch, VllmScheduler, Workload,
                          simulate)
from tokensim.sim.timer import decode_batch


def test_scaled_steps_and_decode_runs():
    """0.01 s steps scaled by 1.5 take 0.015 s, one by one and in a run of decode steps; a timer without decode runs
    gives none (the simulator then steps one at a time)."""
    t = ScaledTimer(ConstantTimer(0.01), 1.5)
    assert t.step_s(decode_batch(np.array([5, 9]))) == pytest.approx(0.015, rel=1e-15)
    assert np.allclose(t.decode_run_s(np.array([5, 9]), 4), [0.015] * 4, rtol=1e-15)
    assert not hasattr(ScaledTimer(RecordingTimer(ConstantTimer(0.01)), 2.0), "decode_run_s")
    assert isinstance(decode_batch(np.array([1])), StepBatch)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(TokensimError, match="factor"):
            ScaledTimer(ConstantTimer(0.01), bad)


def test_constant_steps_scaled_scale_every_latency():
    """With a constant step time every latency of a replay is a whole number of steps, so scaling the steps by 1.25
    scales TTFT, TPOT and end-to-end time of every request by exactly 1.25 (the same schedule, slower)."""
    n = 40
    work = Workload(np.arange(n) * 0.005, np.full(n, 300), np.full(n, 20))      # arrivals faster than service
    base = simulate(work, EngineSpec(VllmScheduler(max_num_batched_tokens=512, max_num_seqs=4), ConstantTimer(0.01),
                                     kv_cache_tokens=100_000), seed=0)
    slow = simulate(Workload(np.arange(n) * 0.005 * 1.25, np.full(n, 300), np.full(n, 20)),
                    EngineSpec(VllmScheduler(max_num_batched_tokens=512, max_num_seqs=4),
                               ScaledTimer(ConstantTimer(0.01), 1.25), kv_cache_tokens=100_000), seed=0)
    a, b = base.per_request(), slow.per_request()
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        assert np.allclose(b[k], 1.25 * a[k], rtol=1e-9), k
    assert np.nanmax(a["queue_s"]) > 0.1        # requests queued behind the 4-sequence cap: not a trivial replay
