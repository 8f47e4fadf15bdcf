"""The busiest expert-parallel rank's load (perf.layers.expert_rank_imbalance): physics, not one factor."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokensim.perf.layers import expected_max_std_normal, expert_rank_imbalance


@pytest.mark.parametrize("n, table", [(1, 0.0), (2, 0.5642), (4, 1.0294), (8, 1.4236), (16, 1.7660), (32, 2.0697)])
def test_expected_maximum_of_normals_matches_the_published_table(n, table):
    """E[max of n standard normals] (Harter 1961; 2 -> 1/sqrt(pi) = 0.5642 exactly), to 1e-3."""
    assert expected_max_std_normal(n) == pytest.approx(table, abs=1e-3)


def test_one_rank_has_no_imbalance():
    assert expert_rank_imbalance(256, 8, 1, 1.0, 0.9) == 1.0


def test_hand_calculation_ep8_deepseek_prefill():
    """256 experts, top 8, EP 8, a 4,096-token chunk, cv 0.45: 1 + 1.4236 sqrt(0.45^2 x 8/256 + 8/32,768) = 1.1154."""
    want = 1 + 1.4236 * math.sqrt(0.45 ** 2 * 8 / 256 + 8 / (4096 * 8))
    assert want == pytest.approx(1.1154, abs=1e-4)
    assert expert_rank_imbalance(256, 8, 8, 4096.0, 0.45) == pytest.approx(want, rel=1e-4)


def test_sampling_term_agrees_with_balls_in_bins():
    """No routing skew (cv 0): 64 (token, expert) pairs thrown uniformly on 8 ranks. The expected fullest rank over
    the mean, by Monte Carlo (seeded, 20,000 draws), is 1.53; the normal approximation must be within 5 %."""
    rng = np.random.default_rng(0)
    mc = rng.multinomial(64, [1 / 8] * 8, size=20000).max(axis=1).mean() / 8
    assert expert_rank_imbalance(256, 8, 8, 8.0, 0.0) == pytest.approx(mc, rel=0.05)


def test_small_expert_parallel_groups_average_over_many_experts():
    """EP 2 over 128 experts at a 2,048-token prefill, at the top of the fitted skew range (cv 1):
    1 + 0.5642 sqrt(2 / 128 + 2 / 16,384) = 1.071, under 1.08; EP 8 of an 8-token decode batch at the bottom (cv 0.1)
    is far busier (over 1.4): the single factor it replaces could not be both."""
    assert expert_rank_imbalance(128, 8, 2, 2048.0, 1.0) == pytest.approx(1 + 0.5642 * math.sqrt(2 / 128 + 2 / 16384),
                                                                          rel=1e-4)
    assert expert_rank_imbalance(256, 8, 8, 8.0, 0.1) > 1.4


@given(ep=st.integers(1, 512), tokens=st.floats(0.0, 1e6), cv=st.floats(0.0, 2.0))
def test_imbalance_is_bounded_and_monotone(ep, tokens, cv):
    """Between 1 (balanced) and ep (every pair on one rank); more ranks never balance better, more tokens and less
    skew never balance worse."""
    lam = expert_rank_imbalance(256, 8, ep, tokens, cv)
    assert 1.0 <= lam <= ep
    assert expert_rank_imbalance(256, 8, ep * 2, tokens, cv) >= lam - 1e-12
    assert expert_rank_imbalance(256, 8, ep, tokens * 2 + 1, cv) <= lam + 1e-12
    assert expert_rank_imbalance(256, 8, ep, tokens, cv / 2) <= lam + 1e-12


def test_vectorized_over_candidate_layouts():
    """The planner passes arrays: each element equals the scalar call."""
    ep, tokens = np.array([1, 2, 8, 72]), np.array([1.0, 64.0, 64.0, 4096.0])
    got = expert_rank_imbalance(256, 8, ep, tokens, 0.45)
    assert got == pytest.approx([expert_rank_imbalance(256, 8, int(e), float(t), 0.45) for e, t in zip(ep, tokens)])


def test_group_limited_routing_adds_the_groups_skew():
    """DeepSeek-V3 (n_group 8, topk_group 4) at EP 8 holds one group per rank: the rank carries its group's skew
    whole. At cv 0.5 and a 4,096-token chunk: 1 + 1.4236 sqrt(0.25 (8/256 + 1) + 8/32,768) = 1.7235; at EP 4 (two
    groups a rank) 1 + 1.0294 sqrt(0.25 (4/256 + 4/8) + 4/32,768) = 1.3697. No groups: the plain formula."""
    assert expert_rank_imbalance(256, 8, 8, 4096.0, 0.5, groups=8) == pytest.approx(
        1 + 1.4236 * math.sqrt(0.25 * (8 / 256 + 1) + 8 / 32768), rel=1e-4)
    assert expert_rank_imbalance(256, 8, 4, 4096.0, 0.5, groups=8) == pytest.approx(
        1 + 1.0294 * math.sqrt(0.25 * (4 / 256 + 4 / 8) + 4 / 32768), rel=1e-4)
    assert expert_rank_imbalance(256, 8, 8, 4096.0, 0.5, groups=1) == expert_rank_imbalance(256, 8, 8, 4096.0, 0.5)


def test_config_group_routing_is_read_where_it_limits_the_choice():
    """DeepSeek-V3's config sets n_group 8 and topk_group 4; Kimi K2 sets n_group 1; a config with topk_group equal
    to n_group limits nothing."""
    import tokensim
    from tokensim.specs.model.hf_fields import Fields
    from tokensim.specs.model.hf_ffn import routing_groups
    from tokensim.specs.model.spec import MoE

    def moe_of(name):
        return next(layer.ffn for layer in tokensim.load_model(name).layers if isinstance(layer.ffn, MoE))

    assert moe_of("deepseek-v3").routing_groups == 8 and moe_of("kimi-k2.6").routing_groups == 1
    assert routing_groups(Fields({"n_group": 8, "topk_group": 8}), 256) == 1


def test_moe_layers_route_the_replicas_sequences_not_a_ranks_share_times_the_ranks():
    """DeepSeek-V3 on 8 H200s with attention DP 8 and EP 8 at batch 3: three ranks hold one sequence each, five
    hold none. The busiest rank's attention sees 1 sequence (seqs_per_rank rounds 3 / 8 up), but the MoE layers
    route 3 tokens, not 1 x 8 = 8: the decode step equals a hand-built step with moe_tokens = 3."""
    import tokensim
    from tokensim.deploy.deployment import Deployment
    from tokensim.perf.constants import for_hardware
    from tokensim.perf.context import make_context
    from tokensim.perf.layers import Batch
    from tokensim.perf.step import step_cost
    from tokensim.prediction.predictor import decode_context, decode_step

    m, hw = tokensim.load_model("deepseek-v3"), tokensim.load_hardware("h200")
    dep = Deployment(tp=1, attn_dp=8, ep=8, batch=3, weights="fp8", input_tokens=1024, output_tokens=256)
    assert (dep.seqs_per_rank, dep.seqs_per_replica) == (1, 3)
    ctx = make_context(m, hw, dep, for_hardware(hw))
    got = decode_step(ctx, None).cost.latency_s
    three = step_cost(ctx, Batch.decode(1.0, decode_context(dep), 1.0, moe_tokens=3.0)).latency_s
    eight = step_cost(ctx, Batch.decode(1.0, decode_context(dep), 1.0, moe_tokens=8.0)).latency_s
    assert got == pytest.approx(three, rel=1e-12)
    assert eight > three
