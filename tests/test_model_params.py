"""Parameter counts: exact against the reference count, and against what each maker states.

COMPUTED_HERE is the "computed here (total / active)" column of data/models/SOURCES.md (from a
standard-library reference script; 8 of its totals also checked against transformers on the meta
device). Conventions: total = language model without MTP and vision; active = total minus
unselected routed experts minus the input embedding table. Our counts must match within 0.5 %.
"""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from tokensim.specs.model.catalog import catalog_model, entries
from tokensim.specs.model.hf_config import load_config_file

MODELS = Path(str(resources.files("tokensim") / "data" / "models"))

# file: (total B, active B, MTP B, vision B) as SOURCES.md states them
COMPUTED_HERE = {
    "moonshotai__Kimi-K2-Instruct.json": (1026.4, 31.69, 0, 0),
    "moonshotai__Kimi-K2-Thinking.json": (1026.4, 31.69, 0, 0),
    "moonshotai__Kimi-K2.5.json": (1026.4, 31.69, 0, 0.47),
    "nvidia__Kimi-K2.6-NVFP4.json": (1026.4, 31.69, 0, 0.47),
    "nvidia__Kimi-K2.7-Code-NVFP4.json": (1026.4, 31.69, 0, 0.47),
    "deepseek-ai__DeepSeek-V3.json": (671.0, 36.63, 11.61, 0),
    "deepseek-ai__DeepSeek-V3.1.json": (671.0, 36.63, 11.61, 0),
    "deepseek-ai__DeepSeek-R1.json": (671.0, 36.63, 11.61, 0),
    "deepseek-ai__DeepSeek-V3.2.json": (671.9, 37.48, 11.62, 0),
    "deepseek-ai__DeepSeek-V3.2-Exp.json": (671.9, 37.48, 11.62, 0),
    "deepseek-ai__DeepSeek-V4-Pro.json": (1573.0, 48.85, 25.84, 0),
    "deepseek-ai__DeepSeek-V4-Flash.json": (284.3, 13.27, 6.610, 0),
    "meta-llama__Llama-2-7b.json": (6.74, 6.61, 0, 0),
    "meta-llama__Llama-2-70b.json": (68.98, 68.71, 0, 0),
    "meta-llama__Llama-3.1-8B.json": (8.030, 7.505, 0, 0),
    "meta-llama__Llama-3.1-70B.json": (70.55, 69.50, 0, 0),
    "meta-llama__Llama-3.1-405B.json": (405.9, 403.8, 0, 0),
    "meta-llama__Llama-3.3-70B-Instruct.json": (70.55, 69.50, 0, 0),
    "meta-llama__Llama-4-Scout-17B-16E-Instruct.json": (107.8, 16.14, 0, 0.87),
    "meta-llama__Llama-4-Maverick-17B-128E-Instruct.json": (400.7, 16.15, 0, 0.87),
    "Qwen__Qwen3-32B.json": (32.76, 31.98, 0, 0),
    "Qwen__Qwen3-235B-A22B.json": (235.1, 21.57, 0, 0),
    # by hand: experts 48 x 128 x 3 x 2048 x 768 = 28.99B, attention 48 x (2 x 2048 x 4096 + 2 x 2048 x 512) = 0.906B,
    # router 48 x 2048 x 128 = 0.013B, embedding + lm_head 2 x 151936 x 2048 = 0.622B -> 30.53B; active = total
    # - 120/128 of the experts (27.18B) - embedding (0.311B) = 3.04B
    "Qwen__Qwen3-30B-A3B-Instruct-2507.json": (30.53, 3.04, 0, 0),
    "Qwen__Qwen3-Coder-480B-A35B-Instruct.json": (480.2, 34.54, 0, 0),
    "Qwen__Qwen3-Next-80B-A3B-Thinking.json": (79.67, 3.564, 0, 0),
    "Qwen__Qwen3.5-27B.json": (26.90, 25.62, 0.425, 0.46),
    "Qwen__Qwen3.5-35B-A3B.json": (34.66, 2.946, 0.845, 0.45),
    "Qwen__Qwen3.5-397B-A17B.json": (396.3, 16.33, 6.596, 0.46),
    "openai__gpt-oss-120b.json": (116.8, 5.133, 0, 0),
    "openai__gpt-oss-20b.json": (20.91, 3.608, 0, 0),
    "mistralai__Mixtral-8x7B-v0.1.json": (46.70, 12.75, 0, 0),
    "mistralai__Mixtral-8x22B-v0.1.json": (140.6, 38.96, 0, 0),
    "ai21labs__AI21-Jamba-1.5-Mini.json": (51.57, 11.84, 0, 0),
    "nvidia__Nemotron-H-56B-Base-8K.json": (56.32, 55.25, 0, 0),
    "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json": (120.7, 12.23, 2.942, 0),
    "nvidia__NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.json": (549.3, 54.99, 11.22, 0),
    "MiniMaxAI__MiniMax-M2.5.json": (228.7, 10.42, 11.06, 0),
    "MiniMaxAI__MiniMax-M2.7.json": (228.7, 10.42, 11.06, 0),
    "nvidia__MiniMax-M2.5-NVFP4.json": (228.7, 10.42, 11.06, 0),
    "MiniMaxAI__MiniMax-M3.json": (426.2, 24.73, 7.492, 0),
    "zai-org__GLM-4.5.json": (352.8, 32.86, 3.988, 0),
    "zai-org__GLM-4.6.json": (352.8, 32.86, 3.988, 0),
    "zai-org__GLM-4.7-FP8.json": (352.8, 32.86, 0, 0),
    "zai-org__GLM-5.json": (743.9, 40.83, 9.953, 0),
    "google__gemma-3-27b-it.json": (27.01, 25.60, 0, 0.42),
    "google__gemma-4-26B-A4B.json": (25.23, 3.084, 0, 0.57),
    "nvidia__Gemma-4-31B-IT-NVFP4.json": (30.70, 29.29, 0, 0.58),
    "moonshotai__Kimi-K3.json": (2779.5, 104.2, 0, None),
    "databricks__dbrx-instruct.json": (131.6, 35.85, 0, 0),
}


def test_every_config_file_has_a_reference_count():
    on_disk = {p.name for p in MODELS.glob("*.json") if not p.name.endswith("hf_quant_config.json")}
    assert on_disk == set(COMPUTED_HERE)


@pytest.mark.parametrize("file", sorted(COMPUTED_HERE))
def test_counts_match_the_reference_count_within_half_a_percent(file):
    total, active, mtp, vision = COMPUTED_HERE[file]
    s = load_config_file(MODELS / file)
    assert s.total_params / 1e9 == pytest.approx(total, rel=0.005)
    assert s.active_params / 1e9 == pytest.approx(active, rel=0.005)
    assert s.mtp_params / 1e9 == pytest.approx(mtp, rel=0.005)
    if vision is not None:                                 # vision is approximate (see hf_extras)
        assert s.vision_params / 1e9 == pytest.approx(vision, rel=0.03, abs=0.0)


def test_kimi_k3_vision_encoder_near_moonshots_401m():
    """Encoder 401M as stated; our figure adds an assumed patch-merger projector (~46M)."""
    v = load_config_file(MODELS / "moonshotai__Kimi-K3.json").vision_params
    assert 0.39e9 < v < 0.46e9


def test_llama_31_8b_by_hand():
    """Every weight of Llama-3.1-8B written out."""
    hidden, vocab, layers, inter, heads, kv_heads, head_dim = 4096, 128256, 32, 14336, 32, 8, 128
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlp = 3 * hidden * inter
    total = 2 * vocab * hidden + layers * (attention + mlp + 2 * hidden) + hidden
    s = load_config_file(MODELS / "meta-llama__Llama-3.1-8B.json")
    assert s.total_params == total == 8_030_261_248
    assert s.active_params == total - vocab * hidden


def test_deepseek_v3_moe_layer_by_hand():
    s = load_config_file(MODELS / "deepseek-ai__DeepSeek-V3.json")
    moe = s.layers[3].ffn
    assert moe.expert_params == 3 * 7168 * 2048
    assert (moe.n_experts, moe.top_k, moe.shared_params) == (256, 8, 3 * 7168 * 2048)
    assert moe.router_params == 7168 * 256 + 256          # gate and expert-bias vector
    q = 7168 * 1536 + 1536 + 1536 * 128 * 192
    kv = 7168 * 576 + 512 + 512 * 128 * 256
    assert s.layers[0].mixer.params == q + kv + 128 * 128 * 7168


# ---------------------------------------------------------------- stated figures

_TERMS = ("total", "active", "embedding", "lm_head", "vision", "mtp")


def _evaluate(expression: str, spec) -> float:
    values = {"total": spec.total_params, "active": spec.active_params, "embedding": spec.embed_params,
              "lm_head": spec.lm_head_params, "vision": spec.vision_params, "mtp": spec.mtp_params}
    tokens = re.findall(r"[+-]|[a-z_]+", expression)
    assert tokens and all(t in _TERMS or t in "+-" for t in tokens), expression
    result, sign = 0.0, 1
    for t in tokens:
        if t in "+-":
            sign = 1 if t == "+" else -1
        else:
            result += sign * values[t]
    return result


def _stated_cases():
    for name, e in entries().items():
        yield pytest.param(name, id=name)


@pytest.mark.parametrize("name", [p.values[0] for p in _stated_cases()])
def test_counts_against_the_makers_stated_figures(name):
    """Total within 2 % and active within 5 % of the stated figures, or the comparison the catalog's
    `compare` table names (explained by its count_note): e.g. Llama 4 adds the vision encoder to the
    total and the embedding to the active count, as Meta does."""
    import tomllib

    raw = tomllib.loads((MODELS / "catalog.toml").read_text())[name]
    e = entries()[name]
    spec = catalog_model(name)
    compare = raw.get("compare", {})
    if compare:
        assert e.count_note, f"{name}: a special comparison needs a count_note that explains it"
    tolerance = {"total": 0.02, "active": 0.05, **compare.get("tolerance", {})}
    assert e.stated_total_params and e.stated_active_params and e.stated_source.startswith("http")
    total = _evaluate(compare.get("total", "total"), spec)
    active = _evaluate(compare.get("active", "active"), spec)
    assert total == pytest.approx(e.stated_total_params, rel=tolerance["total"])
    assert active == pytest.approx(e.stated_active_params, rel=tolerance["active"])


def test_default_comparisons_hold_for_most_entries():
    """Special comparisons stay the exception: the default (2 % / 5 %) is used by most entries."""
    import tomllib

    table = tomllib.loads((MODELS / "catalog.toml").read_text())
    plain = [n for n, t in table.items() if "compare" not in t]
    assert len(plain) >= len(table) // 2
