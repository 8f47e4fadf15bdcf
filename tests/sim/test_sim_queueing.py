"""Queueing theory the simulator must reproduce with a constant step time.

Static batching with one request per batch and one output token makes the engine a single
server with deterministic service time D (one step), fed by Poisson arrivals: an M/D/1 queue.
Its mean wait is the Pollaczek-Khinchine value rho D / (2 (1 - rho)).
"""
import numpy as np
import pytest

from tokensim.sim import ConstantTimer, EngineSpec, StaticBatchScheduler, simulate, synthetic

D = 0.01   # seconds per step = service time


def _md1(rho: float, n: int, seed: int):
    rng = np.random.default_rng(seed)
    work = synthetic(n, rng, rate_per_s=rho / D, input_tokens=16, output_tokens=1)
    spec = EngineSpec(StaticBatchScheduler(max_batch_size=1), ConstantTimer(D), kv_cache_tokens=1024)
    return simulate(work, spec, seed=seed)


@pytest.mark.parametrize("rho,n", [(0.5, 40_000), (0.8, 100_000)])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho, n):
    """Mean wait = rho D / (2 (1 - rho)) within 4 standard errors, the standard error from 20
    batch means of the waits (waits are correlated, so the plain sample error would be too
    small); with these n one standard error is about 1.5 % of the mean at rho 0.5 and 3 % at
    rho 0.8, so the check is 6 % and 12 % wide."""
    res = _md1(rho, n, seed=7)
    req = res.requests
    wait = req["first_scheduled_s"] - req["arrival_s"]
    assert res.summary["completed"] == n
    np.testing.assert_allclose(req["first_token_s"] - req["first_scheduled_s"], D, rtol=1e-9)
    expected = rho * D / (2 * (1 - rho))
    batch_means = wait[: n // 20 * 20].reshape(20, -1).mean(axis=1)
    stderr = batch_means.std(ddof=1) / np.sqrt(20)
    assert abs(wait.mean() - expected) < 4 * stderr, (wait.mean(), expected, stderr)
    assert 4 * stderr < 0.15 * expected        # the check is tight enough to mean something


def test_throughput_saturates_at_the_step_time_bound():
    """Offered twice the capacity, the server completes one request per step: 1/D per second."""
    res = _md1(2.0, 4000, seed=3)
    assert res.summary["requests_per_s"] == pytest.approx(1 / D, rel=0.01)


def test_above_capacity_ttft_grows_without_bound():
    """At 1.5x capacity the queue grows linearly: the last tenth of requests waits far longer
    than the first tenth, and doubling the run roughly doubles the mean TTFT."""
    short = _md1(1.5, 2000, seed=5).requests
    long = _md1(1.5, 4000, seed=5).requests
    ttft_short = short["first_token_s"] - short["arrival_s"]
    ttft_long = long["first_token_s"] - long["arrival_s"]
    tenth = len(ttft_short) // 10
    assert ttft_short[-tenth:].mean() > 10 * ttft_short[:tenth].mean()
    assert ttft_long.mean() > 1.7 * ttft_short.mean()
