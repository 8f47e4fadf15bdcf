"""Feed-forward blocks from a config: dense MLPs and mixtures of experts.

A gated MLP (SwiGLU, GeGLU, SiTU) has three matrices, a plain one (relu2, GELU) two. Each family
names its widths differently; `moe` reads them all:
- routed expert width: `moe_intermediate_size`, else `intermediate_size` (Mixtral, gpt-oss, MiniMax-M2);
- expert input width: `routed_expert_hidden_size` (Kimi K3) or `moe_latent_size` (Nemotron 3), with
  projections into and out of that latent width (`latent_params`); otherwise hidden_size;
- shared experts: DeepSeek-style `n_shared_experts` x (`shared_intermediate_size` or the expert
  width), Qwen's `shared_expert_intermediate_size` (+ its sigmoid gate), Nemotron's
  `moe_shared_expert_intermediate_size`, Llama 4's always-on expert, Gemma 4's parallel dense MLP;
- router: hidden x n_experts, plus the expert-bias vector where the family routes with one.
"""
from __future__ import annotations

from tokensim.specs.model.hf_fields import Fields
from tokensim.specs.model.spec import DenseFFN, MoE

_PLAIN_ACTIVATIONS = ("relu2", "relu", "gelu", "gelu_new", "gelu_pytorch_tanh")
_ROUTER_BIAS = ("deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "glm_moe_dsa", "deepseek_v4",
                "kimi_linear", "nemotron_h", "gpt_oss")


def is_gated(f: Fields, model_type: str) -> bool:
    if model_type.startswith("gemma"):
        return True                                  # Gemma's GELU MLP is gated (GeGLU)
    act = f.str("mlp_hidden_act") or f.str("hidden_act") or f.str("hidden_activation") or "silu"
    return act not in _PLAIN_ACTIVATIONS


def mlp_params(hidden: int, width: int, gated: bool) -> int:
    return (3 if gated else 2) * hidden * width


def dense_width(f: Fields) -> int:
    return f.int_of("dense_intermediate_size", "intermediate_size_mlp", "intermediate_size")


def dense(f: Fields, model_type: str, hidden: int) -> DenseFFN:
    return DenseFFN(mlp_params(hidden, dense_width(f), is_gated(f, model_type)))


def n_experts(f: Fields) -> int:
    """Routed experts per MoE layer; 0 for a dense model."""
    return f.int_of("n_routed_experts", "num_local_experts", "num_experts", default=0, minimum=0)


def _shared_params(f: Fields, model_type: str, hidden: int, width: int, gated: bool) -> int:
    if model_type == "llama4_text":
        return mlp_params(hidden, width, gated)
    if model_type == "gemma4_text":
        return mlp_params(hidden, f.int("intermediate_size"), gated)
    if f.has("shared_expert_intermediate_size"):                     # Qwen: one shared expert + gate
        return mlp_params(hidden, f.int("shared_expert_intermediate_size", minimum=0), gated) + hidden
    count = f.int_of("n_shared_experts", "num_shared_experts", default=0, minimum=0)
    if f.has("moe_shared_expert_intermediate_size"):                  # Nemotron 3
        return count * mlp_params(hidden, f.int("moe_shared_expert_intermediate_size"), gated)
    shared_width = f.int("shared_intermediate_size", default=width, minimum=0)
    return count * mlp_params(hidden, shared_width, gated)


def _router_params(f: Fields, model_type: str, hidden: int, experts: int, hashed: bool) -> int:
    params = hidden * experts
    if model_type == "gemma4_text":
        return params + hidden + experts                             # input scale, per-expert scale
    biased = model_type in _ROUTER_BIAS or f.bool("use_routing_bias") or f.str("topk_method") == "noaux_tc"
    return params + (experts if biased and not hashed else 0)


def moe(f: Fields, model_type: str, hidden: int, hashed: bool = False) -> MoE:
    """One MoE block; `hashed` marks DeepSeek V4's hash-routed layers (no expert-bias vector)."""
    experts = n_experts(f)
    top_k = f.int_of("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "top_k_experts")
    width = f.int_of("moe_intermediate_size", "intermediate_size")
    gated = is_gated(f, model_type)
    latent = f.int_of("routed_expert_hidden_size", "moe_latent_size", default=hidden)
    expert = mlp_params(latent, width, gated)
    if model_type == "gpt_oss":
        expert += 2 * width + hidden                                 # gate_up and down biases
    latent_params = 0
    if latent != hidden:
        latent_params = 2 * hidden * latent + (latent if f.bool("latent_moe_use_norm") else 0)
    return MoE(experts, top_k, expert, _shared_params(f, model_type, hidden, width, gated),
               _router_params(f, model_type, hidden, experts, hashed), latent_params, routing_groups(f, experts))


def routing_groups(f: Fields, experts: int) -> int:
    """Groups of group-limited routing (DeepSeek-V3: n_group 8, topk_group 4: a token's experts come from 4 of 8
    groups of 32); 1 where a token may pick any expert (no n_group, or topk_group = n_group)."""
    groups = f.int("n_group", default=1, minimum=1)
    chosen = f.int("topk_group", default=groups, minimum=1)
    return groups if 1 < groups <= experts and chosen < groups else 1


def moe_flags(f: Fields, n_layers: int) -> list[bool]:
    """Which layers carry experts, for families that interleave dense and MoE layers."""
    if n_experts(f) == 0:
        return [False] * n_layers
    freq = f.get("moe_layer_freq", 1)
    if isinstance(freq, list):                                       # MiniMax-M3: one flag per layer
        flags = f.list_of("moe_layer_freq", length=n_layers)
        return [bool(x) for x in flags[:n_layers]]
    freq = f.int("moe_layer_freq", default=1)
    first_dense = f.int("first_k_dense_replace", default=0, minimum=0)
    step = f.int_of("interleave_moe_layer_step", "decoder_sparse_step", default=1)
    mlp_only = set(f.list("mlp_only_layers") or ())
    if f.has("expert_layer_period"):                                 # Jamba
        period, offset = f.int("expert_layer_period"), f.int("expert_layer_offset", default=0, minimum=0)
        return [i % period == offset for i in range(n_layers)]
    return [i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in mlp_only
            for i in range(n_layers)]
