"""Memory per chip: weights by stage, KV cache and linear-attention state per sequence, and what fits."""
from __future__ import annotations

import math
from dataclasses import dataclass

from tokensim.perf.context import INDEXER, Context
from tokensim.perf.layers import expected_experts_touched, kv_shard
from tokensim.perf.step import layer_groups
from tokensim.specs.model.spec import Attention, DenseFFN, LinearMixer, MoE


@dataclass(frozen=True)
class MemoryUse:
    weights_per_chip_bytes: float     # the fullest stage
    kv_per_seq_per_chip_bytes: float  # one sequence at full context, in that stage
    seqs_per_chip: int
    capacity_per_chip_bytes: float    # usable: tier capacity x usable fraction
    stage: int = 0                    # the fullest pipeline stage

    @property
    def kv_per_chip_bytes(self) -> float:
        return self.kv_per_seq_per_chip_bytes * self.seqs_per_chip

    @property
    def per_chip_bytes(self) -> float:
        return self.weights_per_chip_bytes + self.kv_per_chip_bytes

    @property
    def fits(self) -> bool:
        return self.per_chip_bytes <= self.capacity_per_chip_bytes


def stage_memory(ctx: Context, context_tokens: float, head: bool = True) -> list[tuple[float, float]]:
    """(weight bytes per chip, KV bytes per sequence per chip) for every pipeline stage.
    `head`: embedding on the first stage and LM head on the last (False for an FFN-only pool)."""
    dep, model, r = ctx.dep, ctx.model, ctx.rates
    out = []
    groups = layer_groups(ctx)
    for index, group in enumerate(groups):
        w = kv = 0.0
        for layer, n in group.items():
            lw, lkv = layer.norm_params * r["attention"].bytes_per_weight, 0.0
            mix, ffn = layer.mixer, layer.ffn
            if mix is not None:
                lw += mix.params / dep.tp * r["attention"].bytes_per_weight
            if isinstance(mix, Attention):
                entry = (mix.kv_elems_per_token * ctx.kv_bytes_per_elem / kv_shard(mix, dep.tp)
                         + mix.indexer_elems_per_token * ctx.index_bytes_per_elem)
                lkv += mix.cached_entries(context_tokens) * entry
            elif isinstance(mix, LinearMixer):
                lkv += mix.state_elems * ctx.state_bytes_per_elem / dep.tp
            if isinstance(ffn, DenseFFN):
                lw += ffn.params / dep.tp * r["dense_ffn"].bytes_per_weight
            elif isinstance(ffn, MoE):
                lw += (ffn.shared_params + ffn.router_params + ffn.latent_params) / dep.tp * r["shared_experts"].bytes_per_weight
                lw += ((ffn.n_experts + dep.redundant_experts) / dep.ep * ffn.expert_params / dep.moe_tp
                       * r["routed_experts"].bytes_per_weight)
            w += lw * n
            kv += lkv * n
        if head and index == 0:
            w += model.embed_params / dep.tp * r["embedding"].bytes_per_weight
        if head and index == len(groups) - 1 and (model.lm_head_params or dep.pp > 1):
            w += model.lm_head_matmul_params / dep.tp * r["lm_head"].bytes_per_weight
        out.append((w, kv))
    return out


def memory_use(ctx: Context, batch: int, context_tokens: float, head: bool = True) -> MemoryUse:
    stages = stage_memory(ctx, context_tokens, head)
    seqs = math.ceil(batch / (ctx.dep.dp * ctx.dep.attn_dp))
    index = max(range(len(stages)), key=lambda i: stages[i][0] + stages[i][1] * seqs)
    weights, kv = stages[index]
    capacity = ctx.k.usable_memory_fraction * ctx.hw.capacity_bytes
    return MemoryUse(weights, kv, seqs, capacity, index)


def max_batch(ctx: Context, context_tokens: float) -> int:
    """Largest batch (over the deployment) whose weights and KV fit every chip; 0 if the weights alone do not."""
    capacity = ctx.k.usable_memory_fraction * ctx.hw.capacity_bytes
    best = math.inf
    for weights, kv in stage_memory(ctx, context_tokens):
        if weights > capacity:
            return 0
        if kv > 0:
            best = min(best, (capacity - weights) / kv)
    if best == math.inf:
        return 10**9
    return int(best) * ctx.dep.dp * ctx.dep.attn_dp


def kv_bytes_per_token(model, kv_precision: str = "bf16") -> float:
    """KV-cache bytes one token adds over all layers of an unsharded model (full-context attention layers;
    sliding-window and linear layers stop growing once their window or state is full, so they are left out)."""
    from tokensim.specs.precision import get_precision

    width = get_precision(kv_precision).bytes_per_element
    index_width = min(get_precision(INDEXER).bytes_per_element, width)      # as Context.index_bytes_per_elem
    total = 0.0
    for layer in model.layers:
        att = layer.mixer
        if isinstance(att, Attention) and att.window is None:
            total += (att.kv_elems_per_token * width + att.indexer_elems_per_token * index_width) / att.compress_ratio
    return total


def bytes_per_token(ctx: Context, batch: int, context_tokens: float, tokens_per_step: float = 1.0,
                    verified_per_step: float | None = None) -> float:
    """Bytes read from memory per generated token over the whole deployment: every active attention
    rank reads its copy of the dense weights, routed experts are read once per distinct expert touched
    (E (1 - (1 - k/E)^T) per layer for T tokens: under speculative decoding every verified token, draft or
    not, is routed, `verified_per_step` of them per sequence), every sequence reads its KV cache; the total is
    shared by the `tokens_per_step` tokens each sequence keeps."""
    verified = tokens_per_step if verified_per_step is None else verified_per_step
    dep, model, r = ctx.dep, ctx.model, ctx.rates
    active_ranks = min(dep.attn_dp, batch) * dep.dp
    dense = expert = kv = 0.0
    for layer in model.layers:
        mix, ffn = layer.mixer, layer.ffn
        if mix is not None:
            dense += mix.params * r["attention"].bytes_per_weight
        if isinstance(mix, Attention):
            kv += mix.read_entries(context_tokens) * mix.kv_elems_per_token * ctx.kv_bytes_per_elem
            kv += mix.cached_entries(context_tokens) * mix.indexer_elems_per_token * ctx.index_bytes_per_elem
        elif isinstance(mix, LinearMixer):
            kv += 2 * mix.state_elems * ctx.state_bytes_per_elem
        if isinstance(ffn, DenseFFN):
            dense += ffn.params * r["dense_ffn"].bytes_per_weight
        elif isinstance(ffn, MoE):
            dense += (ffn.shared_params + ffn.router_params + ffn.latent_params) * r["shared_experts"].bytes_per_weight
            touched = expected_experts_touched(ffn.n_experts, ffn.top_k, batch * verified / dep.dp, ctx.k.expert_load_cv)
            expert += touched * ffn.expert_params * r["routed_experts"].bytes_per_weight * dep.dp
    dense += model.lm_head_matmul_params * r["lm_head"].bytes_per_weight
    return (dense * active_ranks + expert + kv * batch) / (batch * tokens_per_step)
