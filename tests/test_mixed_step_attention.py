"""A step that prefills and decodes in one varlen attention kernel (vLLM's FlashAttention-2 backend) reads each
decode's KV up to once per query head (perf/layers.py mixed_step_kv_reads, docs/model.md 1.2): the bytes by hand,
the cases it leaves alone, and the profiled attention (data/kernels/llmservingsim_vllm_0_19_attention.csv) that
sets the share on the two profiled chips."""
import dataclasses

import numpy as np
import pytest

import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.perf.constants import default_table, for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.layers import Batch, attention_ops
from tokensim.specs.model.spec import Attention
from tokensim.validate.kernels import MIXED_MIN_DECODE_SHARE, attention_log_errors, attention_points


def _core_bytes(model: str, chip: str, batch: Batch, u: float | None = None, tp: int = 1) -> float:
    m, hw = tokensim.load_model(model), tokensim.load_hardware(chip)
    k = for_hardware(hw, "vllm")
    if u is not None:
        k = dataclasses.replace(k, mixed_step_gqa_unpacked_share=u)
    att = next(layer.mixer for layer in m.layer_kinds[0] if isinstance(layer.mixer, Attention))
    ops = attention_ops(make_context(m, hw, Deployment(tp=tp, engine="vllm"), k), att, batch)
    return next(o for o in ops if o.name == "attn.core").bytes


def test_a_mixed_step_reads_the_decodes_kv_once_per_query_head_share_by_hand():
    """Llama-3.1-8B, TP 1: 32 query heads over 8 KV heads, g = 4; one KV entry per layer is 8 x 128 x 2 (K, V)
    x 2 B = 4,096 B. 64 decodes of 1,024 tokens read 64 x 1,024 x 4,096 = 268,435,456 B per layer alone. With a
    512-token chunk in the same step and u = 0.5, they read 1 + 0.5 x (4 - 1) = 2.5 times that: 671,088,640 B,
    beside the chunk's own bytes (its KV writes and the q/out traffic), which the chunk brings alone too."""
    decodes, chunk = Batch(decode_seqs=64, decode_context=1024), Batch(prefill_seqs=1, prefill_tokens=512)
    mixed = Batch(decode_seqs=64, decode_context=1024, prefill_seqs=1, prefill_tokens=512)
    alone = _core_bytes("llama-3.1-8b", "h100-sxm", decodes, u=0.5)
    kv = 64 * 1024 * 4096
    assert alone == pytest.approx(kv + 2 * 64 * 32 * 128 * 2, rel=1e-12)      # + each query's q read and output written
    chunk_bytes = _core_bytes("llama-3.1-8b", "h100-sxm", chunk, u=0.5)
    assert _core_bytes("llama-3.1-8b", "h100-sxm", mixed, u=0.5) == pytest.approx(alone + 1.5 * kv + chunk_bytes,
                                                                                   rel=1e-12)
    # u = 0 (the shipped default off the profiled chips): a mixed step costs its two parts
    assert _core_bytes("llama-3.1-8b", "h100-sxm", mixed) == pytest.approx(alone + chunk_bytes, rel=1e-12)
    assert for_hardware(tokensim.load_hardware("h100-sxm"), "vllm").mixed_step_gqa_unpacked_share == 0.0


def test_decode_only_steps_mha_and_mla_are_left_alone():
    decodes = Batch(decode_seqs=64, decode_context=1024)
    assert _core_bytes("llama-3.1-8b", "h100-sxm", decodes, u=1.0) == _core_bytes("llama-3.1-8b", "h100-sxm", decodes)
    mixed = Batch(decode_seqs=64, decode_context=1024, prefill_seqs=1, prefill_tokens=512)
    # MLA's latent is one head shared by all: nothing to unpack
    assert _core_bytes("deepseek-v3", "h200", mixed, u=1.0, tp=8) == _core_bytes("deepseek-v3", "h200", mixed, tp=8)
    # at TP 8 Llama-3.1-8B has 4 query heads and one KV head per chip: g = 4 still
    two = _core_bytes("llama-3.1-8b", "h100-sxm", mixed, u=1.0, tp=8) - _core_bytes("llama-3.1-8b", "h100-sxm", mixed,
                                                                                    tp=8)
    assert two == pytest.approx(3 * 64 * 1024 * 512, rel=1e-12)          # 3 extra reads of 1 KV head x 128 x 2 x 2 B


def test_planner_arrays_get_the_factor_where_the_step_prefills():
    """The planner prices many candidates at once: arrays of prefill counts get the factor element by element."""
    batch = Batch(decode_seqs=np.array([64.0, 64.0]), decode_context=1024.0, prefill_seqs=np.array([0.0, 1.0]),
                  prefill_tokens=512.0)
    both = _core_bytes("llama-3.1-8b", "h100-sxm", batch, u=0.5)
    assert both[0] == pytest.approx(_core_bytes("llama-3.1-8b", "h100-sxm", Batch(decode_seqs=64, decode_context=1024),
                                                u=0.5))
    assert both[1] == pytest.approx(_core_bytes("llama-3.1-8b", "h100-sxm", Batch(
        decode_seqs=64, decode_context=1024, prefill_seqs=1, prefill_tokens=512), u=0.5))


def test_a_share_outside_zero_to_one_is_refused_with_its_name():
    k = for_hardware(tokensim.load_hardware("h100-sxm"))
    with pytest.raises(tokensim.TokensimError, match="mixed_step_gqa_unpacked_share"):
        dataclasses.replace(k, mixed_step_gqa_unpacked_share=1.5)


def test_the_profiles_show_the_group_size_where_l2_cannot_help():
    """The evidence itself: at 128 decodes of 16,384 tokens with a 512-token chunk, the mixed call takes about g
    times the decodes alone (the chunk alone is a few per cent of it): Llama-3.1-8B g = 4, Qwen3-32B g = 8 at TP 1."""
    pts = {(p.chip, p.model, p.tp, p.prefill_tokens, p.decode_seqs, p.decode_context): p.measured_s
           for p in attention_points()}
    for model, g in (("llama-3.1-8b", 4), ("qwen3-32b", 8)):
        ratio = pts[("rtx-pro-6000", model, 1, 512, 128, 16384)] / pts[("rtx-pro-6000", model, 1, 0, 128, 16384)]
        assert 0.85 * g <= ratio <= g, model


@pytest.mark.parametrize("chip", ["rtx-4090", "rtx-pro-6000"])
def test_the_shipped_share_reproduces_the_profiled_mixed_steps(chip):
    """Bar: the decode-dominated mixed points (those the share is fitted on) within a median 35 % (the fit reaches
    26 % on the RTX 4090 and 31 % on the RTX PRO 6000; without the share: 62 % and 70 %, all too fast)."""
    errors = np.expm1(attention_log_errors(chip, kind="mixed", min_decode_share=MIXED_MIN_DECODE_SHARE))
    assert errors.size >= 30
    assert np.median(np.abs(errors)) <= 0.35
    without = default_table().with_overlay({chip: {"vllm": {"mixed_step_gqa_unpacked_share": 0.0}}})
    before = np.expm1(attention_log_errors(chip, without, kind="mixed", min_decode_share=MIXED_MIN_DECODE_SHARE))
    assert np.median(before) < -0.5


def test_the_shipped_prefill_ratio_reproduces_the_profiled_prompts():
    """RTX PRO 6000: the prompt-only attention points over 50 us within a median 15 % (fit: 7 %; 56 % at ratio 1)."""
    errors = np.expm1(attention_log_errors("rtx-pro-6000", kind="prefill"))
    assert errors.size >= 5
    assert np.median(np.abs(errors)) <= 0.15
