"""KV cache: capacity is never exceeded, preemption recovers, prefixes and the host tier help."""
import numpy as np
from sim_support import CheckingTimer, check_engine

from tokensim.sim import AffineTimer, EngineSpec, Replicas, SglangScheduler, VllmScheduler, Workload, simulate, synthetic
from tokensim.sim.kv import KVCache
from tokensim.sim.simulation import Simulation

TIMER = AffineTimer(0.002, 1e-5, 1e-8, 1e-5)


def _checked_run(spec, work, seed=0):
    timer = spec.timer
    sim = Simulation(spec, seed=seed)
    timer.sim = sim
    sim.load(work)
    sim.run()
    for e in sim.engines:
        check_engine(e)
    return sim, sim.result()


def test_blocks_never_exceed_the_cache_and_preempted_requests_complete():
    """A cache of 2,000 tokens under 150 requests of up to 600 tokens: vLLM runs out of blocks,
    preempts, and still completes every request; blocks in use never pass the total."""
    rng = np.random.default_rng(2)
    n = 150
    work = synthetic(n, rng, rate_per_s=100, input_tokens=rng.integers(50, 300, n),
                     output_tokens=rng.integers(50, 300, n))
    spec = EngineSpec(VllmScheduler(max_num_batched_tokens=512, max_num_seqs=32), CheckingTimer(TIMER),
                      kv_cache_tokens=2000)
    sim, res = _checked_run(spec, work)
    s = res.summary
    assert s["preemptions"] > 0
    assert s["completed"] == n
    assert np.all(res.requests["tokens"] == res.requests["output_tokens"])
    used = s["series"]["engine[0]"]["kv_blocks_used"]
    assert max(used) <= 2000 // 16
    assert max(used) >= 0.9 * (2000 // 16)      # it did fill up


def test_sglang_retracts_when_decodes_outgrow_the_pool():
    """SGLang under the same pressure retracts decodes and re-queues them; all complete."""
    rng = np.random.default_rng(4)
    n = 150
    work = synthetic(n, rng, rate_per_s=100, input_tokens=rng.integers(50, 300, n),
                     output_tokens=rng.integers(50, 300, n))
    spec = EngineSpec(SglangScheduler(), CheckingTimer(TIMER), kv_cache_tokens=2000)
    _, res = _checked_run(spec, work)
    assert res.summary["preemptions"] > 0 and res.summary["completed"] == n


def test_prefix_hits_reduce_prefill_tokens():
    """200 requests sharing 4 prefixes of 800 of their 1,000 prompt tokens: after each prefix is
    computed once, later requests read its 50 full blocks (800 tokens) from the cache."""
    rng = np.random.default_rng(5)
    n = 200
    shared = synthetic(n, rng, rate_per_s=20, input_tokens=1000, output_tokens=20, n_prefixes=4,
                       prefix_tokens=800)
    alone = Workload(shared.arrival_s, shared.input_tokens, shared.output_tokens)
    spec = EngineSpec(VllmScheduler(), CheckingTimer(TIMER), kv_cache_tokens=200_000)
    _, with_prefix = _checked_run(spec, shared)
    _, without = _checked_run(spec, alone)
    hit = with_prefix.summary["prefix_hit_tokens"]
    assert without.summary["prefix_hit_tokens"] == 0
    assert hit >= (n - 4 * 3) * 800              # all but the first few per prefix hit all 800
    computed = with_prefix.summary["engines"][0]["prefill_tokens"]
    assert computed == without.summary["engines"][0]["prefill_tokens"] - hit
    assert with_prefix.summary["ttft_s"]["mean"] < without.summary["ttft_s"]["mean"]


def test_evicted_prefixes_come_back_from_the_host_tier():
    """A device cache too small to keep the prefixes between uses evicts them; a host tier
    keeps them and restores them over its bandwidth, so far fewer prefill tokens are computed."""
    rng = np.random.default_rng(6)
    n = 120
    work = synthetic(n, rng, rate_per_s=3, input_tokens=900, output_tokens=200, n_prefixes=12,
                     prefix_tokens=800)
    base = dict(scheduler=VllmScheduler(), kv_cache_tokens=3000)
    _, device_only = _checked_run(EngineSpec(timer=CheckingTimer(TIMER), **base), work)
    _, with_host = _checked_run(EngineSpec(timer=CheckingTimer(TIMER), host_kv_tokens=20_000,
                                           host_bandwidth_bytes_per_s=25e9, kv_bytes_per_token=131_072,
                                           **base), work)
    assert device_only.summary["engines"][0]["kv_evicted_blocks"] > 0
    assert with_host.summary["prefix_hit_tokens"] > 1.5 * device_only.summary["prefix_hit_tokens"]
    assert (with_host.summary["engines"][0]["prefill_tokens"]
            < device_only.summary["engines"][0]["prefill_tokens"])


def test_prefix_aware_routing_finds_the_cached_prefix():
    """Four replicas: routing by prefix id sends each prefix to one replica, so its KV is
    reused; round robin spreads each prefix over all four and hits less."""
    rng = np.random.default_rng(7)
    work = synthetic(400, rng, rate_per_s=40, input_tokens=1000, output_tokens=20, n_prefixes=8,
                     prefix_tokens=900)
    spec = EngineSpec(VllmScheduler(), TIMER, kv_cache_tokens=100_000)
    hits = {router: simulate(work, Replicas(spec, 4, router)).summary["prefix_hit_tokens"]
            for router in ("round_robin", "least_outstanding", "prefix_aware")}
    assert hits["prefix_aware"] > hits["round_robin"]
    assert hits["prefix_aware"] >= (400 - 8) * 896


def test_lru_eviction_takes_the_least_recently_freed_prefix_first():
    """Blocks are reclaimed in the order they were freed, a prefix's last blocks first; blocks
    a running request reads are never evicted, the rest of the same prefix can be."""
    kv = KVCache(10, 16)
    for pid, blocks in ((0, 3), (1, 3)):
        assert kv.allocate(blocks)
        kv.extend_prefix(pid, 0, blocks)
    kv.release_prefix(0, 3)
    kv.release_prefix(1, 3)
    assert kv.available() == 10 and kv.used_blocks == 0
    assert kv.allocate(4 + 2)                     # 4 free, then 2 of prefix 0's 3 blocks
    assert kv.cached_prefix_blocks(0) == 1 and kv.cached_prefix_blocks(1) == 3
    assert not kv.allocate(5)
    kv.acquire_prefix(1, 1)                       # a request reads prefix 1's first block
    assert kv.pin_cost(1, 2) == 1 and kv.available() == 3
    assert kv.allocate(3)                         # prefix 0's last block, prefix 1's last two
    assert kv.cached_prefix_blocks(0) == 0 and kv.cached_prefix_blocks(1) == 1
    assert not kv.allocate(1)
    kv.check()


def test_kv_capacity_and_context_limit_reject_requests_with_reasons():
    """A request longer than the context limit, or needing more blocks than exist, is rejected
    with its reason counted; the others are served."""
    spec = EngineSpec(VllmScheduler(), TIMER, kv_cache_tokens=1600, max_model_len=1200)
    work = Workload(np.array([0.0, 0.1, 0.2]), np.array([1000, 100, 1000]), np.array([300, 10, 100]))
    s = simulate(work, spec).summary
    assert s["rejected"] == {"total": 1, "reasons": {"context_limit": 1}}
    spec = EngineSpec(VllmScheduler(), TIMER, kv_cache_tokens=1000)
    s = simulate(work, spec).summary
    assert s["rejected"] == {"total": 2, "reasons": {"kv_capacity": 2}}
    assert s["completed"] == 1
