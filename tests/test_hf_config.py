"""Reading Hugging Face config.json files into ModelSpec: layer structure, cost fields, precisions, errors."""
from __future__ import annotations

import csv
import json
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest

from tokensim.catalog import normalize
from tokensim.errors import TokensimError
from tokensim.specs.model.catalog import catalog_model, entries, find_name
from tokensim.specs.model.hf_config import load_config_file, spec_from_config
from tokensim.specs.model.spec import Attention, DenseFFN, LinearMixer, MoE

MODELS = Path(str(resources.files("tokensim") / "data" / "models"))
MEASUREMENTS = Path(str(resources.files("tokensim") / "data" / "measurements.csv"))


def spec(file: str):
    return load_config_file(MODELS / file)


def config(file: str) -> dict:
    return json.loads((MODELS / file).read_text())


def mixers(s) -> Counter:
    return Counter(type(l.mixer).__name__ if l.mixer else None for l in s.layers)


# ---------------------------------------------------------------- cost fields


def test_kv_cache_per_token_mla_versus_gqa_by_hand():
    """MLA caches one latent plus the shared RoPE key; GQA caches K and V for each KV head."""
    v3 = spec("deepseek-ai__DeepSeek-V3.json").layers[0].mixer
    kv_lora_rank, qk_rope_head_dim = 512, 64
    assert v3.kind == "mla" and v3.kv_elems_per_token == kv_lora_rank + qk_rope_head_dim == 576
    # absorbed decode: scores against the latent+rope (d_c + d_r) and values from the latent (d_c), 2 FLOPs each
    assert v3.score_flops_per_pair == 2 * 128 * (2 * kv_lora_rank + qk_rope_head_dim) == 278_528

    llama = spec("meta-llama__Llama-3.1-70B.json").layers[0].mixer
    n_kv_heads, head_dim, n_heads = 8, 128, 64
    assert llama.kind == "gqa" and llama.kv_elems_per_token == 2 * n_kv_heads * head_dim == 2048
    assert llama.score_flops_per_pair == 4 * n_heads * head_dim == 32_768
    assert llama.kv_elems_per_token / v3.kv_elems_per_token == pytest.approx(3.56, abs=0.01)


def test_gpt_oss_alternates_sliding_128_and_full_attention():
    """layer_types: even layers slide over 128 tokens, odd layers see the whole context; sinks are counted."""
    s = spec("openai__gpt-oss-120b.json")
    windows = [l.mixer.window for l in s.layers]
    assert windows == [128, None] * 18
    att = s.layers[0].mixer
    hidden, q, kv = 2880, 64 * 64, 8 * 64
    assert att.params == 2 * hidden * q + 2 * hidden * kv + (q + 2 * kv + hidden) + 64


def test_gemma3_uses_the_default_five_local_one_global_pattern():
    """The Gemma 3 file has no layer_types: Gemma3TextConfig's sliding_window_pattern 6 applies."""
    windows = [l.mixer.window for l in spec("google__gemma-3-27b-it.json").layers]
    assert windows.count(None) == 10 and windows.count(1024) == 52
    assert all(w is None for w in windows[5::6])


def test_gemma4_global_layers_use_their_own_kv_heads_and_head_dim():
    s = spec("google__gemma-4-26B-A4B.json")
    local, glob = s.layers[0].mixer, s.layers[5].mixer
    assert (local.window, local.n_kv_heads, local.head_dim) == (1024, 8, 256)
    assert (glob.window, glob.n_kv_heads, glob.head_dim) == (None, 2, 512)
    assert s.lm_head_params == 0                         # tied


def test_sliding_window_only_when_use_sliding_window_is_true():
    base = config("mistralai__Mixtral-8x7B-v0.1.json")
    assert spec_from_config(dict(base, sliding_window=4096), "m").layers[0].mixer.window is None
    on = spec_from_config(dict(base, sliding_window=4096, use_sliding_window=True), "m")
    assert {l.mixer.window for l in on.layers} == {4096}


def test_llama4_chunked_attention_and_interleaved_moe():
    s = spec("meta-llama__Llama-4-Maverick-17B-128E-Instruct.json")
    assert [isinstance(l.ffn, MoE) for l in s.layers] == [False, True] * 24
    windows = [l.mixer.window for l in s.layers]
    assert windows[3::4] == [None] * 12 and set(windows) - {None} == {8192}


def test_deepseek_v32_and_glm5_carry_the_dsa_indexer():
    for file, heads in (("deepseek-ai__DeepSeek-V3.2.json", 64), ("zai-org__GLM-5.json", 32)):
        att = spec(file).layers[0].mixer
        assert (att.select_topk, att.indexer_elems_per_token) == (2048, 128)
        assert att.indexer_flops_per_pair == 2 * heads * 128
    v3, v32 = spec("deepseek-ai__DeepSeek-V3.json"), spec("deepseek-ai__DeepSeek-V3.2-Exp.json")
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64   # wq_b, wk, k LayerNorm, head weights
    assert v32.layers[0].mixer.params - v3.layers[0].mixer.params == indexer


def test_deepseek_v4_compressed_attention_per_layer():
    s = spec("deepseek-ai__DeepSeek-V4-Flash.json")
    ratios = [l.mixer.compress_ratio for l in s.layers]
    assert ratios[:4] == [1, 1, 4, 128] and Counter(ratios) == {4: 21, 128: 20, 1: 2}
    raw, csa, hca = s.layers[0].mixer, s.layers[2].mixer, s.layers[3].mixer
    assert (raw.window, raw.select_topk) == (128, None)
    assert (csa.select_topk, csa.indexer_elems_per_token, csa.window) == (512, 128, None)
    assert (hca.select_topk, hca.indexer_elems_per_token) == (None, 0)
    assert raw.kv_elems_per_token == 512 and raw.n_kv_heads == 1
    assert csa.read_entries(1_000_000) == 512 and hca.cached_entries(1_000_000) == 1_000_000 / 128


def test_minimax_m3_block_sparse_attention_as_dsa():
    s = spec("MiniMaxAI__MiniMax-M3.json")
    assert [l.mixer.select_topk for l in s.layers[:4]] == [None, None, None, 16 * 128]
    assert [isinstance(l.ffn, MoE) for l in s.layers].count(True) == 57


# ---------------------------------------------------------------- hybrid layer plans


def test_qwen3_next_has_36_gated_deltanet_and_12_full_attention_layers():
    s = spec("Qwen__Qwen3-Next-80B-A3B-Thinking.json")
    assert mixers(s) == {"LinearMixer": 36, "Attention": 12}
    assert all(isinstance(l.mixer, Attention) for l in s.layers[3::4])
    gdn = s.layers[0].mixer
    assert gdn.kind == "gated_deltanet"
    conv_dim = 2 * 16 * 128 + 32 * 128
    assert gdn.state_elems == 32 * 128 * 128 + conv_dim * 3


def test_nemotron_h_56b_is_54_mamba_54_mlp_10_attention_blocks():
    """Nemotron-H has one block per layer (mixer or MLP); its file carries the `Infinity` JSON token."""
    s = spec("nvidia__Nemotron-H-56B-Base-8K.json")
    kinds = Counter((type(l.mixer).__name__ if l.mixer else "-", type(l.ffn).__name__ if l.ffn else "-")
                    for l in s.layers)
    assert kinds == {("LinearMixer", "-"): 54, ("-", "DenseFFN"): 54, ("Attention", "-"): 10}
    mamba = next(l.mixer for l in s.layers if isinstance(l.mixer, LinearMixer))
    assert mamba.kind == "mamba2" and mamba.state_elems == 256 * 64 * 256 + (16384 + 2 * 8 * 256) * 3
    mlp = next(l.ffn for l in s.layers if isinstance(l.ffn, DenseFFN))
    assert mlp.params == 2 * 8192 * 32768                  # relu2: up and down only


def test_kimi_k3_has_69_kda_and_24_mla_layers():
    s = spec("moonshotai__Kimi-K3.json")
    assert Counter(l.mixer.kind for l in s.layers) == {"kda": 69, "mla": 24}
    kda, mla = s.layers[0].mixer, s.layers[3].mixer
    assert kda.state_elems == 96 * 128 * 128 + 3 * 96 * 128 * 3
    assert mla.kv_elems_per_token == 512 + 64
    moe = s.layers[1].ffn
    assert (moe.n_experts, moe.top_k, moe.expert_params) == (896, 16, 3 * 3584 * 3072)
    assert moe.latent_params == 2 * 7168 * 3584 + 3584 and isinstance(s.layers[0].ffn, DenseFFN)


def test_jamba_places_attention_every_8th_and_moe_every_2nd_layer():
    s = spec("ai21labs__AI21-Jamba-1.5-Mini.json")
    assert [i for i, l in enumerate(s.layers) if isinstance(l.mixer, Attention)] == [4, 12, 20, 28]
    assert [i for i, l in enumerate(s.layers) if isinstance(l.ffn, MoE)] == list(range(1, 32, 2))
    assert s.layers[0].mixer.kind == "mamba"


# ---------------------------------------------------------------- weight precisions


def test_quantization_groups_gpt_oss():
    w = spec("openai__gpt-oss-120b.json").weights
    assert w.routed_experts == "mxfp4"
    assert (w.attention, w.shared_experts, w.embedding, w.lm_head) == ("bf16",) * 4


def test_quantization_groups_deepseek_v3_fp8_blocks():
    w = spec("deepseek-ai__DeepSeek-V3.json").weights
    assert (w.attention, w.dense_ffn, w.shared_experts, w.routed_experts) == ("fp8",) * 4
    assert (w.embedding, w.lm_head) == ("bf16", "bf16")


def test_quantization_groups_kimi_k25_int4_experts():
    w = spec("moonshotai__Kimi-K2.5.json").weights
    assert w.routed_experts == "int4-g32"
    assert (w.attention, w.dense_ffn, w.shared_experts, w.lm_head) == ("bf16",) * 4


def test_quantization_groups_kimi_k3_mxfp4_experts():
    w = spec("moonshotai__Kimi-K3.json").weights
    assert w.routed_experts == "mxfp4"
    assert (w.attention, w.dense_ffn, w.shared_experts, w.lm_head) == ("bf16",) * 4


def test_nvfp4_files_and_the_kimi_k26_int4_override():
    nv = catalog_model("kimi-k2.6-nvfp4").weights
    assert (nv.routed_experts, nv.attention, nv.dense_ffn, nv.shared_experts) == ("nvfp4", "bf16", "bf16", "bf16")
    assert catalog_model("kimi-k2.6").weights.routed_experts == "int4-g32"
    assert catalog_model("kimi-k2-thinking").weights.routed_experts == "int4-g32"
    gemma = spec("nvidia__Gemma-4-31B-IT-NVFP4.json").weights
    assert (gemma.dense_ffn, gemma.attention) == ("nvfp4", "bf16")
    assert catalog_model("gemma-4-31b").weights.dense_ffn == "bf16"


def test_deepseek_v4_experts_fp4_rest_fp8():
    w = spec("deepseek-ai__DeepSeek-V4-Pro.json").weights
    assert (w.routed_experts, w.attention, w.shared_experts) == ("mxfp4", "fp8", "fp8")


# ---------------------------------------------------------------- input handling


def test_source_keys_are_ignored():
    base = config("meta-llama__Llama-3.1-8B.json")
    a = spec_from_config(base, "a")
    b = spec_from_config(dict(base, _source="anything at all"), "a")
    assert a == b


@pytest.mark.parametrize("change, field", [
    ({"hidden_size": None}, "hidden_size"),
    ({"num_hidden_layers": "eighty"}, "num_hidden_layers"),
    ({"num_hidden_layers": 2.5}, "num_hidden_layers"),
    ({"num_attention_heads": True}, "num_attention_heads"),
    ({"vocab_size": -5}, "vocab_size"),
    ({"layer_types": ["full_attention"]}, "layer_types"),
])
def test_malformed_fields_raise_naming_the_field(change, field):
    cfg = dict(config("openai__gpt-oss-20b.json"), **change)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(TokensimError, match=field) as err:
        spec_from_config(cfg, "broken")
    assert "\n" not in str(err.value)


def test_errors_inside_text_config_and_renamed_files_name_the_files_field():
    cfg = config("moonshotai__Kimi-K2.5.json")
    del cfg["text_config"]["kv_lora_rank"]
    with pytest.raises(TokensimError, match=r"text_config\.kv_lora_rank"):
        spec_from_config(cfg, "k")
    dbrx = config("databricks__dbrx-instruct.json")
    del dbrx["d_model"]
    with pytest.raises(TokensimError, match="d_model"):
        spec_from_config(dbrx, "d")
    nemotron = dict(config("nvidia__Nemotron-H-56B-Base-8K.json"), hybrid_override_pattern="M-X")
    with pytest.raises(TokensimError, match="hybrid_override_pattern"):
        spec_from_config(nemotron, "n")


def test_a_file_that_is_not_json_names_the_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{'hidden_size': 4096,}")
    with pytest.raises(TokensimError, match="config.json"):
        load_config_file(bad)
    with pytest.raises(TokensimError, match="JSON object"):
        spec_from_config([1, 2], "list")
    with pytest.raises(TokensimError, match="nowhere.json"):
        load_config_file(tmp_path / "nowhere.json")


# ---------------------------------------------------------------- catalog names


def test_every_model_in_measurements_csv_resolves():
    with MEASUREMENTS.open() as f:
        names = {row["model"] for row in csv.DictReader(f)}
    missing = sorted(n for n in names if find_name(n) is None)
    assert not missing


def test_aliases_do_not_collide_after_normalization():
    owner: dict[str, str] = {}
    for name, e in entries().items():
        for alias in (name, *e.aliases):
            key = normalize(alias)
            assert owner.setdefault(key, name) == name, f"{alias!r} of {name} collides with {owner[key]}"


def test_catalog_files_all_exist_and_every_config_is_in_the_catalog():
    used = {e.file for e in entries().values()}
    on_disk = {p.name for p in MODELS.glob("*.json") if not p.name.endswith("hf_quant_config.json")}
    assert used <= on_disk and on_disk <= used
