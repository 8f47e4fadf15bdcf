"""A language model as an ordered list of layers, each a token mixer and a feed-forward block.

Every count is a number of parameters or elements; bytes come only when a precision is applied
(see tokensim.specs.precision). Specs are frozen and checked when built.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from tokensim.errors import require


@dataclass(frozen=True)
class Attention:
    """Softmax attention: its KV cache grows with the context it attends to."""

    kind: str                       # "gqa" (MHA and MQA included) or "mla"
    n_heads: int                    # query heads
    n_kv_heads: int                 # K/V heads that are cached (MLA: 1, the shared latent)
    head_dim: int                   # query/key width per head (MLA: nope + rope)
    v_head_dim: int
    params: int                     # every weight of the block: projections, biases, q/k norms, sinks, gates
    kv_elems_per_token: int         # cached elements per token (GQA 2*n_kv*head_dim; MLA kv_lora_rank + rope dim)
    score_flops_per_pair: int       # FLOPs per (query token, attended token): GQA 4*n_h*d; MLA absorbed 2*n_h*(2*d_c+d_r)
    window: int | None = None       # sliding window in tokens; None attends to the whole context
    select_topk: int | None = None  # sparse attention (DeepSeek DSA): cached entries the core attention reads
    indexer_elems_per_token: int = 0  # DSA indexer key elements cached per token; read for every cached entry
    indexer_flops_per_pair: int = 0   # indexer FLOPs per (query, cached entry): 2*H_I*d_I
    compress_ratio: int = 1         # compressed KV (DeepSeek V4): one cache entry per `compress_ratio` tokens

    def __post_init__(self) -> None:
        require(self.kind in ("gqa", "mla"), "attention.kind", self.kind, '"gqa" or "mla"')
        for name in ("n_heads", "n_kv_heads", "head_dim", "params", "kv_elems_per_token", "compress_ratio"):
            require(getattr(self, name) > 0, f"attention.{name}", getattr(self, name), "a positive integer")
        require(self.window is None or self.window > 0, "attention.window", self.window, "a positive number of tokens or none")

    def cached_entries(self, context_tokens: float) -> float:
        """Cache entries held for one sequence of `context_tokens` tokens."""
        entries = context_tokens / self.compress_ratio
        return min(entries, self.window) if self.window else entries

    def read_entries(self, context_tokens: float) -> float:
        """Cache entries the core attention reads for one new query token."""
        entries = self.cached_entries(context_tokens)
        return min(entries, self.select_topk) if self.select_topk else entries


@dataclass(frozen=True)
class LinearMixer:
    """Linear attention or a state-space layer: a per-sequence state that does not grow with context."""

    kind: str              # "gated_deltanet", "kda", "mamba2", "mamba"
    params: int
    state_elems: int       # recurrent state plus convolution state, per sequence
    flops_per_token: int   # state update and read-out per token, projections excluded

    def __post_init__(self) -> None:
        require(self.params > 0, "linear_mixer.params", self.params, "a positive integer")
        require(self.state_elems > 0, "linear_mixer.state_elems", self.state_elems, "a positive integer")


@dataclass(frozen=True)
class DenseFFN:
    params: int

    def __post_init__(self) -> None:
        require(self.params > 0, "ffn.params", self.params, "a positive integer")


@dataclass(frozen=True)
class MoE:
    """Routed experts (top_k of n_experts per token), plus always-active shared experts and router."""

    n_experts: int
    top_k: int
    expert_params: int       # one routed expert
    shared_params: int = 0   # all shared experts together
    router_params: int = 0   # gate weights and bias
    latent_params: int = 0   # latent MoE: projections into and out of the experts' width, always active
    routing_groups: int = 1  # group-limited routing: experts in this many groups, a token's chosen among a few of them

    def __post_init__(self) -> None:
        require(self.n_experts > 0, "moe.n_experts", self.n_experts, "a positive integer")
        require(0 < self.top_k <= self.n_experts, "moe.top_k", self.top_k, f"between 1 and n_experts ({self.n_experts})")
        require(self.expert_params > 0, "moe.expert_params", self.expert_params, "a positive integer")
        require(0 < self.routing_groups <= self.n_experts, "moe.routing_groups", self.routing_groups,
                f"between 1 and n_experts ({self.n_experts})")

    @property
    def params(self) -> int:
        return self.n_experts * self.expert_params + self.shared_params + self.router_params + self.latent_params

    @property
    def active_params(self) -> int:
        return self.top_k * self.expert_params + self.shared_params + self.router_params + self.latent_params


Mixer = Attention | LinearMixer
FFN = DenseFFN | MoE


@dataclass(frozen=True)
class Layer:
    mixer: Mixer | None
    ffn: FFN | None
    norm_params: int = 0

    @property
    def params(self) -> int:
        return (self.mixer.params if self.mixer else 0) + (self.ffn.params if self.ffn else 0) + self.norm_params

    @property
    def active_params(self) -> int:
        ffn = self.ffn.active_params if isinstance(self.ffn, MoE) else (self.ffn.params if self.ffn else 0)
        return (self.mixer.params if self.mixer else 0) + ffn + self.norm_params


@dataclass(frozen=True)
class WeightPrecisions:
    """Stored precision of each weight group, by name in tokensim.specs.precision.PRECISIONS."""

    attention: str = "bf16"        # token mixers: attention and linear-attention/SSM projections
    dense_ffn: str = "bf16"
    shared_experts: str = "bf16"   # shared experts, router and latent projections
    routed_experts: str = "bf16"
    embedding: str = "bf16"
    lm_head: str = "bf16"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hidden_size: int
    vocab_size: int
    layers: tuple[Layer, ...]
    embed_params: int
    lm_head_params: int                # 0 when tied to the embedding (the LM head matmul still runs)
    final_norm_params: int = 0
    mtp_params: int = 0                # multi-token-prediction modules, reported apart from the total
    vision_params: int = 0             # vision tower, reported apart from the total
    weights: WeightPrecisions = field(default_factory=WeightPrecisions)
    source: str = ""
    max_context_tokens: int | None = None  # max_position_embeddings of the config, where it gives one

    def __post_init__(self) -> None:
        require(self.hidden_size > 0, "hidden_size", self.hidden_size, "a positive integer")
        require(self.vocab_size > 0, "vocab_size", self.vocab_size, "a positive integer")
        require(len(self.layers) > 0, "num_hidden_layers", len(self.layers), "at least one layer")

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @cached_property
    def layer_kinds(self) -> tuple[tuple[Layer, ...], tuple[int, ...]]:
        """(the distinct layers, each layer's index among them): lets cost code group equal layers cheaply."""
        distinct: dict[Layer, int] = {}
        index = tuple(distinct.setdefault(layer, len(distinct)) for layer in self.layers)
        return tuple(distinct), index

    @property
    def total_params(self) -> int:
        """Language model without MTP modules and vision tower."""
        return self.embed_params + self.lm_head_params + self.final_norm_params + sum(layer.params for layer in self.layers)

    @property
    def active_params(self) -> int:
        """Weights used per token, without the input embedding table (DeepSeek's and OpenAI's convention)."""
        return self.lm_head_params + self.final_norm_params + sum(layer.active_params for layer in self.layers)

    @property
    def lm_head_matmul_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def is_moe(self) -> bool:
        return any(isinstance(layer.ffn, MoE) for layer in self.layers)
