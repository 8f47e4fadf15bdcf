"""Which mixer and which FFN each layer has, per model family, and the layers built from that plan.

Families (picked from model_type, else from the fields a config carries):
- "gqa": Llama, Mistral/Mixtral, Qwen2/3, Llama 4, gpt-oss, GLM-4.x, MiniMax-M2/M3, Gemma 3/4, DBRX.
  Sliding windows: `layer_types` (gpt-oss, Gemma 4); Gemma 3 without layer_types: every
  `sliding_window_pattern`-th layer (default 6) is global, the rest use `sliding_window`; Mistral/
  Qwen-style `sliding_window` only when `use_sliding_window` is true (from `max_window_layers`
  on, as in Qwen2); Llama 4's chunked local attention (`attention_chunk_size`, on all layers
  but every `no_rope_layer_interval`-th, default 4) is treated as a window of the chunk size.
- "mla": DeepSeek V2/V3/V3.2, Kimi K2.x, GLM-5.
- "deepseek_v4": compressed attention per `compress_ratios`; the first `num_hash_layers` MoE
  layers route by token hash.
- "qwen_hybrid": Qwen3-Next / Qwen3.5, Gated DeltaNet with full attention per `layer_types` or
  every `full_attention_interval`-th layer.
- "kimi_linear": Kimi K3 / Kimi Linear, KDA on `kda_layers`, gated MLA on `full_attn_layers` (1-based).
- "nemotron_h": one block per layer from `hybrid_override_pattern` (M Mamba-2, - MLP, * attention,
  E MoE) or `layers_block_type`.
- "jamba": attention every `attn_layer_period` from `attn_layer_offset`, Mamba-1 elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass

from tokensim.errors import bad_value
from tokensim.specs.model import hf_attention as attn
from tokensim.specs.model import hf_ffn as ffn
from tokensim.specs.model import hf_linear as lin
from tokensim.specs.model.hf_fields import MAX_LAYERS, Fields
from tokensim.specs.model.spec import Layer

_NEMOTRON = {"M": ("mamba2", None), "-": (None, "dense"), "*": ("attn", None), "E": (None, "moe"),
             "mamba": ("mamba2", None), "mlp": (None, "dense"), "attention": ("attn", None), "moe": (None, "moe")}


@dataclass(frozen=True)
class Slot:
    mixer: str | None          # "attn", "attn_global", "attn_sparse", "mla", "v4", "gdn", "kda", "mamba2", "mamba1"
    ffn: str | None            # "dense", "moe", "moe_hash"
    window: int | None = None
    ratio: int = 0             # DeepSeek V4 compress ratio


_FAMILY_OF_TYPE = {"deepseek_v2": "mla", "deepseek_v3": "mla", "deepseek_v32": "mla", "kimi_k2": "mla",
                   "glm_moe_dsa": "mla", "qwen3_next": "qwen_hybrid", "qwen3_5_text": "qwen_hybrid",
                   "qwen3_5_moe_text": "qwen_hybrid"}


def family(f: Fields) -> str:
    """The family of a known model_type; otherwise guessed from the fields the config carries."""
    mt = f.str("model_type")
    if mt in _FAMILY_OF_TYPE:
        return _FAMILY_OF_TYPE[mt]
    if mt == "deepseek_v4" or f.has("compress_ratios"):
        return "deepseek_v4"
    if mt == "kimi_linear" or f.has("linear_attn_config"):
        return "kimi_linear"
    if mt == "nemotron_h" or f.has("hybrid_override_pattern") or f.has("layers_block_type"):
        return "nemotron_h"
    if mt == "jamba" or f.has("attn_layer_period"):
        return "jamba"
    if f.has("linear_num_value_heads"):
        return "qwen_hybrid"
    if f.has("kv_lora_rank"):
        return "mla"
    return "gqa"


def n_layers(f: Fields, fam: str) -> int:
    if fam == "nemotron_h" and not f.has("num_hidden_layers"):
        return len(nemotron_pattern(f))
    return f.int("num_hidden_layers")


def nemotron_pattern(f: Fields) -> list[str]:
    key = "hybrid_override_pattern" if f.has("hybrid_override_pattern") else "layers_block_type"
    pattern = list(f.str(key)) if key == "hybrid_override_pattern" else f.list(key, of=str)
    if pattern is None:
        raise bad_value(f.where + "hybrid_override_pattern or layers_block_type", None, "one block type per layer "
                        "(the field is missing)")
    if len(pattern) > MAX_LAYERS:
        raise bad_value(f.name(key), f"{len(pattern):,} layers", f"at most {MAX_LAYERS:,} (tokensim reads models of at most "
                        f"{MAX_LAYERS:,} layers)")
    bad = [p for p in pattern if p not in _NEMOTRON]
    if bad:
        raise bad_value(f.name(key), bad[0], "one of M, -, *, E (or mamba, mlp, attention, moe)")
    return pattern


def _layer_types(f: Fields, n: int) -> list[str] | None:
    types = f.list("layer_types", of=str, length=n)
    return types[:n] if types else None


def _gqa_windows(f: Fields, model_type: str, n: int) -> list[tuple[str, int | None]]:
    types = _layer_types(f, n)
    if types:
        window = f.int("sliding_window", default=None) if "sliding_attention" in types else None
        glob = "attn_global" if model_type == "gemma4_text" else "attn"
        return [("attn", window) if t == "sliding_attention" else (glob, None) for t in types]
    if model_type == "gemma3_text":
        period, window = f.int("sliding_window_pattern", default=6), f.int("sliding_window", default=4096)
        return [("attn", None) if (i + 1) % period == 0 else ("attn", window) for i in range(n)]
    if model_type == "llama4_text" and f.has("attention_chunk_size"):
        period, chunk = f.int("no_rope_layer_interval", default=4), f.int("attention_chunk_size")
        return [("attn", None) if (i + 1) % period == 0 else ("attn", chunk) for i in range(n)]
    if f.bool("use_sliding_window") and f.has("sliding_window"):
        start = f.int("max_window_layers", default=0, minimum=0)
        return [("attn", f.int("sliding_window") if i >= start else None) for i in range(n)]
    return [("attn", None)] * n


def plan(f: Fields, fam: str, n: int) -> list[Slot]:
    mt = f.str("model_type")
    if fam == "nemotron_h":
        return [Slot(*_NEMOTRON[p]) for p in nemotron_pattern(f)[:n]]
    moe = ffn.moe_flags(f, n)
    ffns = ["moe" if m else "dense" for m in moe]
    if fam == "gqa":
        sparse = (f.sub("sparse_attention_config") or Fields({})).list("sparse_attention_freq", length=n)
        mixers = _gqa_windows(f, mt, n)
        return [Slot("attn_sparse" if sparse and sparse[i] else m, ffns[i], w) for i, (m, w) in enumerate(mixers)]
    if fam == "mla":
        return [Slot("mla", x) for x in ffns]
    if fam == "deepseek_v4":
        ratios = f.list_of("compress_ratios", length=n)
        hashed = f.int("num_hash_layers", default=0, minimum=0)
        return [Slot("v4", "moe_hash" if i < hashed else "moe", ratio=ratios[i]) for i in range(n)]
    if fam == "qwen_hybrid":
        types = _layer_types(f, n)
        if not types:
            every = f.int("full_attention_interval")
            types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
        return [Slot("attn" if t == "full_attention" else "gdn", ffns[i]) for i, t in enumerate(types)]
    if fam == "kimi_linear":
        c = f.table("linear_attn_config")
        full = set(c.list("full_attn_layers") or ())
        kda = set(c.list("kda_layers") or ())
        return [Slot("mla" if i + 1 in full or i + 1 not in kda else "kda", ffns[i]) for i in range(n)]
    if fam == "jamba":
        period, offset = f.int("attn_layer_period"), f.int("attn_layer_offset", default=0, minimum=0)
        return [Slot("attn" if i % period == offset else "mamba1", ffns[i]) for i in range(n)]
    raise bad_value("model_type", mt, "a supported family")


def norm_params(f: Fields, fam: str, hidden: int) -> int:
    """RMSNorm/LayerNorm weights of one layer (plus DeepSeek V4's hyper-connection maps)."""
    mt = f.str("model_type")
    if fam == "nemotron_h":
        return hidden
    if mt.startswith("gemma"):
        return 4 * hidden
    if fam == "deepseek_v4":
        return 2 * hidden + 2 * attn.v4_hyper_connection_params(f, hidden)
    return 2 * hidden


def build_layers(f: Fields, fam: str, hidden: int, slots: list[Slot]) -> tuple[Layer, ...]:
    """One Layer per slot; identical slots share one (frozen) Layer."""
    built: dict[Slot, Layer] = {}
    for s in slots:
        if s not in built:
            built[s] = Layer(build_mixer(f, hidden, s), build_ffn(f, hidden, s.ffn), norm_params(f, fam, hidden))
    return tuple(built[s] for s in slots)


def build_mixer(f: Fields, hidden: int, s: Slot):
    mt = f.str("model_type")
    if s.mixer in ("attn", "attn_global", "attn_sparse"):
        return attn.gqa(f, mt, hidden, s.window, global_layer=s.mixer == "attn_global", sparse=s.mixer == "attn_sparse")
    if s.mixer == "mla":
        return attn.mla(f, hidden, output_gate=f.bool("mla_use_output_gate"))
    if s.mixer == "v4":
        return attn.deepseek_v4(f, hidden, s.ratio)
    builders = {"gdn": lin.gated_deltanet, "kda": lin.kimi_delta, "mamba2": lin.mamba2, "mamba1": lin.mamba1}
    return builders[s.mixer](f, hidden) if s.mixer else None


def build_ffn(f: Fields, hidden: int, kind: str | None):
    mt = f.str("model_type")
    if kind == "dense":
        return ffn.dense(f, mt, hidden)
    if kind in ("moe", "moe_hash"):
        return ffn.moe(f, mt, hidden, hashed=kind == "moe_hash")
    return None
