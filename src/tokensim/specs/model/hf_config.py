"""Hugging Face config.json -> ModelSpec: every layer's mixer and FFN, parameters counted exactly.

Totals follow ModelSpec: the language model without MTP modules and without the vision tower
(both reported apart); active parameters leave out unselected routed experts and the input
embedding table. Multimodal wrappers keep the language model under `text_config` and the vision
tower under `vision_config`. Two files use other field names and are renamed first: DBRX
(d_model, n_layers, attn_config, ffn_config) and DeepSeek's reference-code configs (dim,
n_layers, n_heads, moe_inter_dim, n_activated_experts, n_dense_layers, ...; these carry no MTP
field and DeepSeek V3.x has one MTP layer, so one is assumed).

The counting itself lives by job: hf_attention (softmax attention), hf_linear (linear attention,
SSMs), hf_ffn (MLPs, MoE), hf_layers (which block each layer has), hf_extras (MTP, vision),
hf_quant (weight precisions), hf_fields (typed reads that name the bad field).
"""
from __future__ import annotations

from pathlib import Path

from tokensim.errors import TokensimError, bad_value
from tokensim.inputs.files import parse, read_text
from tokensim.specs.model import hf_extras, hf_layers, hf_quant
from tokensim.specs.model.hf_fields import Fields
from tokensim.specs.model.spec import ModelSpec, MoE

_DEEPSEEK_REFERENCE = {"hidden_size": "dim", "intermediate_size": "inter_dim", "moe_intermediate_size": "moe_inter_dim",
                       "num_hidden_layers": "n_layers", "first_k_dense_replace": "n_dense_layers",
                       "num_attention_heads": "n_heads", "num_experts_per_tok": "n_activated_experts",
                       "n_group": "n_expert_groups", "topk_group": "n_limited_groups",
                       "routed_scaling_factor": "route_scale", "scoring_func": "score_func"}
# Defaults that transformers' config classes supply when a file leaves the field out.
_DEFAULTS = {"gemma3_text": {"vocab_size": 262208, "tie_word_embeddings": True}}


def _deepseek_reference(cfg: dict) -> Fields:
    data = {hf: cfg[ref] for hf, ref in _DEEPSEEK_REFERENCE.items() if ref in cfg}
    data.update({k: v for k, v in cfg.items() if k not in _DEEPSEEK_REFERENCE.values()})
    data.update(model_type="deepseek_v32" if "index_topk" in cfg else "deepseek_v3",
                num_key_value_heads=data.get("num_attention_heads"), num_nextn_predict_layers=1,
                topk_method="noaux_tc", tie_word_embeddings=False)
    return Fields(data, origin=dict(_DEEPSEEK_REFERENCE))


def _dbrx(cfg: dict) -> Fields:
    outer = Fields(cfg)
    attn = outer.sub("attn_config") or Fields({}, "attn_config.")
    ffn = outer.sub("ffn_config") or Fields({}, "ffn_config.")
    act = ffn.get("ffn_act_fn", {})
    data = dict(cfg, model_type="dbrx", hidden_size=cfg.get("d_model"), num_hidden_layers=cfg.get("n_layers"),
                num_attention_heads=cfg.get("n_heads"), num_key_value_heads=attn.get("kv_n_heads"),
                num_local_experts=ffn.get("moe_num_experts"), num_experts_per_tok=ffn.get("moe_top_k"),
                intermediate_size=ffn.get("ffn_hidden_size"),
                hidden_act=act.get("name", "silu") if isinstance(act, dict) else "silu")
    origin = {"hidden_size": "d_model", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
              "num_key_value_heads": "attn_config.kv_n_heads", "num_local_experts": "ffn_config.moe_num_experts",
              "num_experts_per_tok": "ffn_config.moe_top_k", "intermediate_size": "ffn_config.ffn_hidden_size"}
    return Fields(data, origin=origin)


def _unwrap(config: dict) -> tuple[Fields, Fields, Fields | None]:
    """(language-model fields, whole-file fields, vision fields or None)."""
    outer = Fields(config)
    if "dim" in config and "n_layers" in config and "hidden_size" not in config:
        text = _deepseek_reference(outer.data)
    elif config.get("model_type") == "dbrx" or ("d_model" in config and "ffn_config" in config):
        text = _dbrx(outer.data)
    else:
        text = outer.sub("text_config") or outer
    defaults = _DEFAULTS.get(text.str("model_type"), {})
    if defaults:
        text = Fields({**defaults, **text.data}, text.where, text.origin)
    return text, outer, outer.sub("vision_config")


def _tied(text: Fields, outer: Fields) -> bool:
    for f in (text, outer):
        if f.has("tie_word_embeddings"):
            return f.bool("tie_word_embeddings")
    return False


def spec_from_config(config: object, name: str, source: str = "") -> ModelSpec:
    """Build the ModelSpec of a Hugging Face config.json already parsed into a dict."""
    if not isinstance(config, dict):
        raise bad_value("config", f"a {type(config).__name__}", "a JSON object (a config.json)")
    text, outer, vision = _unwrap(config)
    fam = hf_layers.family(text)
    hidden = text.int("hidden_size")
    vocab = text.int("vocab_size")
    slots = hf_layers.plan(text, fam, hf_layers.n_layers(text, fam))
    layers = hf_layers.build_layers(text, fam, hidden, slots)
    final_norm = hidden
    m = text.int("hc_mult", default=1) if fam == "deepseek_v4" else 1
    if m > 1:
        final_norm += m * m * hidden + m + 1                         # hyper-connection head before the norm
    moe_at = [i for i, layer in enumerate(layers) if isinstance(layer.ffn, MoE)]
    dense_at = [i for i, s in enumerate(slots) if s.ffn == "dense"]
    has_shared = any(layer.ffn.shared_params for layer in layers if isinstance(layer.ffn, MoE))
    weights = hf_quant.weights(text, outer, dense_at[0] if dense_at else 0, moe_at[0] if moe_at else 0, has_shared)
    return ModelSpec(
        name=name, hidden_size=hidden, vocab_size=vocab, layers=layers,
        embed_params=vocab * hidden, lm_head_params=0 if _tied(text, outer) else vocab * hidden,
        final_norm_params=final_norm, mtp_params=hf_extras.mtp_params(text, fam, hidden, layers),
        vision_params=hf_extras.vision_params(vision, hidden), weights=weights, source=source,
        max_context_tokens=text.int("max_position_embeddings", default=0) or None,
    )


def load_config_file(path: str | Path) -> ModelSpec:
    """Read a config.json into a ModelSpec. The file is read by the one safe reader (size, UTF-8 and nesting
    bounded; Python's json accepts the non-standard `Infinity` some files carry, and the typed reads refuse it
    where a finite number is needed); every error names the file."""
    path = Path(path)
    config = read_json_document(path)
    # a file named config.json is named after its folder (as Hugging Face repositories lay it out)
    name = path.stem if path.stem != "config" or not path.resolve().parent.name else path.resolve().parent.name
    try:
        return spec_from_config(config, name=name, source=str(path))
    except TokensimError as exc:
        raise TokensimError(f"{path}: {exc}") from None


def read_json_document(path: Path) -> object:
    """A JSON file parsed (any top-level value: spec_from_config names a list or a number)."""
    return parse(read_text(path), "json", str(path))


__all__ = ["spec_from_config", "load_config_file"]
