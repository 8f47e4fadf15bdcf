"""Softmax-attention blocks from a config: GQA/MHA/MQA, DeepSeek MLA (+ DSA indexer), DeepSeek V4.

Parameters are counted weight by weight; the cost fields follow spec.Attention:
- GQA: KV cache 2*n_kv*head_dim per token; 2*n_heads*(head_dim + v_head_dim) FLOPs per (query, key).
- MLA: the cache holds the latent kv_lora_rank plus the shared RoPE key; decode runs absorbed,
  2*n_heads*(2*kv_lora_rank + rope) FLOPs per pair.
- DSA (DeepSeek V3.2, GLM-5): the core attention reads `index_topk` entries; the indexer caches one
  index_head_dim key per token and spends 2*index_n_heads*index_head_dim FLOPs per cached entry.
- MiniMax-M3 block-sparse attention is treated as DSA: top `sparse_topk_blocks` blocks of
  `sparse_block_size` tokens are read (the always-kept local block is not added), and its indexer
  (assumed: a query projection per index head, one shared index key, per-head weights) scores all keys.
- DeepSeek V4: one K=V entry of `head_dim` (512) per cached token, like MLA's latent (kind "mla").
  Layers with compress ratio 0 attend a `sliding_window` (128) of raw tokens. Layers with ratio r
  keep one compressed entry per r tokens; ratio-4 layers read only `index_topk` of them, chosen by
  a lightning indexer whose 128-wide keys are compressed at the same ratio (so indexer elements
  and FLOPs are per cached entry). Approximation: the 128 most recent raw tokens that compressed
  layers also attend are left out (at most 128 extra entries read per layer per sequence).
"""
from __future__ import annotations

from tokensim.specs.model.hf_fields import Fields
from tokensim.specs.model.spec import Attention

# Families whose attention_bias covers q, k, v but not the output projection.
_QKV_BIAS_ONLY = ("qwen2", "qwen2_moe", "glm4_moe")
# Families whose attention always has per-head RMSNorms on q and k.
_QK_NORM_ALWAYS = ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
                   "gemma3_text", "gemma4_text")


def _qk_norm_params(f: Fields, model_type: str, n_heads: int, n_kv: int, head_dim: int) -> int:
    if model_type in _QK_NORM_ALWAYS:
        return 2 * head_dim
    if not f.bool("use_qk_norm"):
        return 0
    if model_type == "llama4_text":
        return 0                                        # L2 norm without weights
    if f.str("qk_norm_type") == "per_layer":            # MiniMax-M2: one norm over all heads
        return n_heads * head_dim + n_kv * head_dim
    return 2 * head_dim


def gqa(f: Fields, model_type: str, hidden: int, window: int | None = None, global_layer: bool = False,
        sparse: bool = False) -> Attention:
    """Grouped-query attention (MHA when n_kv == n_heads); `global_layer` picks Gemma 4's full-attention shape."""
    n_heads = f.int("num_attention_heads")
    head_dim = f.int_of("head_dim", "attention_head_dim", default=hidden // n_heads)
    n_kv = f.int("num_key_value_heads", default=n_heads)
    k_eq_v = False
    if global_layer:
        head_dim = f.int("global_head_dim", default=head_dim)
        n_kv = f.int("num_global_key_value_heads", default=n_kv)
        k_eq_v = f.bool("attention_k_eq_v")             # full layers reuse the key projection as value
    gated = f.bool("attn_output_gate", model_type == "qwen3_next") or f.bool("attention_output_gate")
    q, kv = n_heads * head_dim, n_kv * head_dim
    kv_mats = 1 if k_eq_v else 2
    params = hidden * q * (2 if gated else 1) + kv_mats * hidden * kv + q * hidden
    if f.bool("attention_bias"):
        params += q + kv_mats * kv + (0 if model_type in _QKV_BIAS_ONLY else hidden)
    params += _qk_norm_params(f, model_type, n_heads, n_kv, head_dim)
    if model_type == "gpt_oss":
        params += n_heads                               # attention sinks
    topk, idx_elems, idx_flops = None, 0, 0
    if sparse:
        params, topk, idx_elems, idx_flops = _minimax_sparse(f, hidden, params)
    return Attention("gqa", n_heads, n_kv, head_dim, head_dim, params, 2 * kv, 4 * n_heads * head_dim,
                     window=window, select_topk=topk, indexer_elems_per_token=idx_elems,
                     indexer_flops_per_pair=idx_flops)


def _minimax_sparse(f: Fields, hidden: int, params: int) -> tuple[int, int, int, int]:
    s = f.table("sparse_attention_config")
    heads, dim = s.int("sparse_num_index_heads"), s.int("sparse_index_dim")
    indexer = hidden * heads * dim + hidden * dim + hidden * heads
    topk = s.int("sparse_topk_blocks") * s.int("sparse_block_size")
    return params + indexer, topk, dim, 2 * heads * dim


def dsa_indexer_params(f: Fields, hidden: int, q_source: int) -> int:
    """DeepSeek V3.2 / GLM-5 lightning indexer: wq_b from the q latent, wk, LayerNorm on k, head weights."""
    heads, dim = f.int("index_n_heads"), f.int("index_head_dim")
    return q_source * heads * dim + hidden * dim + 2 * dim + hidden * heads


def mla(f: Fields, hidden: int, output_gate: bool = False) -> Attention:
    """DeepSeek multi-head latent attention; DSA indexer when the config has `index_topk`."""
    n_heads = f.int("num_attention_heads")
    nope, rope = f.int("qk_nope_head_dim"), f.int("qk_rope_head_dim")
    v_dim, kv_rank = f.int("v_head_dim"), f.int("kv_lora_rank")
    q_rank = f.int("q_lora_rank", default=0, minimum=0)
    qk = nope + rope
    q_params = hidden * q_rank + q_rank + q_rank * n_heads * qk if q_rank else hidden * n_heads * qk
    kv_params = hidden * (kv_rank + rope) + kv_rank + kv_rank * n_heads * (nope + v_dim)
    params = q_params + kv_params + n_heads * v_dim * hidden
    if output_gate:
        params += hidden * n_heads * v_dim
    topk, idx_elems, idx_flops = None, 0, 0
    if f.has("index_topk"):
        params += dsa_indexer_params(f, hidden, q_rank or hidden)
        topk, idx_elems = f.int("index_topk"), f.int("index_head_dim")
        idx_flops = 2 * f.int("index_n_heads") * idx_elems
    return Attention("mla", n_heads, 1, qk, v_dim, params, kv_rank + rope, 2 * n_heads * (2 * kv_rank + rope),
                     select_topk=topk, indexer_elems_per_token=idx_elems, indexer_flops_per_pair=idx_flops)


def _v4_compressor(hidden: int, head_dim: int, ratio: int) -> int:
    """Gated pooling of `ratio` tokens: kv and gate projections, position bias, RMSNorm; ratio 4 overlaps windows."""
    out = head_dim * (2 if ratio == 4 else 1)
    return 2 * hidden * out + ratio * out + head_dim


def deepseek_v4(f: Fields, hidden: int, ratio: int) -> Attention:
    """DeepSeek V4 attention with compress ratio `ratio` (0: sliding window only)."""
    n_heads, head_dim = f.int("num_attention_heads"), f.int("head_dim")
    q_rank, o_rank, groups = f.int("q_lora_rank"), f.int("o_lora_rank"), f.int("o_groups")
    params = (hidden * q_rank + q_rank + q_rank * n_heads * head_dim    # wq_a, q_norm, wq_b
              + hidden * head_dim + head_dim + n_heads                  # wkv, kv_norm, attention sinks
              + n_heads * head_dim * o_rank + groups * o_rank * hidden)  # grouped wo_a, wo_b
    window, topk, idx_elems, idx_flops = None, None, 0, 0
    if ratio == 0:
        window = f.int("sliding_window")
    else:
        params += _v4_compressor(hidden, head_dim, ratio)
        if ratio == 4:
            idx_heads, idx_dim = f.int("index_n_heads"), f.int("index_head_dim")
            params += q_rank * idx_heads * idx_dim + hidden * idx_heads + _v4_compressor(hidden, idx_dim, ratio)
            topk, idx_elems, idx_flops = f.int("index_topk"), idx_dim, 2 * idx_heads * idx_dim
    return Attention("mla", n_heads, 1, head_dim, head_dim, params, head_dim, 4 * n_heads * head_dim,
                     window=window, select_topk=topk, indexer_elems_per_token=idx_elems,
                     indexer_flops_per_pair=idx_flops, compress_ratio=max(ratio, 1))


def v4_hyper_connection_params(f: Fields, hidden: int) -> int:
    """One manifold-constrained hyper-connection: a (2+m)*m mixing map from the m*hidden streams, its bias, 3 scales."""
    m = f.int("hc_mult", default=1)
    mix = (2 + m) * m
    return mix * m * hidden + mix + 3 if m > 1 else 0
