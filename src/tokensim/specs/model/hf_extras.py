"""Parameters reported apart from the language model: multi-token-prediction modules and vision towers.

MTP: each module is an input projection from [embedding; hidden] (2*hidden x hidden), three norms
and one decoder layer; the embedding and LM head are shared with the main model and not counted.
The layer copies the model's last layer, except: DeepSeek V4 uses `compress_ratios[n_layers + i]`
(0: sliding window) and adds its hyper-connection head; Nemotron 3 uses `mtp_hybrid_override_pattern`
/ `mtp_layers_block_type`. The module count is `num_nextn_predict_layers`, else Qwen3.5's
`mtp_num_hidden_layers`, else MiniMax-M2's `num_mtp_modules` x `mtp_transformer_layers`.

Vision towers are approximate (encoder layers, patch and position embeddings, projector):
ViT-style layers are 4 h^2 attention + MLP (2 matrices, 3 for Gemma 4) + biases + norms; the
SigLIP (Gemma 3), Llama 4, Qwen3.5 and Gemma 4 layouts follow transformers and land within about 1 %
of its counts; MoonViT (Kimi K2.5/K2.6/K2.7/K3) follows the layer shapes in the config with a
patch-merger projector (LayerNorm, 4*d x 4*d, 4*d x text hidden), which is a guess for K3.
"""
from __future__ import annotations

from tokensim.specs.model import hf_layers
from tokensim.specs.model.hf_attention import deepseek_v4
from tokensim.specs.model.hf_fields import Fields
from tokensim.specs.model.spec import Layer


def mtp_params(f: Fields, fam: str, hidden: int, layers: tuple[Layer, ...]) -> int:
    n = f.int("num_nextn_predict_layers", default=0, minimum=0)
    if not f.has("num_nextn_predict_layers"):
        n = f.int("mtp_num_hidden_layers", default=0, minimum=0)
        if not n and f.bool("use_mtp"):
            n = f.int("num_mtp_modules", default=1) * f.int("mtp_transformer_layers", default=1)
    if n == 0:
        return 0
    module = 2 * hidden * hidden + 3 * hidden
    if fam == "deepseek_v4":
        ratios = f.list("compress_ratios") or []
        m = f.int("hc_mult", default=1)
        total = 0
        for i in range(n):
            ratio = ratios[len(layers) + i] if len(layers) + i < len(ratios) else 0
            v4_layer = Layer(deepseek_v4(f, hidden, ratio), layers[-1].ffn, layers[-1].norm_params)
            total += module + v4_layer.params + m * m * hidden + m + 1
        return total
    if fam == "nemotron_h":
        data = {k: v for k, v in f.data.items() if k not in ("hybrid_override_pattern", "layers_block_type")}
        if f.has("mtp_hybrid_override_pattern"):
            data["hybrid_override_pattern"] = f.str("mtp_hybrid_override_pattern")
        else:
            data["layers_block_type"] = f.list("mtp_layers_block_type", of=str) or ["attention", "moe"]
        sub = Fields(data, f.where)
        blocks = len(hf_layers.nemotron_pattern(sub))
        body = hf_layers.build_layers(sub, fam, hidden, hf_layers.plan(sub, fam, blocks))
        return n * (module + sum(layer.params for layer in body))
    return n * (module + layers[-1].params)


def vision_params(v: Fields | None, text_hidden: int) -> int:
    if v is None:
        return 0
    mt = v.str("model_type")
    if v.has("vt_hidden_size"):
        return _moonvit(v, text_hidden)
    h, i = v.int("hidden_size"), v.int("intermediate_size")
    depth = v.int_of("num_hidden_layers", "depth")
    patch, channels = v.int("patch_size"), v.int_of("num_channels", "in_channels", default=3)
    vit_layer = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h      # q,k,v,o (+biases), fc1/fc2 (+biases), 2 LayerNorms
    if mt == "llama4_vision_model":
        positions = (v.int("image_size") // patch) ** 2 + 1
        adapter = i * v.int("projector_input_dim") + v.int("projector_output_dim") ** 2
        return (depth * vit_layer + channels * patch * patch * h + (positions + 1) * h + 4 * h
                + adapter + v.int("vision_output_dim") * text_hidden)
    if mt == "gemma4_vision":
        layer = 4 * h * h + 3 * h * i + 4 * h + 2 * v.int("head_dim")
        return (depth * layer + channels * patch * patch * h + 2 * v.int("position_embedding_size") * h
                + h * text_hidden)
    if v.has("out_hidden_size"):                                    # Qwen3.5 / Qwen3-VL
        merged = h * v.int("spatial_merge_size", default=2) ** 2
        patch_in = channels * v.int("temporal_patch_size", default=2) * patch * patch
        return (depth * vit_layer + patch_in * h + h + v.int("num_position_embeddings", default=0) * h
                + 2 * h + merged * merged + merged + merged * v.int("out_hidden_size") + v.int("out_hidden_size"))
    positions = (v.int("image_size") // patch) ** 2                 # SigLIP (Gemma 3) and other ViTs
    return depth * vit_layer + channels * patch * patch * h + h + positions * h + 2 * h + h * text_hidden + h


def _moonvit(v: Fields, text_hidden: int) -> int:
    h, i = v.int("vt_hidden_size"), v.int("vt_intermediate_size")
    qkv = v.int("qkv_hidden_size", default=h)
    depth, patch = v.int("vt_num_hidden_layers"), v.int("patch_size")
    biased = v.bool("linear_bias", True)
    layer = h * 3 * qkv + qkv * h + 2 * h * i + 4 * h
    if biased:
        layer += 3 * qkv + h + i + h
    positions = v.int("init_pos_emb_height") * v.int("init_pos_emb_width") * h
    merge = v.int("mm_hidden_size", default=h) * 4
    projector = 2 * h + merge * merge + merge + merge * text_hidden + text_hidden
    return depth * layer + 3 * patch * patch * h + h + positions + 2 * h + projector
