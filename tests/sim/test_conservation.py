

def test_closed_loop_with_more_completions_than_requests_left_at_one_instant():
    """Clients freed in the same step each ask for a next request; when fewer requests are left than clients,
    the extra asks find none (a regression: they used to read past the workload)."""
    import numpy as np

    from tokensim.sim import ClosedLoop, ConstantTimer, EngineSpec, VllmScheduler, Workload, simulate

    n = 20
    work = Workload(np.zeros(n), np.full(n, 64), np.full(n, 8))
    spec = EngineSpec(VllmScheduler(), ConstantTimer(0.01), kv_cache_tokens=100_000)
    result = simulate(ClosedLoop(16, work), spec, seed=0)
    assert result.summary["completed"] == n
