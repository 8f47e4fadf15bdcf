"""Linear-attention and state-space mixers: a per-sequence state that does not grow with context.

`state_elems` is the recurrent state plus the short-convolution state (kernel - 1 past inputs per
channel). `flops_per_token` is an estimate: about 4 FLOPs per recurrent-state element (decay,
rank-1 update, read-out) plus 2 per convolution tap; the projections are counted as weights.
"""
from __future__ import annotations

from tokensim.specs.model.hf_fields import Fields
from tokensim.specs.model.spec import LinearMixer


def _mixer(kind: str, params: int, state: int, conv_channels: int, kernel: int) -> LinearMixer:
    return LinearMixer(kind, params, state + conv_channels * (kernel - 1), 4 * state + 2 * conv_channels * kernel)


def gated_deltanet(f: Fields, hidden: int) -> LinearMixer:
    """Qwen3-Next / Qwen3.5 Gated DeltaNet: q/k/v/z and a/b projections, depthwise conv, gated norm, out."""
    nk, dk = f.int("linear_num_key_heads"), f.int("linear_key_head_dim")
    nv, dv = f.int("linear_num_value_heads"), f.int("linear_value_head_dim")
    kernel = f.int("linear_conv_kernel_dim")
    keys, values = nk * dk, nv * dv
    conv = 2 * keys + values
    params = (hidden * (2 * keys + 2 * values) + hidden * 2 * nv   # in_proj_qkvz, in_proj_ba
              + conv * kernel + 2 * nv + dv                         # conv1d, dt_bias + A_log, gated RMSNorm
              + values * hidden)                                    # out_proj
    return _mixer("gated_deltanet", params, nv * dk * dv, conv, kernel)


def kimi_delta(f: Fields, hidden: int) -> LinearMixer:
    """Kimi Delta Attention (`linear_attn_config`): q/k/v with short convs, low-rank decay gate, beta, output gate."""
    c = f.table("linear_attn_config")
    heads, d, kernel = c.int("num_heads"), c.int("head_dim"), c.int("short_conv_kernel_size")
    inner = heads * d
    out_gate = hidden * inner if c.bool("use_full_rank_gate") else hidden * d + d * inner
    params = (3 * hidden * inner + 3 * inner * kernel       # q/k/v projections and their convs
              + hidden * d + d * inner + inner + heads      # f_a/f_b decay gate, dt_bias, A_log
              + hidden * heads + out_gate + d               # b_proj (beta), output gate, o_norm
              + inner * hidden)                             # o_proj
    return _mixer("kda", params, heads * d * d, 3 * inner, kernel)


def mamba2(f: Fields, hidden: int) -> LinearMixer:
    """Mamba-2 mixer (Nemotron-H): in_proj to x, z, B, C, dt; conv over x/B/C; gated norm; out_proj."""
    heads, head_dim = f.int("mamba_num_heads"), f.int("mamba_head_dim")
    groups, state, kernel = f.int("n_groups"), f.int("ssm_state_size"), f.int("conv_kernel")
    inner = heads * head_dim
    conv = inner + 2 * groups * state
    in_out = 2 * inner + 2 * groups * state + heads
    params = hidden * in_out + conv * kernel + 3 * heads + inner + inner * hidden
    if f.bool("use_conv_bias", True):
        params += conv
    if f.bool("mamba_proj_bias"):
        params += in_out + hidden
    return _mixer("mamba2", params, heads * head_dim * state, conv, kernel)


def mamba1(f: Fields, hidden: int) -> LinearMixer:
    """Mamba-1 mixer (Jamba): in_proj, conv, x_proj to dt/B/C, dt_proj, A, D, out_proj, Jamba's dt/B/C norms."""
    inner = f.int("mamba_expand") * hidden
    state, kernel = f.int("mamba_d_state"), f.int("mamba_d_conv")
    rank = f.int("mamba_dt_rank", default=-(-hidden // 16))
    params = (hidden * 2 * inner + inner * kernel + inner * (rank + 2 * state) + rank * inner + inner
              + inner * state + inner + inner * hidden + rank + 2 * state)
    if f.bool("mamba_conv_bias", True):
        params += inner
    if f.bool("mamba_proj_bias"):
        params += 2 * inner + hidden
    return _mixer("mamba", params, inner * state, inner, kernel)
