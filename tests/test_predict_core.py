"""Core predictor: hand calculations written out, against tokensim's own numbers."""
import math

import pytest

import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError
from tokensim.perf.memory import kv_bytes_per_token
from tokensim.specs.model.catalog import load_model

H100_BW = 3.35e12        # bytes/s, NVIDIA H100 SXM datasheet (hardware/h100-sxm.toml)


def test_llama_8b_bf16_h100_batch1_bytes_and_bound():
    """Llama-3.1-8B bf16, batch 1: a step reads every weight but the embedding table, plus the KV cache.

    Hand calculation (config: d=4096, 32 layers, 8 KV heads x 128, vocab 128256):
      weights read = 2 B x (8.030e9 total - 0.525e9 embedding) = 15.01e9 B
      KV read      = 32 layers x 2 x 8 x 128 x 2 B = 131,072 B per token x (1024 + 256/2) tokens = 0.151e9 B
      bound        = 3.35e12 / 15.16e9 = 221 tokens/s
    """
    p = tokensim.predict("llama-3.1-8b", "h100-sxm", batch=1, input_tokens=1024, output_tokens=256)
    weights = 2 * (8.030e9 - 128256 * 4096)
    kv = 32 * 2 * 8 * 128 * 2 * (1024 + 128)
    assert p.bytes_per_step_per_chip == pytest.approx(weights + kv, rel=0.01)
    assert weights / (weights + kv) > 0.95                          # weights dominate at batch 1
    bound = H100_BW / (weights + kv)
    assert p.bandwidth_bound_tokens_per_s_per_user == pytest.approx(bound, rel=0.01)
    assert p.tokens_per_s_per_user < bound
    assert p.chips == 1


def test_kv_bytes_mla_against_gqa():
    """Per token, over all layers, bf16 KV:
      DeepSeek-V3 (MLA): 61 layers x (512 latent + 64 rope) x 2 B = 70,272 B
      Llama-3.1-70B (GQA): 80 layers x 2 (K,V) x 8 heads x 128 x 2 B = 327,680 B  (4.7x more)
    """
    assert kv_bytes_per_token(load_model("deepseek-v3")) == 61 * 576 * 2
    assert kv_bytes_per_token(load_model("llama-3.1-70b")) == 80 * 2 * 8 * 128 * 2


def test_int4_weights_move_about_a_quarter_of_bf16_bytes():
    """int4 with a 16-bit scale per 128 weights is 4.125 bits: 4.125/16 = 0.258 of bf16 for the linear weights."""
    bf16 = tokensim.predict("llama-3.1-8b", "h200", tp=1, batch=1, weights="bf16")
    int4 = tokensim.predict("llama-3.1-8b", "h200", tp=1, batch=1, weights="int4")
    m = load_model("llama-3.1-8b")
    linear = m.active_params - m.lm_head_params             # the LM head stays bf16
    expected = linear * 4.125 / 8 + m.lm_head_params * 2
    kv = bf16.bytes_per_step_per_chip - (linear + m.lm_head_params) * 2
    assert int4.bytes_per_step_per_chip - kv == pytest.approx(expected, rel=0.01)


def test_moe_touches_fewer_experts_at_batch_1():
    """DeepSeek-V3 at batch 1 reads ~37B active weights, not 671B: 8 of 256 experts per layer."""
    p = tokensim.predict("deepseek-v3", "h200", tp=8, batch=1)
    m = load_model("deepseek-v3")
    per_chip_active = m.active_params / 8            # fp8: one byte per weight (block scales add 0.2 %)
    assert p.bytes_per_step_per_chip < 1.3 * per_chip_active + 2e9   # + bf16 LM head / KV slack
    big = tokensim.predict("deepseek-v3", "h200", tp=8, batch=256)
    assert big.bytes_per_step_per_chip > 5 * p.bytes_per_step_per_chip


def test_fewest_chips_for_405b_bf16_on_h100():
    """405.9e9 params x 2 B = 812 GB > 8 x 80 GB x 0.9 usable = 576 GB: needs two 8-GPU nodes (pp 2)."""
    p = tokensim.predict("llama-3.1-405b", "h100-sxm", batch=1)
    assert p.chips == 16 and p.deployment.tp == 8 and p.deployment.pp == 2


def test_prediction_is_frozen_and_serializes():
    p = tokensim.predict("llama-3.1-8b", "h100-sxm")
    with pytest.raises(Exception):
        p.chips = 3
    d = p.to_dict()
    for key in ("tokens_per_s_per_user", "time_per_output_token_s", "ttft_s", "throughput_tokens_per_s",
                "chips", "memory_per_chip_bytes", "max_batch", "breakdown", "tokens_per_s_per_user_range"):
        assert key in d
    assert {"name", "time_s", "bound"} <= set(d["breakdown"][0])
    assert math.isclose(d["time_per_output_token_s"] * d["tokens_per_s_per_user"], 1.0)


def test_breakdown_marks_bounds():
    """Batch 1 decode is memory-bound in its GEMVs; a long prefill is compute-bound."""
    p = tokensim.predict("llama-3.1-8b", "h100-sxm", batch=1, input_tokens=4096)
    ops = {o.name: o for o in p.breakdown}
    assert ops["ffn"].bound == "memory"
    pre = {o.name: o for o in p.prefill_breakdown}
    assert pre["ffn"].bound == "compute"


def test_tp_must_divide_kv_heads():
    with pytest.raises(TokensimError, match=r"tp = 3: expected a divisor or multiple of the model's 8 KV heads"):
        tokensim.predict("llama-3.1-8b", "h100-sxm", tp=3)


def test_model_that_does_not_fit_names_the_numbers():
    with pytest.raises(TokensimError, match=r"needs .* GB per chip .* against .* GB usable"):
        tokensim.predict("llama-3.1-405b", "h100-sxm", tp=1)


def test_negative_batch_is_refused():
    with pytest.raises(TokensimError, match=r"batch = -1"):
        Deployment(batch=-1)
