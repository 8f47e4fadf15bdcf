"""Each scheduler forms its batches the way its engine does, checked against hand calculation."""
import numpy as np
import pytest

from tokensim.sim import (
    ConstantTimer,
    EngineSpec,
    RecordingTimer,
    SglangScheduler,
    SpeculativeDecoding,
    StaticBatchScheduler,
    TrtllmScheduler,
    VllmScheduler,
    Workload,
    simulate,
)

D = 0.01


def _run(scheduler, arrivals, inputs, outputs, kv_tokens=200_000, timer=None, **spec_kw):
    rec = RecordingTimer(timer or ConstantTimer(D))
    spec = EngineSpec(scheduler, rec, kv_cache_tokens=kv_tokens, **spec_kw)
    res = simulate(Workload(np.array(arrivals, float), np.array(inputs), np.array(outputs)), spec,
                   fast_forward=False)
    return res, rec.batches


def _chunks(batches):
    return [b.prefill_chunk_tokens.tolist() for b in batches]


def test_vllm_chunks_a_long_prompt_to_the_token_budget():
    """A 5,000-token prompt alone under max_num_batched_tokens 2048: 2048 + 2048 + 904."""
    res, batches = _run(VllmScheduler(max_num_batched_tokens=2048), [0.0], [5000], [2])
    assert _chunks(batches)[:3] == [[2048], [2048], [904]]
    assert [b.prefill_cached_tokens.tolist() for b in batches[:3]] == [[0], [2048], [4096]]
    assert res.summary["ttft_s"]["mean"] == pytest.approx(3 * D)


def test_vllm_decodes_take_their_token_from_the_budget_first():
    """With one request decoding, each step's budget left for the prompt is 2048 - 1 = 2047:
    chunks 2047, 2047 and 5000 - 4094 = 906, each beside one decode token. Request 1 arrives
    during step 2; with async scheduling (vLLM 0.19's default) step 3 was scheduled while step 2
    ran, so its prefill starts at step 4; without, at step 3."""
    _, batches = _run(VllmScheduler(max_num_batched_tokens=2048), [0.0, 0.015], [100, 5000], [50, 3])
    assert _chunks(batches)[:6] == [[100], [], [], [2047], [2047], [906]]
    assert [b.num_decode_seqs for b in batches[:6]] == [0, 1, 1, 1, 1, 1]
    res, batches = _run(VllmScheduler(max_num_batched_tokens=2048, async_scheduling=False), [0.0, 0.015],
                        [100, 5000], [50, 3])
    assert _chunks(batches)[:5] == [[100], [], [2047], [2047], [906]]
    assert res.summary["completed"] == 2


def test_vllm_reserve_full_isl_admits_only_whole_prompts():
    """64 blocks of 16 tokens (one kept back as vLLM's null block: 63 usable). A decoding request
    holds 7 blocks; a 1,000-token prompt needs 63 blocks in all, so with scheduler_reserve_full_isl
    it waits although its first chunk (512 - 1 decode token = 511 tokens, 32 blocks) would fit;
    without, it starts (and is preempted later, when the blocks run out)."""
    kw = dict(max_num_batched_tokens=512, max_num_seqs=8, async_scheduling=False)
    for reserve, started in ((True, False), (False, True)):
        _, batches = _run(VllmScheduler(reserve_full_isl=reserve, **kw), [0.0, 0.015], [100, 1000], [40, 2],
                          kv_tokens=1024)
        assert (_chunks(batches)[2] == [511]) is started


def test_vllm_admits_waiting_requests_fcfs_within_the_budget_and_max_num_seqs():
    """Five 600-token prompts at once, budget 2048, max_num_seqs 4: step 1 takes 600 + 600 +
    600 + 248 (chunked), step 2 finishes the fourth (352) beside 3 decodes; the fifth waits for a
    free sequence slot."""
    res, batches = _run(VllmScheduler(max_num_batched_tokens=2048, max_num_seqs=4), [0.0] * 5, [600] * 5,
                        [3] * 5)
    assert _chunks(batches)[:2] == [[600, 600, 600, 248], [352]]
    assert batches[1].num_decode_seqs == 3
    fifth = res.requests["first_scheduled_s"][4]
    assert fifth >= res.requests["last_token_s"][:3].min() - 1e-12


def test_vllm_preempts_the_newest_request_and_it_still_completes():
    """KV for 6 blocks of 16 tokens: two requests growing to 3 + 4 blocks cannot both fit; the
    newer one is preempted (recomputed later) and both complete."""
    res, batches = _run(VllmScheduler(max_num_batched_tokens=256, max_num_seqs=4), [0.0, 0.0], [30, 30],
                        [20, 40], kv_tokens=96)
    pre = res.requests["preemptions"]
    assert res.summary["completed"] == 2
    assert pre[1] >= 1 and pre[0] == 0


def test_sglang_runs_prefill_and_decode_in_separate_steps():
    """Without mixed chunked prefill no step holds both prefill chunks and decodes; a
    20,000-token prompt is cut at chunked_prefill_size 8192: 8192, 8192, 3616."""
    res, batches = _run(SglangScheduler(), [0.0, 0.0], [100, 20_000], [30, 2])
    assert all(not (b.num_decode_seqs and b.num_prefill_seqs) for b in batches)
    chunks = [c for c in _chunks(batches) if c]
    assert chunks[0] == [100, 8092]          # 8192 chunk tokens: 100 + 8092
    assert chunks[1:3] == [[8192], [3716]]   # 20,000 - 8092 - 8192 = 3716
    assert res.summary["completed"] == 2


def test_sglang_mixed_chunk_shares_the_chunk_with_running_decodes():
    """With enable_mixed_chunk, a prefill chunk rides along with the decodes and the chunk
    budget shrinks by the number of running requests (8192 - 1 = 8191)."""
    res, batches = _run(SglangScheduler(enable_mixed_chunk=True), [0.0, 0.015], [100, 20_000], [30, 2])
    mixed = [b for b in batches if b.num_decode_seqs and b.num_prefill_seqs]
    assert mixed and mixed[0].prefill_chunk_tokens.tolist() == [8191]


def test_sglang_new_token_ratio_reserves_room_for_running_requests():
    """KV pool 10,000 tokens. A (1,000 in, 5,000 out) is admitted and decodes; B (3,200 in,
    3,000 out) waits until  (9,000 - j) - 4,096 x (0.7 - j x 0.602/600)  >  3,200 + 3,000,
    where j counts A's decode steps: j = 21 gives 6,198.1, j = 22 gives 6,201.2. So B's prefill
    is step 1 (A's prefill) + 22 decode steps + 1 = the 24th step."""
    res, batches = _run(SglangScheduler(), [0.0, 0.0], [1000, 3200], [5000, 3000], kv_tokens=10_000)
    chunks = _chunks(batches)
    assert chunks[0] == [1000] and all(c == [] for c in chunks[1:23]) and chunks[23] == [3200]
    # B with 3,000 input tokens fits at once: 9,000 - 4,096 x 0.7 = 6,132.8 > 6,000
    res, batches = _run(SglangScheduler(), [0.0, 0.0], [1000, 3000], [5000, 3000], kv_tokens=10_000)
    assert _chunks(batches)[1] == [3000]


def test_sglang_ignore_eos_admits_only_what_runs_to_completion():
    """SGLang's add_one_req_ignore_eos (requests ignoring EOS, radix cache off). KV pool 10,000 tokens; A (1,000 in,
    5,000 out) decodes, B (3,000 in, 3,000 out) waits. After A's j-th decode A has 4,999 - j tokens left and holds
    1,001 + j, and the pool less B's prompt has 10,000 - (1,000 + j) - 3,000 = 6,000 - j free. Retiring the request
    with fewer tokens left first, each must leave more than 1 token per request still running: while B has fewer
    left, 6,000 - j - 2 x 3,000 = -j > 2 never holds; once A has fewer, 6,000 - j - 2 x (4,999 - j) > 2 needs
    j > 4,000, and then B alone: 6,000 - j + (1,001 + j) - 3,000 = 4,001 > 1. So B's prefill follows A's 4,001st
    decode; the regular path admits B at once (the test above)."""
    res, batches = _run(SglangScheduler(ignore_eos=True), [0.0, 0.0], [1000, 3000], [5000, 3000], kv_tokens=10_000)
    chunks = _chunks(batches)
    b_step = next(i for i, c in enumerate(chunks) if c == [3000])
    assert chunks[0] == [1000] and b_step - 1 == 4001
    assert res.summary["completed"] == 2


def test_sglang_ignore_eos_path_skips_the_max_prefill_tokens_check():
    """On the ignore-EOS path a request joins the prefill batch before the input budget is checked (the batch stops
    once it is spent): two 800-token prompts under max_prefill_tokens 1,000 share one step; the regular path
    refuses the second (800 >= 1,000 - 800) and runs it next."""
    _, regular = _run(SglangScheduler(max_prefill_tokens=1000), [0.0, 0.0], [800, 800], [5, 5])
    _, ignore = _run(SglangScheduler(max_prefill_tokens=1000, ignore_eos=True), [0.0, 0.0], [800, 800], [5, 5])
    assert _chunks(regular)[:2] == [[800], [800]]
    assert _chunks(ignore)[0] == [800, 800]


def test_trtllm_guaranteed_no_evict_reserves_the_whole_request():
    """10 blocks of 32 tokens. A needs ceil((100 + 150 - 1) / 32) = 8 blocks at its longest, B
    needs ceil(99 / 32) = 4: 12 > 10, so B starts only when A is done, never preempted."""
    res, _ = _run(TrtllmScheduler(), [0.0, 0.0], [100, 50], [150, 50], kv_tokens=320)
    req = res.requests
    assert req["first_scheduled_s"][1] >= req["last_token_s"][0]
    assert res.summary["preemptions"] == 0 and res.summary["completed"] == 2


def test_trtllm_context_chunking_in_whole_blocks():
    """max_num_tokens 100 with chunking: a 250-token prompt runs 96 (3 blocks of 32), 96, 58.
    Without chunking a prompt longer than max_num_tokens is rejected."""
    _, batches = _run(TrtllmScheduler(max_num_tokens=100, enable_chunked_prefill=True), [0.0], [250], [2])
    assert _chunks(batches)[:3] == [[96], [96], [58]]
    res, _ = _run(TrtllmScheduler(max_num_tokens=100), [0.0], [250], [2])
    assert res.summary["rejected"] == {"total": 1, "reasons": {"token_budget": 1}}


def _adp_ttfts(arrivals, **kw):
    sched = TrtllmScheduler(attention_dp_ranks=2, attention_dp_balance=True, attention_dp_timeout_iters=5,
                            overlap_scheduler=False, **kw)
    res, _ = _run(sched, arrivals, [10] * len(arrivals), [100] * len(arrivals))
    req = res.requests
    return (req["first_token_s"] - req["arrival_s"]).tolist()


def test_trtllm_attention_dp_balance_holds_a_lone_context_until_the_timeout():
    """Two ranks, timeout 5 iterations, steps of 10 ms. A and B prefill together at t = 0 (no rank generates yet,
    so nothing is held) and decode from 0.01 on; with no context request the held-iterations counter counts every
    loop, 1 at 0.01 ... 5 at 0.05 (release, back to 0), 1 at 0.06. C arrives at 0.062 and is first seen at 0.07
    (counter 2); alone it is one context for two ranks, so it waits for 3, 4 and 5 at 0.10 and prefills in
    [0.10, 0.11]: TTFT 0.11 - 0.062 = 0.048 s. Without balancing it prefills in [0.07, 0.08]: 0.018 s."""
    ttft = _adp_ttfts([0.0, 0.0, 0.062], attention_dp_batching_wait_iters=0)
    assert ttft[2] == pytest.approx(0.048)
    # skipping ahead through runs of decode steps counts them too (the scheduler's repeat_steady)
    sched = TrtllmScheduler(attention_dp_ranks=2, attention_dp_balance=True, attention_dp_timeout_iters=5,
                            attention_dp_batching_wait_iters=0, overlap_scheduler=False)
    fast = simulate(Workload(np.array([0.0, 0.0, 0.062]), np.array([10] * 3), np.array([100] * 3)),
                    EngineSpec(sched, ConstantTimer(D), kv_cache_tokens=200_000), fast_forward=True).requests
    assert (fast["first_token_s"] - fast["arrival_s"]).tolist() == pytest.approx(ttft)
    assert ttft[0] == ttft[1] == pytest.approx(D)
    plain, _ = _run(TrtllmScheduler(overlap_scheduler=False), [0.0, 0.0, 0.062], [10] * 3, [100] * 3)
    req = plain.requests
    assert (req["first_token_s"] - req["arrival_s"])[2] == pytest.approx(0.018)


def test_trtllm_attention_dp_balance_releases_one_context_per_rank_after_the_batching_wait():
    """C and D arrive together at 0.062: one context for each of the two ranks, so the counter resets and they go
    at 0.07 (TTFT 0.018 s); with batching_wait_iters 2 and every rank generating they wait the loops at 0.07 and
    0.08 and prefill in [0.09, 0.10]: TTFT 0.038 s."""
    ttft = _adp_ttfts([0.0, 0.0, 0.062, 0.062], attention_dp_batching_wait_iters=0)
    assert ttft[2:] == pytest.approx([0.018, 0.018])
    ttft = _adp_ttfts([0.0, 0.0, 0.062, 0.062], attention_dp_batching_wait_iters=2)
    assert ttft[2:] == pytest.approx([0.038, 0.038])


def test_trtllm_batch_waiting_holds_contexts_for_a_fuller_step():
    """max_num_tokens 100, batch_wait_max_tokens_ratio 0.8, timeout 3 iterations, steps of 10 ms. A decodes from
    0.01; B (20 tokens) arrives at 0.032 and is seen at 0.04: 1 generation token + 20 = 21 < 80, so it waits the
    loops at 0.04, 0.05 and 0.06 (counter 1, 2, 3) and goes at 0.07: TTFT 0.08 - 0.032 = 0.048 s. A 79-token B
    makes 1 + 79 = 80 tokens, enough at once: TTFT 0.05 - 0.032 = 0.018 s."""
    sched = TrtllmScheduler(max_num_tokens=100, batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=0.8,
                            overlap_scheduler=False)
    for prompt, expected in ((20, 0.048), (79, 0.018)):
        res, _ = _run(sched, [0.0, 0.032], [10, prompt], [100, 5])
        req = res.requests
        assert (req["first_token_s"] - req["arrival_s"]).tolist() == pytest.approx([D, expected])


def test_static_batching_waits_for_the_whole_batch():
    """Batches of 2: requests 3 and 4 start only after both of the first two are done, and each
    batch's prompts are prefilled together in one step."""
    res, batches = _run(StaticBatchScheduler(max_batch_size=2), [0.0] * 4, [10, 20, 30, 40], [5, 50, 5, 5])
    req = res.requests
    assert _chunks(batches)[0] == [10, 20]
    assert req["first_scheduled_s"][2] >= req["last_token_s"][:2].max()
    assert [c for c in _chunks(batches) if c] == [[10, 20], [30, 40]]


def test_speculative_decoding_yields_the_expected_tokens_per_verify_step():
    """Rates (0.8, 0.5): a verify step yields 1 + 0.8 + 0.8 x 0.5 = 2.2 tokens on average; each
    decode in the step carries 1 + 2 query tokens."""
    sd = SpeculativeDecoding((0.8, 0.5))
    assert sd.expected_tokens_per_step == pytest.approx(2.2)
    n, out = 200, 400
    res, batches = _run(VllmScheduler(), [0.0] * n, [50] * n, [out] * n, speculative=sd)
    decode_steps = sum(1 for b in batches if b.num_decode_seqs)
    seq_steps = sum(b.num_decode_seqs for b in batches)
    assert all(b.query_tokens_per_decode == 3 for b in batches)
    per_step = n * (out - 1) / seq_steps
    # the per-sequence last step is cut at the output length, so per_step is a little lower
    assert 2.05 < per_step < 2.2 + 0.03
    assert decode_steps < out / 1.8          # vs out - 1 steps without drafts


def test_pipeline_token_latency_is_the_sum_of_stage_times_and_the_interval_the_cycle():
    """Two stages timed 0.01 s and 0.03 s: a token takes 0.04 s through the pipeline; with two
    users in two micro-batches the slower stage sets the pace, so each user's tokens come
    2 x 0.03 = 0.06 s apart."""
    rec = RecordingTimer(ConstantTimer(0.04))
    spec = EngineSpec(VllmScheduler(), rec, kv_cache_tokens=10_000, pipeline_stages=2,
                      stage_timers=(ConstantTimer(0.01), ConstantTimer(0.03)))
    res = simulate(Workload(np.array([0.0, 0.005]), np.array([10, 10]), np.array([200, 200])), spec)
    req = res.requests
    assert req["first_token_s"][0] == pytest.approx(0.04)
    tpot = (req["last_token_s"] - req["first_token_s"]) / 199
    np.testing.assert_allclose(tpot, 0.06, rtol=1e-6)


def test_pipeline_even_split_keeps_several_micro_batches_in_flight():
    """Four stages splitting a 0.04 s step evenly: users arriving 0.01 s apart land in four
    micro-batches; each sees a 0.04 s first token and 0.04 s between tokens, so together they
    get four times the tokens per second of one."""
    spec = EngineSpec(VllmScheduler(), ConstantTimer(0.04), kv_cache_tokens=10_000, pipeline_stages=4)
    res = simulate(Workload(np.arange(4) * 0.01, np.full(4, 10), np.full(4, 100)), spec)
    req = res.requests
    np.testing.assert_allclose(req["first_token_s"] - req["arrival_s"], 0.04, rtol=1e-9)
    np.testing.assert_allclose((req["last_token_s"] - req["first_token_s"]) / 99, 0.04, rtol=1e-9)
    assert res.summary["throughput_tokens_per_s"] == pytest.approx(400 / (0.03 + 100 * 0.04), rel=1e-6)


def test_vllm_on_a_cpu_schedules_synchronously():
    """vLLM's CPU platform turns async scheduling off (vllm/platforms/cpu.py, check_and_update_config: "async
    scheduling is not required on CPU"); on GPUs it is on by default. Overrides still apply."""
    from tokensim.prediction.serving import default_scheduler
    from tokensim.specs.hardware.catalog import load_hardware

    assert default_scheduler("vllm", load_hardware("cpu-server")).async_scheduling is False
    assert default_scheduler("vllm", load_hardware("h100-sxm")).async_scheduling is True
    assert default_scheduler("vllm", load_hardware("cpu-server"), max_num_seqs=8).max_num_seqs == 8


def test_sglang_receives_new_requests_every_recv_interval_decode_steps():
    """A (100 in, 30 out) arrives on an idle engine and is prefilled at once (step 0-10 ms); B arrives at 15 ms,
    during A's first decode step. scheduler_recv_interval 1: the overlap scheduler sees B at the step after next
    (30 ms; the 20 ms step was scheduled while B was not there), B's first token at 40 ms, TTFT 25 ms.
    scheduler_recv_interval 5: the prefill step leaves the counter at 1,000 (received at 10 ms, before B); the
    decode steps ending at 20, 30, 40, 50 and 60 ms add 1 each, so the next receive is at 60 ms: B's prefill runs
    60-70 ms, TTFT 55 ms, with decode-only steps in between."""
    for interval, ttft_b, prefill_step in ((1, 0.025, 3), (5, 0.055, 6)):
        res, batches = _run(SglangScheduler(scheduler_recv_interval=interval), [0.0, 0.015], [100, 100], [30, 2])
        chunks = _chunks(batches)
        assert chunks[0] == [100] and chunks[prefill_step] == [100]
        assert all(c == [] for c in chunks[1:prefill_step])
        ttft = res.requests["first_token_s"] - res.requests["arrival_s"]
        assert ttft[1] == pytest.approx(ttft_b)
        assert res.summary["completed"] == 2


def test_sglang_recv_interval_does_not_delay_an_idle_engine():
    """An engine with nothing running loops idle and receives at once: a lone request's TTFT is one step."""
    res, _ = _run(SglangScheduler(scheduler_recv_interval=30), [0.0, 1.0], [100, 100], [3, 3])
    ttft = res.requests["first_token_s"] - res.requests["arrival_s"]
    assert ttft.tolist() == pytest.approx([D, D])
