"""Shape-aware efficiency and the traffic between GEMMs (issue 11), each checked by hand against the op list."""
import numpy as np
import pytest

import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.perf.constants import default_table
from tokensim.perf.context import KV_CORE, make_context, seconds_per_flop
from tokensim.perf.layers import Batch, attention_ops, layer_ops, moe_ops
from tokensim.perf.step import step_cost
from tokensim.specs.model.spec import Attention, DenseFFN, MoE


def _ctx(model, hw, dep, **constants):
    table = default_table().with_overlay({"default": {"default": constants}}) if constants else default_table()
    hw = tokensim.load_hardware(hw)
    m = tokensim.load_model(model)
    return make_context(m, hw, dep, table.for_hardware(hw, dep.engine)), m, hw


def test_narrow_formats_keep_a_serial_share_at_the_bf16_rate():
    """H100: bf16 989 TF, fp8 1,979 TF dense. With a serial share p = 0.2 and a sustained clock of 0.9, one fp8 FLOP
    takes (0.8 / 1,979e12 + 0.2 / 989e12) / 0.9 seconds; bf16 has no narrower rate to lose, 1 / (989e12 x 0.9)."""
    hw = tokensim.load_hardware("h100-sxm")
    k = default_table().with_overlay({"default": {"default": {"narrow_format_serial_share": 0.2,
                                                               "sustained_clock_fraction": 0.9}}}).for_hardware(hw)
    f16, f8 = hw.peak_flops("bf16"), hw.peak_flops("fp8")
    assert seconds_per_flop(hw, "fp8", k) == pytest.approx((0.8 / f8 + 0.2 / f16) / 0.9, rel=1e-12)
    assert seconds_per_flop(hw, "bf16", k) == pytest.approx(1 / (f16 * 0.9), rel=1e-12)
    assert 1 / seconds_per_flop(hw, "fp8", k) < f8 * 0.9            # never the whole fp8 peak


def test_attention_core_computes_in_the_cache_format_not_the_weights():
    """FP8 weights with a bf16 KV cache: the projections run at the fp8 rate, the attention core at bf16's; an FP8
    cache moves the core to fp8 too."""
    ctx, _, _ = _ctx("llama-3.1-70b", "h100-sxm", Deployment(tp=4, weights="fp8", kv="bf16"))
    assert ctx.rates["attention"].compute == "fp8" and ctx.rates[KV_CORE].compute == "bf16"
    ctx8, _, _ = _ctx("llama-3.1-70b", "h100-sxm", Deployment(tp=4, weights="fp8", kv="fp8"))
    assert ctx8.rates[KV_CORE].compute == "fp8"


def test_inner_dimension_fill_of_a_tensor_parallel_ffn():
    """Llama-3.1-8B FFN at tp 4: gate_up reduces over d = 4,096 (2/3 of the FLOPs), down over I / 4 = 3,584. With
    gemm_half_inner h = 512 the op's rate share is 1 / (2/3 x (4096 + h) / 4096 + 1/3 x (3584 + h) / 3584), times
    the row fill M / (M + 64) at M = 8,192 prompt tokens; the compute time is FLOPs / (that x the prefill rate)."""
    ctx, m, _ = _ctx("llama-3.1-8b", "h100-sxm", Deployment(tp=4), gemm_half_inner=512.0, gemm_half_rows=64.0)
    layer = m.layers[0]
    b = Batch.prefill(1, 8192.0)
    ffn = next(o for o in layer_ops(ctx, layer, b) if o.name == "ffn")
    d, inner = 4096, layer.ffn.params / 4 / (3 * 4096)
    assert inner == pytest.approx(3584)
    share = 1 / (2 / 3 * (d + 512) / d + 1 / 3 * (inner + 512) / inner)
    fill = 8192 / (8192 + 64)
    expected = ffn.flops * ctx.rates["dense_ffn"].s_per_flop_prefill / (share * fill)
    assert ffn.t_compute_s == pytest.approx(expected, rel=1e-9)


def test_elementwise_traffic_between_a_dense_layers_gemms():
    """Per token of a Llama-3.1-8B layer at tp 1, the kernels between GEMMs read and write: around attention, a
    fused add + RMSNorm (4 d) and rotary on q and k (2 (32 + 8) x 128); around the FFN, add + norm (4 d) and the gated
    activation (3 I = 3 x 14,336); each element 2 bytes (bf16). 1,000 prompt tokens."""
    ctx, m, _ = _ctx("llama-3.1-8b", "h100-sxm", Deployment(tp=1))
    ops = [o for o in layer_ops(ctx, m.layers[0], Batch.prefill(1, 1000.0)) if o.name == "elementwise"]
    d = 4096
    assert [o.bytes for o in ops] == pytest.approx([1000 * (4 * d + 2 * 40 * 128) * 2, 1000 * (4 * d + 3 * 14336) * 2])
    assert all(o.t_memory_s == pytest.approx(o.bytes / ctx.bytes_per_s) for o in ops)


def test_grouped_expert_gemms_run_at_their_share_of_a_dense_gemm():
    """Halving grouped_gemm_fraction doubles the routed experts' compute time of a prefill and leaves their bytes."""
    dep = Deployment(tp=8, weights="fp8")
    a, m, _ = _ctx("deepseek-v3", "h200", dep, grouped_gemm_fraction=0.6)
    b, _, _ = _ctx("deepseek-v3", "h200", dep, grouped_gemm_fraction=0.3)
    moe = next(layer.ffn for layer in m.layers if isinstance(layer.ffn, MoE))
    batch = Batch.prefill(1, 4096.0)
    ea = next(o for o in moe_ops(a, moe, batch) if o.name == "moe.experts")
    eb = next(o for o in moe_ops(b, moe, batch) if o.name == "moe.experts")
    assert eb.t_compute_s == pytest.approx(2 * ea.t_compute_s, rel=1e-12)
    assert eb.bytes == ea.bytes


def test_a_step_with_prompt_tokens_lasts_at_least_its_host_dispatch():
    """Outside CUDA graphs the host launches every layer's kernels: with 1 ms per layer, a one-token prefill of
    Llama-3.1-8B (32 layers) takes at least 32 ms; a decode step (inside graphs) does not pay it."""
    ctx, m, _ = _ctx("llama-3.1-8b", "h100-sxm", Deployment(tp=1), eager_layer_overhead_s=1e-3)
    assert step_cost(ctx, Batch.prefill(1, 1.0)).stage_s[0] == pytest.approx(32e-3)
    assert step_cost(ctx, Batch.decode(1, 1000.0)).stage_s[0] < 20e-3


def test_efficiency_curves_rise_with_rows_and_inner_dimension():
    """The GEMM rate share rises with the token rows and with the inner dimension, and stays below 1."""
    from tokensim.perf.layers import gemm_efficiency
    ctx, _, _ = _ctx("llama-3.1-8b", "h100-sxm", Deployment(tp=1))
    rows = [gemm_efficiency(ctx, r, ((1.0, 4096),)) for r in (1, 8, 64, 512, 8192)]
    inner = [gemm_efficiency(ctx, 512, ((1.0, k),)) for k in (64, 256, 1024, 8192)]
    assert np.all(np.diff(rows) > 0) and np.all(np.diff(inner) > 0)
    assert max(rows + inner) < 1


def test_attention_and_ffn_ops_are_listed_for_every_layer_kind():
    """Every attention or dense layer carries its elementwise op; a MoE layer its own (permute, combine)."""
    ctx, m, _ = _ctx("deepseek-v3", "h200", Deployment(tp=8, weights="fp8"))
    for layer in set(m.layers):
        names = [o.name for o in layer_ops(ctx, layer, Batch.prefill(1, 128.0))]
        assert names.count("elementwise") == (isinstance(layer.mixer, Attention)
                                              + isinstance(layer.ffn, (DenseFFN, MoE)))
    att = next(layer.mixer for layer in m.layers if isinstance(layer.mixer, Attention))
    assert attention_ops(ctx, att, Batch.decode(1, 100.0))[1].name == "attn.core"


def test_prefill_clock_prices_prompt_tokens_only():
    """A family's prefill clock c divides the rate of prompt tokens and nothing else: on B200 with c = 0.5 one bf16
    prompt FLOP takes 1 / (2,250e12 x s x f_prefill x 0.5) seconds (s the sustained clock, f_prefill the prefill
    share), twice what it takes at c = 1, while a decode FLOP keeps 1 / (2,250e12 x s x f_decode). The Hopper family
    is untouched: the constant is set for Blackwell alone."""
    table = default_table().with_overlay({"nvidia-blackwell": {"default": {"prefill_clock_fraction": 0.5}}})
    b200, h100 = tokensim.load_hardware("b200"), tokensim.load_hardware("h100-sxm")
    m = tokensim.load_model("llama-3.1-8b")
    dep = Deployment(tp=1, weights="bf16")
    k = table.for_hardware(b200)
    base = default_table().for_hardware(b200)
    slow = make_context(m, b200, dep, k).rates["dense_ffn"]
    fast = make_context(m, b200, dep, base).rates["dense_ffn"]
    per_flop = 1 / (b200.peak_flops("bf16") * k.sustained_clock_fraction)
    assert slow.s_per_flop_prefill == pytest.approx(per_flop / (k.prefill_flops_fraction * 0.5), rel=1e-12)
    assert slow.s_per_flop_prefill == pytest.approx(2 * fast.s_per_flop_prefill * base.prefill_clock_fraction, rel=1e-12)
    assert slow.s_per_flop == pytest.approx(per_flop / k.gemm_flops_fraction, rel=1e-12)
    assert table.for_hardware(h100).prefill_clock_fraction == default_table().without_fitted().for_hardware(
        h100).prefill_clock_fraction == 1.0
