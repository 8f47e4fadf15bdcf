"""Physics fixes the audit asked for (issue 10), each checked by hand."""
import math

import pytest

import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.perf.constants import for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.layers import Batch, allreduce_op, attention_ops, moe_ops
from tokensim.perf.layers import expected_experts_touched as touched
from tokensim.perf.memory import bytes_per_token
from tokensim.specs.model.spec import MoE


def test_allreduce_time_is_the_measured_latency_plus_bytes_over_the_link():
    """The measured small all-reduce time (8 us class) already holds the link latency and the kernel launch:
    TP8 Llama-3.1-70B, one decode token: ring traffic 2 x 7/8 x 8192 x 2 B = 28,672 B per chip over NVLink
    (450 GB/s per direction x the link fraction); time = collective latency + 28,672 / (f x 450e9), nothing else."""
    m, hw = tokensim.load_model("llama-3.1-70b"), tokensim.load_hardware("h100-sxm")
    k = for_hardware(hw)
    op = allreduce_op(make_context(m, hw, Deployment(tp=8), k), 1.0)
    expected = k.collective_latency_s + 28672 / (k.link_bandwidth_fraction * 450e9)
    assert op.comm_bytes == pytest.approx(28672)
    assert op.t_comm_s == pytest.approx(expected, rel=1e-12)
    assert op.t_fixed_s == 0.0


def test_busiest_expert_rank_never_reads_more_experts_than_it_holds():
    """DeepSeek-V3 with EP 8 at a large batch touches nearly all 256 experts: 32 per chip. The load-imbalance
    factor (lambda, perf.layers.expert_rank_imbalance) scales the busiest chip's work, but it cannot read more than the 32 experts it holds. Beside the
    weights the op moves its (token, expert) pairs' activations: lambda x 4,096 x 8 / 8 pairs, each its input and
    output (2 d) and the expert's inner widths (expert params / d, moe_tp 1), at 2 bytes."""
    m, hw = tokensim.load_model("deepseek-v3"), tokensim.load_hardware("h200")
    dep = Deployment(tp=8, ep=8, weights="fp8")
    k = for_hardware(hw)
    ctx = make_context(m, hw, dep, k)
    moe = next(l.ffn for l in m.layers if isinstance(l.ffn, MoE))
    op = next(o for o in moe_ops(ctx, moe, Batch.decode(4096, 1000)) if o.name == "moe.experts")
    held = 256 / 8
    d = m.hidden_size
    # busiest rank: 1 + z_8 sqrt(cv^2 (8 / 256 + 1) + 8 / (4,096 x 8)), z_8 = 1.4236 (expected max of 8 normals);
    # the 1: DeepSeek's group-limited routing, one of its 8 groups on each of the 8 ranks
    lam = 1 + 1.4236 * math.sqrt(k.expert_load_cv ** 2 * (8 / 256 + 1) + 8 / (4096 * 8))
    activations = lam * 4096 * 8 / 8 * (2 * d + moe.expert_params / d) * 2
    assert op.bytes == pytest.approx(held * moe.expert_params * ctx.rates["routed_experts"].bytes_per_weight + activations)


def test_speculation_routes_every_verified_token():
    """With k = 3 drafts each sequence sends 4 tokens through the experts per step, whatever is accepted:
    batch 1, tokens kept 2.7 per step. Expert bytes are those of 4 routed tokens, shared by 2.7."""
    m, hw = tokensim.load_model("deepseek-v3"), tokensim.load_hardware("h200")
    ctx = make_context(m, hw, Deployment(tp=8, weights="fp8"), for_hardware(hw))
    four_kept = bytes_per_token(ctx, 1, 1000, tokens_per_step=4.0, verified_per_step=4.0) * 4.0
    spec = bytes_per_token(ctx, 1, 1000, tokens_per_step=2.7, verified_per_step=4.0) * 2.7
    assert spec == pytest.approx(four_kept, rel=1e-12)        # the same bytes per step: 4 tokens routed
    assert bytes_per_token(ctx, 1, 1000, 2.7, 4.0) > bytes_per_token(ctx, 1, 1000, 2.7)   # counting 2.7 routed undercounts


@pytest.mark.parametrize("field,value", [("batch", 10**12), ("tp", 10**9), ("input_tokens", 2**40), ("batch", True),
                                         ("output_tokens", 0)])
def test_library_callers_are_bounded_too(field, value):
    """Files are bounded when read; a Deployment built in Python refuses runaway sizes with the same kind of message."""
    from tokensim.errors import TokensimError

    with pytest.raises(TokensimError, match=field):
        Deployment(**{field: value})


def test_prefill_attention_runs_at_its_own_share_of_the_prefill_rate():
    """attention_prefill_rate_ratio r: the attention core's prompt FLOPs take 1/r of the time they take at the
    prefill rate. Llama-3.1-8B on an H100, one 2,048-token prompt (all FLOPs of the core are prompt FLOPs):
    r = 0.25 makes attn.core's compute time 4x the r = 1 time; the projections (GEMMs) are unchanged; and
    decode is untouched (its attention reads the cache at the bandwidth rate, no prompt share)."""
    import dataclasses

    from tokensim.perf.layers import attention_ops
    from tokensim.specs.model.spec import Attention

    m, hw = tokensim.load_model("llama-3.1-8b"), tokensim.load_hardware("h100-sxm")
    att = next(layer.mixer for layer in m.layer_kinds[0] if isinstance(layer.mixer, Attention))
    k1 = for_hardware(hw)
    assert k1.attention_prefill_rate_ratio == 1.0           # the shipped default: every prediction as before
    k4 = dataclasses.replace(k1, attention_prefill_rate_ratio=0.25)
    prompt = Batch.prefill(1, 2048)
    ops1 = {o.name: o for o in attention_ops(make_context(m, hw, Deployment(), k1), att, prompt)}
    ops4 = {o.name: o for o in attention_ops(make_context(m, hw, Deployment(), k4), att, prompt)}
    assert ops4["attn.core"].t_compute_s == pytest.approx(4 * ops1["attn.core"].t_compute_s, rel=1e-12)
    assert ops4["attn.proj"].t_compute_s == pytest.approx(ops1["attn.proj"].t_compute_s, rel=1e-12)
    step = Batch.decode(8, 1000)
    d1 = {o.name: o for o in attention_ops(make_context(m, hw, Deployment(), k1), att, step)}
    d4 = {o.name: o for o in attention_ops(make_context(m, hw, Deployment(), k4), att, step)}
    assert d4["attn.core"].time_s == pytest.approx(d1["attn.core"].time_s, rel=1e-12)
    with pytest.raises(tokensim.TokensimError, match="attention_prefill_rate_ratio"):
        dataclasses.replace(k1, attention_prefill_rate_ratio=0.0)


@pytest.mark.parametrize("model,kernels", [("glm-5", 13), ("deepseek-v3", 1)])
def test_a_dsa_indexer_launches_its_kernels_before_the_sparse_core(model, kernels):
    """GLM-5's attention core carries a DSA lightning indexer: 12 kernels (wq_b and wk GEMMs, k LayerNorm, rotary,
    two concatenations, q's fp8 quantization, weights_proj GEMM and its scaling, k quantize-and-cache, fp8 MQA logits,
    top-k; vLLM's Indexer.forward) before the sparse attention kernel, so its fixed time is 13 kernel gaps where
    DeepSeek-V3's dense MLA core, with no indexer, pays one."""
    m, hw = tokensim.load_model(model), tokensim.load_hardware("b200")
    k = for_hardware(hw)
    ctx = make_context(m, hw, Deployment(tp=8, weights="fp8"), k)
    att = next(layer.mixer for layer in m.layers if getattr(layer.mixer, "kind", "") == "mla")
    core = next(o for o in attention_ops(ctx, att, Batch.decode(4, 2000)) if o.name == "attn.core")
    assert core.t_fixed_s == pytest.approx(kernels * k.kernel_gap_s, rel=1e-12)


def test_a_pcie_link_carries_collectives_at_the_pcie_share_of_its_line_rate():
    """Qwen3-32B at TP 2 on two RTX PRO 6000 (PCIe 5.0, 64 GB/s per direction, medium "pcie-host" in its file: no
    GPU peer-to-peer), a prefill chunk of 2,048 tokens: ring traffic 2 x 1/2 x 2,048 x 5,120 x 2 B = 20,971,520 B
    per chip, time = small-message time + 20,971,520 / (host-staged share x 64e9); with the shipped share 0.25 that
    is 1.311 ms beyond it. The small-message time is the measured all-reduce's, never less than the link's own
    latency (14 us here, above the NVLink-measured collective latency). The same file with medium "pcie" (P2P) is priced at the P2P share, and with the medium
    unstated at the NVLink-class share: the times differ by exactly the shares' ratios beyond the latency."""
    from dataclasses import replace

    m, hw = tokensim.load_model("qwen3-32b"), tokensim.load_hardware("rtx-pro-6000")
    assert hw.link("scale_up").medium == "pcie-host"
    k = for_hardware(hw)
    assert k.pcie_host_link_bandwidth_fraction < k.pcie_link_bandwidth_fraction < k.link_bandwidth_fraction
    op = allreduce_op(make_context(m, hw, Deployment(tp=2), k), 2048.0)
    assert op.comm_bytes == pytest.approx(20_971_520)
    small = max(k.collective_latency_s, hw.link("scale_up").latency_s)
    assert op.t_comm_s == pytest.approx(
        small + 20_971_520 / (k.pcie_host_link_bandwidth_fraction * 64e9), rel=1e-12)
    assert k.pcie_host_link_bandwidth_fraction == 0.25                   # the hand figure above
    assert op.t_comm_s - small == pytest.approx(1.31072e-3, rel=1e-9)

    def with_medium(medium):
        other = replace(hw, links=tuple(replace(link, medium=medium) for link in hw.links))
        return allreduce_op(make_context(m, other, Deployment(tp=2), k), 2048.0).t_comm_s - small

    beyond = op.t_comm_s - small
    assert beyond / with_medium("pcie") == pytest.approx(
        k.pcie_link_bandwidth_fraction / k.pcie_host_link_bandwidth_fraction, rel=1e-12)
    assert beyond / with_medium("") == pytest.approx(
        k.link_bandwidth_fraction / k.pcie_host_link_bandwidth_fraction, rel=1e-12)


@pytest.mark.parametrize("chip, link_latency_s", [("h100-sxm", 3e-6), ("rtx-pro-6000", 14e-6)])
def test_a_measured_collective_latency_is_floored_at_the_links_own_latency(chip, link_latency_s):
    """The small-message times of an all-reduce (collective_latency_s) and of an expert-parallel dispatch
    (all_to_all_latency_s) are measured end to end on NVLink boxes, link latency included, so over NVLink (3 us in
    the H100 file) they stand as measured; over a slower link they cannot be shorter than that link's own latency:
    the RTX PRO 6000 file's PCIe without peer-to-peer takes 14 us (its source: P2P-disabled GPU-to-GPU latency on
    these cards). Qwen3-30B-A3B at attention DP 2 x EP 2 (the shipped vLLM trace's layout), two decodes on each
    rank: the replica's 4 tokens enter the experts, 2 per chip, and each dispatch moves 2 tokens x 2,048 x 2 B x the
    expected remote ranks per token, taking the floored latency plus those bytes at the link's share of its line
    rate."""
    from tokensim.perf.context import MEDIUM_SHARE
    from tokensim.perf.layers import remote_ranks_per_token

    m, hw = tokensim.load_model("qwen3-30b-a3b"), tokensim.load_hardware(chip)
    link = hw.link("scale_up")
    assert link.latency_s == link_latency_s
    k = for_hardware(hw, "vllm")
    dep = Deployment(tp=1, attn_dp=2, ep=2, engine="vllm")
    ctx = make_context(m, hw, dep, k)
    moe = next(layer.ffn for layer in m.layers if isinstance(layer.ffn, MoE))
    ops = {o.name: o for o in moe_ops(ctx, moe, Batch.decode(2, 500))}
    tokens_per_chip = 2 * 2 / 2                                 # the replica's 4 tokens over its 2 chips
    nbytes = tokens_per_chip * 2048 * 2 * remote_ranks_per_token(moe.n_experts, moe.top_k, 2)
    share = getattr(k, MEDIUM_SHARE.get(link.medium, "link_bandwidth_fraction"))
    small = max(k.all_to_all_latency_s, link_latency_s)
    assert ops["ep.dispatch"].t_comm_s == pytest.approx(small + nbytes / (share * link.bandwidth_bytes_per_s), rel=1e-9)
    if chip == "h100-sxm":
        assert small == k.all_to_all_latency_s                  # NVLink: the measured time, unchanged
    else:
        assert small == 14e-6 > k.all_to_all_latency_s          # PCIe via host memory: the link's latency


def test_a_link_medium_outside_the_known_ones_is_refused_with_its_field():
    from tokensim.errors import TokensimError
    from tokensim.specs.hardware.spec import Link

    with pytest.raises(TokensimError, match="links.scale_up.medium"):
        Link("scale_up", 64e9, 5e-6, 8, medium="carrier pigeon")


def test_the_hardware_file_accepts_exactly_the_media_the_spec_knows():
    from typing import get_args

    from tokensim.inputs.hardware_file import LinkTable
    from tokensim.specs.hardware.spec import LINK_MEDIA

    allowed = {a for a in get_args(LinkTable.model_fields["medium"].annotation) for a in get_args(a) or (a,)}
    assert allowed - {type(None)} == set(LINK_MEDIA)


def test_ep_dispatch_never_sends_a_token_to_more_ranks_than_it_has_remote_experts():
    """8 experts padded with 8 redundant slots over EP 16 (half an expert per rank): at most k (ep - 1) / ep = 1.875
    remote experts per top-2 token, which the rank count must not exceed."""
    from tokensim.perf.layers import remote_ranks_per_token

    assert remote_ranks_per_token(8, 2, 16) <= 2 * 15 / 16 + 1e-12


def test_an_ep_dispatch_sends_a_token_once_to_each_rank_holding_one_of_its_experts():
    """Qwen3-30B-A3B (128 experts, top 8, d = 2,048) at EP 2 on two RTX PRO 6000, 2,048 prompt tokens per rank: a
    token misses the other rank's 64 experts with probability (64 x 63 x ... x 57) / (128 x 127 x ... x 121) = 0.0031,
    so it crosses the link 0.9969 times, not top_k x (ep - 1) / ep = 4 times: dispatch bytes per chip =
    2,048 x 2,048 x 2 B x 0.9969 (the batch is one rank's: one prompt). At EP 1 nothing is sent; at EP 8 of 256
    experts (DeepSeek-V3) the count is 7 x (1 - C(224, 8) / C(256, 8)) = 4.63 other ranks, under the 8 experts' 7
    remote ones."""
    from math import comb, prod

    from tokensim.perf.layers import remote_ranks_per_token

    miss = prod(64 - i for i in range(8)) / prod(128 - i for i in range(8))
    assert remote_ranks_per_token(128, 8, 2) == pytest.approx(1 - miss, rel=1e-12)
    assert remote_ranks_per_token(128, 8, 1) == 0.0
    assert remote_ranks_per_token(256, 8, 8) == pytest.approx(7 * (1 - comb(224, 8) / comb(256, 8)), rel=1e-12)
    m, hw = tokensim.load_model("qwen3-30b-a3b"), tokensim.load_hardware("rtx-pro-6000")
    ctx = make_context(m, hw, Deployment(tp=1, ep=2, attn_dp=2), for_hardware(hw))
    moe = next(l.ffn for l in m.layers if isinstance(l.ffn, MoE))
    ops = {o.name: o for o in moe_ops(ctx, moe, Batch(prefill_seqs=1.0, prefill_tokens=2048.0))}
    assert ops["ep.dispatch"].comm_bytes == pytest.approx(2048 * 2048 * 2 * (1 - miss), rel=1e-9)
    assert ops["ep.combine"].comm_bytes == ops["ep.dispatch"].comm_bytes


def test_a_skewed_router_touches_fewer_experts_than_a_uniform_one():
    """gpt-oss-120b's 128 experts, top 4, 32 decode tokens. Uniform routing: 128 (1 - (124/128)^32) = 128 (1 - 0.36206)
    = 81.66 distinct experts. With the experts' rates spread gamma-like at coefficient of variation c = 1, an expert is
    missed with probability E[exp(-32 a g)] = 1 / (1 + 32 a), a = -ln(124/128) = 0.031749: 1 / 2.01597 = 0.49604, so
    128 x 0.50396 = 64.51 experts, a fifth fewer. c -> 0 gives the uniform count back, and one token touches its k."""
    assert touched(128, 4, 32) == pytest.approx(81.66, abs=0.01)
    assert touched(128, 4, 32, 1.0) == pytest.approx(64.51, abs=0.01)
    assert touched(128, 4, 32, 1e-6) == pytest.approx(touched(128, 4, 32), rel=1e-6)
    assert touched(128, 4, 1, 1.0) == pytest.approx(4.0, rel=0.02)
    # one token picks k distinct experts: the mixture's 8 (1 - (1 + 0.2877 x 0.7225)^(-1/0.7225)) = 1.84 for Mixtral's
    # 2 of 8 (a = -ln(6/8) = 0.2877) is floored at 2, and 4 tokens (4.54 by the formula) stay above it
    assert touched(8, 2, 1, 0.85) == 2.0
    assert touched(8, 2, 4, 0.85) == pytest.approx(8 * (1 - (1 + 4 * 0.287682 * 0.7225) ** (-1 / 0.7225)), rel=1e-5)
    counts = [touched(256, 8, t, 0.6) for t in (1, 8, 64, 512, 4096)]
    assert counts == sorted(counts) and counts[-1] < 256
    assert touched(256, 8, 64, 0.9) < touched(256, 8, 64, 0.3) < touched(256, 8, 64)


def test_the_expert_op_reads_the_skewed_count_of_experts():
    """One chip, no EP (lambda 1): the routed-expert bytes are the skewed count of touched experts x each expert's
    stored bytes, plus the pairs' activations (2 d + expert params / d per pair, bf16)."""
    m, hw = tokensim.load_model("gpt-oss-120b"), tokensim.load_hardware("b200")
    k = for_hardware(hw)
    ctx = make_context(m, hw, Deployment(tp=1), k)
    moe = next(layer.ffn for layer in m.layers if isinstance(layer.ffn, MoE))
    op = next(o for o in moe_ops(ctx, moe, Batch.decode(32, 1000)) if o.name == "moe.experts")
    d = m.hidden_size
    weights = touched(moe.n_experts, moe.top_k, 32, k.expert_load_cv) * moe.expert_params \
        * ctx.rates["routed_experts"].bytes_per_weight
    activations = 32 * moe.top_k * (2 * d + moe.expert_params / d) * 2
    assert op.bytes == pytest.approx(weights + activations, rel=1e-9)
    assert k.expert_load_cv > 0.1 and weights < touched(moe.n_experts, moe.top_k, 32) * moe.expert_params \
        * ctx.rates["routed_experts"].bytes_per_weight
