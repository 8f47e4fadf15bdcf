"""The online mode streams the same tokens as a batch run; disaggregation and the public API."""
import numpy as np
import pytest

import tokensim.sim as sim_pkg
from tokensim.sim import (
    AffineTimer,
    ConstantTimer,
    Disaggregated,
    EngineSpec,
    OnlineSimulation,
    SpeculativeDecoding,
    VllmScheduler,
    Workload,
    simulate,
    synthetic,
)

TIMER = AffineTimer(0.004, 2e-5, 1e-8, 1e-5)


def test_online_streams_every_token_once_in_time_order_and_matches_the_batch_run():
    """Submitting a workload's requests one by one and advancing in small time slices yields,
    per request, tokens summing to its output with `finished` on the last event, and the same
    first and last token times as `simulate` on the same workload."""
    rng = np.random.default_rng(11)
    n = 60
    work = synthetic(n, rng, rate_per_s=30, input_tokens=rng.integers(10, 800, n),
                     output_tokens=rng.integers(1, 60, n))
    spec = EngineSpec(VllmScheduler(max_num_batched_tokens=512, max_num_seqs=16), TIMER, kv_cache_tokens=6000)
    online = OnlineSimulation(spec, seed=1)
    events, t = [], 0.0
    pending = list(range(n))
    while pending or online.next_event_s() is not None:
        t += 0.05
        while pending and work.arrival_s[pending[0]] <= t:     # requests of the coming slice
            i = pending.pop(0)
            assert online.submit(float(work.arrival_s[i]), int(work.input_tokens[i]),
                                 int(work.output_tokens[i])) == i
        events += online.advance(t)
    times = [e.time_s for e in events]
    assert times == sorted(times)
    tokens = np.zeros(n, int)
    last = np.zeros(n)
    for e in events:
        assert not e.finished or tokens[e.request_id] + e.tokens == work.output_tokens[e.request_id]
        tokens[e.request_id] += e.tokens
        last[e.request_id] = e.time_s
    np.testing.assert_array_equal(tokens, work.output_tokens)
    batch = simulate(work, spec, seed=1, fast_forward=False).requests
    np.testing.assert_allclose(last, batch["last_token_s"], atol=1e-9)
    result = online.result().requests
    np.testing.assert_allclose(result["first_token_s"], batch["first_token_s"], atol=1e-9)


def test_online_cancel_stops_a_request_and_frees_its_blocks():
    """A cancelled request emits nothing more, is counted as rejected ('cancelled'), and its KV
    blocks go back to the pool; the others complete."""
    spec = EngineSpec(VllmScheduler(), ConstantTimer(0.01), kv_cache_tokens=10_000)
    online = OnlineSimulation(spec)
    a, b, c = online.submit(0.0, 500, 100), online.submit(0.0, 500, 100), online.submit(5.0, 10, 10)
    early = online.advance(0.2)
    online.cancel(b)
    online.cancel(c)                 # before it arrives
    late = online.advance(10.0)
    assert any(e.request_id == b for e in early) and not any(e.request_id == b for e in late)
    assert not any(e.request_id == c for e in early + late)
    assert sum(e.tokens for e in early + late if e.request_id == a) == 100
    s = online.result().summary
    assert s["completed"] == 1 and s["rejected"] == {"total": 2, "reasons": {"cancelled": 2}}
    assert online.sim.engines[0].kv.used_blocks == 0


def test_online_speculative_events_carry_several_tokens():
    """A verify step streams up to 1 + drafts tokens per event; the request gets all 200."""
    spec = EngineSpec(VllmScheduler(), ConstantTimer(0.01), kv_cache_tokens=10_000,
                      speculative=SpeculativeDecoding((0.9, 0.9, 0.9)))
    online = OnlineSimulation(spec, seed=3)
    rid = online.submit(0.0, 100, 200)
    events = online.advance(100.0)
    assert sum(e.tokens for e in events if e.request_id == rid) == 200
    assert max(e.tokens for e in events) == 4 and events[-1].finished


def test_disaggregated_ttft_comes_from_prefill_and_decode_waits_for_the_transfer():
    """Prefill step 0.1 s, decode step 0.01 s, transfer 0.05 s + 1,000 tokens x 100 kB / 1 GB/s
    = 0.15 s: the first token at 0.1 s, the other 9 after the transfer, the last at
    0.1 + 0.15 + 9 x 0.01 = 0.34 s."""
    dep = Disaggregated(prefill=EngineSpec(VllmScheduler(), ConstantTimer(0.1), kv_cache_tokens=10_000),
                        decode=EngineSpec(VllmScheduler(), ConstantTimer(0.01), kv_cache_tokens=10_000),
                        kv_bytes_per_token=1e5, transfer_bandwidth_bytes_per_s=1e9, transfer_latency_s=0.05)
    res = simulate(Workload(np.array([0.0]), np.array([1000]), np.array([10])), dep)
    req = res.requests
    assert req["first_token_s"][0] == pytest.approx(0.1)
    assert req["last_token_s"][0] == pytest.approx(0.34)
    assert res.summary["itl_s"]["p99"] == pytest.approx(0.16)     # the gap across the transfer


def test_disaggregated_pools_serve_a_loaded_workload():
    """Two prefill and three decode engines: every request completes, prefill engines compute
    all prompts and decode engines all the other tokens."""
    rng = np.random.default_rng(12)
    n = 300
    work = synthetic(n, rng, rate_per_s=50, input_tokens=rng.integers(100, 2000, n),
                     output_tokens=rng.integers(2, 200, n))
    dep = Disaggregated(prefill=EngineSpec(VllmScheduler(max_num_batched_tokens=8192), TIMER, kv_cache_tokens=50_000),
                        decode=EngineSpec(VllmScheduler(), TIMER, kv_cache_tokens=50_000),
                        kv_bytes_per_token=131_072, transfer_bandwidth_bytes_per_s=50e9,
                        prefill_count=2, decode_count=3)
    s = simulate(work, dep).summary
    assert s["completed"] == n
    engines = s["engines"]
    assert sum(e["prefill_tokens"] for e in engines[:2]) == int(work.input_tokens.sum())
    assert sum(e["decode_tokens"] for e in engines[2:]) == int((work.output_tokens - 1).sum())
    assert all(e["decode_tokens"] == 0 for e in engines[:2])


def test_summary_has_the_documented_keys():
    """The summary holds the documented top-level keys and percentile objects."""
    s = simulate(synthetic(20, np.random.default_rng(0), rate_per_s=5), EngineSpec(VllmScheduler(), TIMER,
                 kv_cache_tokens=50_000), slo_ttft_s=0.5, slo_tpot_s=0.05).summary
    for key in ("requests", "completed", "rejected", "in_flight", "ttft_s", "tpot_s", "itl_s", "e2e_s",
                "throughput_tokens_per_s", "requests_per_s", "goodput_requests_per_s", "series"):
        assert key in s
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(s[key]) == {"mean", "p50", "p90", "p99"}
    assert s["goodput_requests_per_s"] <= s["requests_per_s"]


def test_per_request_latencies_agree_with_the_summary():
    """Per-request TTFT, TPOT and E2E average to the summary's means."""
    res = simulate(synthetic(200, np.random.default_rng(1), rate_per_s=20, output_tokens=50),
                   EngineSpec(VllmScheduler(), TIMER, kv_cache_tokens=100_000))
    per = res.per_request()
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert np.nanmean(per[key]) == pytest.approx(res.summary[key]["mean"], rel=1e-12)
    assert np.all(per["queue_s"] >= 0)


def test_public_api_is_pinned():
    """tokensim.sim exports exactly these names."""
    assert sorted(sim_pkg.__all__) == sorted([
        "AffineTimer", "ClosedLoop", "ConstantTimer", "Disaggregated", "EngineSpec", "OnlineSimulation",
        "RecordingTimer", "Replicas", "ScaledTimer", "SglangScheduler", "Simulation", "SimulationResult",
        "SpeculativeDecoding", "StaticBatchScheduler", "StepBatch", "StepTimer", "TokenEvent",
        "TrtllmScheduler", "VllmScheduler", "Workload", "drawn_lengths", "gamma_arrivals", "load_trace",
        "load_trace_measurements", "poisson_arrivals", "range_lengths", "simulate", "synthetic"])
    for name in sim_pkg.__all__:
        assert getattr(sim_pkg, name) is not None
