"""The simulator's step timer is the prediction's step function: same numbers, bounded rounding."""
import numpy as np
import pytest

import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.perf.timer import RELATIVE_BUCKET, CostModelTimer
from tokensim.sim.timer import StepBatch

EMPTY = np.zeros(0, dtype=np.int64)


def _timer(model="llama-3.1-8b", hw="h100-sxm", exact=False, **dep):
    return CostModelTimer(tokensim.load_model(model), tokensim.load_hardware(hw), Deployment(**dep), exact=exact)


def test_pure_decode_step_equals_predicts_decode_step():
    """A decode step of B sequences at the mean context predict uses (input + output / 2) is predict's
    time per output token (pp 1, no speculation: one step per token)."""
    for batch in (1, 8, 64):
        p = tokensim.predict("llama-3.1-8b", "h100-sxm", tp=1, batch=batch, input_tokens=1000, output_tokens=200)
        contexts = np.full(batch, 1000 + 100)
        t = _timer(exact=True).step_s(StepBatch(contexts, EMPTY, EMPTY))
        assert t == pytest.approx(p.time_per_output_token_s, rel=1e-12)


def test_rounding_changes_a_step_by_less_than_half_a_percent():
    """Cached steps round the continuous sums to 1/128 in log space; the step time moves by at most about that
    fraction times the share of the step those sums drive, so < 0.5 % on random mixed batches."""
    rng = np.random.default_rng(7)
    fast, exact = _timer(model="qwen3-32b", hw="h200", tp=2), _timer(model="qwen3-32b", hw="h200", tp=2, exact=True)
    worst = 0.0
    for _ in range(200):
        nd, npf = int(rng.integers(0, 200)), int(rng.integers(0, 4))
        if nd + npf == 0:
            continue
        b = StepBatch(rng.integers(1, 30000, nd), rng.integers(1, 2048, npf), rng.integers(0, 8000, npf))
        worst = max(worst, abs(fast.step_s(b) / exact.step_s(b) - 1))
    assert RELATIVE_BUCKET < 0.01
    assert worst < 0.005


def test_a_prefill_chunk_costs_time_and_more_context_costs_more():
    t = _timer(exact=True)
    decode = StepBatch(np.full(32, 2000), EMPTY, EMPTY)
    mixed = StepBatch(np.full(32, 2000), np.array([512]), np.array([0]))
    longer = StepBatch(np.full(32, 8000), EMPTY, EMPTY)
    assert t.step_s(mixed) > t.step_s(decode)
    assert t.step_s(longer) > t.step_s(decode)


def test_chunk_after_cached_prefix_reads_it():
    """A 512-token chunk whose request has 4,096 tokens cached attends to them: it costs more than the first chunk."""
    t = _timer(exact=True)
    first = StepBatch(EMPTY, np.array([512]), np.array([0]))
    later = StepBatch(EMPTY, np.array([512]), np.array([4096]))
    assert t.step_s(later) > t.step_s(first)


def test_attention_dp_step_prices_a_prompt_whole_on_its_rank():
    """DeepSeek-V3 on 8 H200 with attention DP 8 and EP 8: one 4,096-token prompt is prefilled on one rank, so the
    step is that rank's full prefill (one chunk of 4,096 tokens, all 4,096 at the experts), not an eighth of a
    prompt on each rank. Checked against step_cost of that batch, written out by hand."""
    from tokensim.perf.constants import for_hardware
    from tokensim.perf.context import make_context
    from tokensim.perf.layers import Batch
    from tokensim.perf.step import step_cost

    m, hw = tokensim.load_model("deepseek-v3"), tokensim.load_hardware("h200")
    dep = Deployment(tp=1, attn_dp=8, ep=8, weights="fp8")
    t = CostModelTimer(m, hw, dep, exact=True).step_s(StepBatch(EMPTY, np.array([4096]), np.array([0])))
    ctx = make_context(m, hw, dep, for_hardware(hw))
    whole = step_cost(ctx, Batch(prefill_seqs=1.0, prefill_tokens=4096.0, prefill_position=2048.0,
                                 moe_tokens=4096.0)).latency_s
    sliver = step_cost(ctx, Batch(prefill_seqs=1 / 8, prefill_tokens=4096.0, prefill_position=2048.0,
                                  moe_tokens=4096.0)).latency_s
    assert t == pytest.approx(whole, rel=1e-12)
    assert t > 1.5 * sliver


def test_busiest_rank_holds_the_even_share_or_one_whole_request():
    """64 decodes and 2 prompts of 1,024 over 8 ranks: 8 decodes and one prompt on the busiest rank, all 64 + 2,048
    tokens at the MoE layers; on one rank the batch is the plain one."""
    from tokensim.perf.layers import Batch, busiest_rank_share

    b = Batch.on_busiest_rank(8, 64.0, 2.0, prefill_tokens=1024.0)
    assert (b.decode_seqs, b.prefill_seqs, b.moe_tokens) == (8.0, 1.0, 64.0 + 2048.0)
    assert busiest_rank_share(0.0, 8) == 0.0 and busiest_rank_share(3.0, 1) == 3.0
    one = Batch.on_busiest_rank(1, 5.0, 1.0, prefill_tokens=300.0)
    assert (one.decode_seqs, one.prefill_seqs, one.moe_tokens_for(1)) == (5.0, 1.0, 305.0)


@pytest.mark.parametrize("exact", [False, True])
def test_a_run_of_decode_steps_is_priced_step_by_step(exact):
    """decode_run_s (the simulator's skip-ahead through pure-decode runs) gives, for step j, exactly what step_s gives
    a decode batch of contexts + j, in the cached and the exact mode: the skip changes no simulated figure."""
    rng = np.random.default_rng(3)
    timer = _timer(model="qwen3-32b", hw="h200", tp=2, exact=exact)
    for nd in (1, 7, 130):
        ctx = rng.integers(1, 20000, nd)
        run = timer.decode_run_s(ctx, 300)
        one_by_one = [timer.step_s(StepBatch(ctx + j, EMPTY, EMPTY)) for j in range(300)]
        assert run.tolist() == one_by_one
    assert timer.decode_run_s(EMPTY, 3).tolist() == [0.0, 0.0, 0.0]      # step_s of an empty batch is no time


def test_timers_of_one_replica_share_prices_and_others_do_not():
    """Timers that differ only in the deployment's batch (one configuration's runs at each concurrency) share one
    table of step prices; a timer of another layout or other constants keeps its own, so a shared price is always
    the one that timer would have computed (checked against the exact step function)."""
    from tokensim.perf.constants import default_table

    a, b = _timer(tp=2, batch=8), _timer(tp=2, batch=256)
    batch = StepBatch(np.array([900, 1300, 2100]), np.array([512]), np.array([0]))
    t = a.step_s(batch)
    assert b._cache is a._cache and b.cached_steps >= 1
    assert b.step_s(batch) == t
    other_layout = _timer(tp=4, batch=8)
    slower = default_table().with_overlay({"default": {"default": {"kernel_gap_s": 9e-6}}})
    other_constants = CostModelTimer(a.model, a.hw, a.dep, slower)
    for other in (other_layout, other_constants):
        assert other._cache is not a._cache
        exact = CostModelTimer(other.model, other.hw, other.dep, other.constants, exact=True).step_s(batch)
        assert other.step_s(batch) == pytest.approx(exact, rel=5e-3) and other.step_s(batch) != t
