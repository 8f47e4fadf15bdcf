"""The ops of one layer for one engine step on one chip: pure functions of (context, layer, batch).

A step's batch mixes decode sequences (each reads the weights the step touches and its own KV cache) and
prefill chunks (each writes KV for its new tokens, and reads what earlier chunks cached). Formulas follow
docs/model.md sections 1-2.

The same functions evaluate one deployment (Python numbers) or many at once: the planner passes numpy
arrays for the parallel degrees, batch and precisions, and ops that exist only for some of them (a TP
all-reduce where tp > 1) are gated by a 0/1 mask instead of an `if`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np

from tokensim.perf.context import KV_CORE, Context
from tokensim.perf.ops import Num, OpCost, any_true, is_scalar
from tokensim.specs.model.spec import Attention, DenseFFN, Layer, LinearMixer, MoE


@dataclass(frozen=True)
class Batch:
    """What one step processes on one attention rank: decode sequences and prefill chunks. Every field is a
    number, or a numpy array over candidate deployments (the planner)."""

    decode_seqs: Num = 0.0             # sequences decoding this step
    query_per_decode: Num = 1.0        # query tokens per decoding sequence: 1, or k + 1 to verify k drafts
    decode_context: Num = 0.0          # tokens in each decoding sequence's cache (their mean)
    prefill_seqs: Num = 0.0            # prompts (or chunks of prompts) being prefilled this step
    prefill_tokens: Num = 0.0          # new tokens of each
    prefill_cached: Num = 0.0          # tokens of its request already cached before this chunk (earlier chunks, prefix hits)
    prefill_position: Num | None = None   # mean tokens a prefill query attends to; default cached + new / 2
    moe_tokens: Num | None = None      # tokens entering each MoE layer of a replica's stage; default tokens x attn_dp

    # Derived once per batch (a step's ops ask for them a few hundred times); cached_property writes the instance's
    # __dict__, which a frozen dataclass allows, and leaves the fields (equality, replace) alone.
    @cached_property
    def decode_tokens(self):
        return self.decode_seqs * self.query_per_decode

    @cached_property
    def new_prefill_tokens(self):
        return self.prefill_seqs * self.prefill_tokens

    @cached_property
    def tokens(self):
        return self.decode_tokens + self.new_prefill_tokens

    @cached_property
    def prefill_share(self):
        """Share of the batch's new tokens that are prompt tokens (0 for pure decode, 1 for pure prefill)."""
        tokens = self.tokens
        if is_scalar(tokens):
            return float(self.new_prefill_tokens / tokens) if tokens else 0.0
        return np.divide(self.new_prefill_tokens, tokens, out=np.zeros(np.shape(tokens)), where=np.asarray(tokens) > 0)

    @property
    def seqs(self):
        return self.decode_seqs + self.prefill_seqs

    @property
    def position(self):
        if self.prefill_position is not None:
            return self.prefill_position
        return self.prefill_cached + self.prefill_tokens / 2.0

    def moe_tokens_for(self, attn_dp):
        return self.tokens * attn_dp if self.moe_tokens is None else self.moe_tokens

    @staticmethod
    def decode(seqs, context, query_per_seq=1.0, moe_tokens=None) -> Batch:
        return Batch(decode_seqs=seqs, query_per_decode=query_per_seq, decode_context=context, moe_tokens=moe_tokens)

    @staticmethod
    def prefill(seqs, tokens, position=None, moe_tokens=None, cached=0.0) -> Batch:
        return Batch(prefill_seqs=seqs, prefill_tokens=tokens, prefill_cached=cached, prefill_position=position,
                     moe_tokens=moe_tokens)

    @staticmethod
    def on_busiest_rank(ranks, decode_seqs, prefill_seqs=0.0, *, query_per_decode=1.0, decode_context=0.0,
                        prefill_tokens=0.0, prefill_cached=0.0, prefill_position=None) -> Batch:
        """The batch of the busiest of `ranks` attention-DP ranks when a replica's step holds `decode_seqs`
        sequences and `prefill_seqs` prompt chunks between them (totals over the ranks). Each rank runs its own
        sequences' attention and dense layers and every rank waits for the slowest at each MoE layer, which takes
        all the replica's tokens (moe_tokens). Spread evenly (busiest_rank_share), but a prompt is prefilled whole
        on one rank: one 8k prompt on a replica of 8 ranks costs its rank a full prefill, not an eighth of one."""
        tokens = decode_seqs * query_per_decode + prefill_seqs * prefill_tokens
        return Batch(decode_seqs=busiest_rank_share(decode_seqs, ranks), query_per_decode=query_per_decode,
                     decode_context=decode_context, prefill_seqs=busiest_rank_share(prefill_seqs, ranks),
                     prefill_tokens=prefill_tokens, prefill_cached=prefill_cached, prefill_position=prefill_position,
                     moe_tokens=tokens)


def busiest_rank_share(total, ranks):
    """Items (sequences, prompt chunks) on the busiest of `ranks` ranks that hold `total` between them: the even
    share total / ranks, but a whole item wherever there is one (a rank holds whole requests; engines hand each
    new request to one rank: SGLang's round robin, vLLM's least-loaded engine core, TensorRT-LLM's attention-DP
    balancing). Deployment.seqs_per_rank rounds a static batch up the same way."""
    if is_scalar(total) and is_scalar(ranks):
        return max(total / ranks, min(total, 1.0))
    total = np.asarray(total, dtype=float)
    return np.maximum(total / ranks, np.minimum(total, 1.0))


# Kernel launches per op in a decode step, counted from vLLM/SGLang model code (a structural count, not
# fitted): GQA projections = fused QKV GEMM, rotary, output GEMM, RMSNorm; MLA adds the low-rank q/kv
# GEMMs and their norms; a gated FFN = norm, gate_up GEMM, activation, down GEMM; routed experts = router
# GEMM, top-k, permute, two grouped GEMMs, activation, un-permute (so a router without shared experts launches
# nothing of its own: "moe.router" = 0); each collective is one kernel. A DSA sparse-attention core (DeepSeek
# V3.2/V4, GLM-5) adds its lightning indexer's 12 before the sparse attention kernel: the wq_b and wk GEMMs,
# the k LayerNorm, rotary, the q and k concatenations, q's fp8 quantization, the weights_proj GEMM and its
# scaling, the k quantize-and-cache write, the fp8 MQA logits and the top-k (vLLM's Indexer.forward and
# sparse_attn_indexer, vllm/model_executor/models/deepseek_v2.py).
KERNELS = {"attn.proj": 4, "attn.proj.mla": 8, "attn.core": 1, "attn.core.dsa": 13, "linear.proj": 4, "linear.state": 3,
           "ffn": 4, "moe.shared": 4, "moe.router": 0, "moe.experts": 7, "tp.allreduce": 1, "ep.dispatch": 1, "ep.combine": 1,
           "dp.gather": 1, "dp.scatter": 1,
           "lm_head": 2, "pp.hop": 1}


# The ops whose count holds an RMSNorm that a fused all-reduce takes over (fusion "allreduce_norm"): the input norm
# of attention or a linear mixer (after the previous layer's FFN all-reduce) and the post-attention norm counted with a
# dense FFN or a shared-expert block (after the mixer's all-reduce). Routed experts alone count no norm.
NORM_LED = ("attn.proj", "attn.proj.mla", "linear.proj", "ffn", "moe.shared")
MOE_GEMM1_FUSED = 2      # the permute and the gated activation, taken into GEMM 1 (fusion "moe_gemm1")


def launch_count(ctx: Context, kernel_key: str):
    """Kernel launches of an op in a decode step: KERNELS' count, less what the step's fusions take away."""
    n = KERNELS.get(kernel_key, 1)
    if "allreduce_norm" in ctx.fusions and kernel_key in NORM_LED:
        n = n - (ctx.dep.tp > 1)          # only where an all-reduce runs (an array of tp: element by element)
    if "moe_gemm1" in ctx.fusions and kernel_key == "moe.experts":
        n -= MOE_GEMM1_FUSED
    return n


def launch_s(ctx: Context, kernel_key: str):
    return launch_count(ctx, kernel_key) * ctx.k.kernel_gap_s


def needed(mask) -> bool:
    """Whether an optional op is needed at all: a Python bool, or any element of a mask array."""
    return any_true(mask)


def gated(op: OpCost, mask) -> OpCost:
    """The op where `mask` holds, nothing elsewhere (identity for a scalar True)."""
    if is_scalar(mask):
        return op
    m = np.asarray(mask, dtype=float)
    return OpCost(op.name, op.bytes * m, op.flops * m, op.comm_bytes * m, op.link, op.t_memory_s * m,
                  op.t_compute_s * m, op.t_comm_s * m, op.t_fixed_s * m)


def gemm_efficiency(ctx: Context, rows: float | None, inner=None) -> float:
    """Share of the achieved GEMM rate a GEMM of this shape reaches (docs/model.md 1.3): rows / (rows + gemm_half_rows)
    for its token rows, times the inner-dimension fill of `inner` (`inner_efficiency`). None: not a GEMM (attention).

    Tensor-core GEMMs need a deep M to fill their tiles; cuBLAS/CUTLASS efficiency curves reach half
    their large-M rate near M = 64-128 (constants.toml, gemm_half_rows)."""
    if rows is None:
        return 1.0
    fill = rows / (rows + ctx.k.gemm_half_rows)
    return fill if inner is None else fill * inner_efficiency(ctx, inner)


def inner_efficiency(ctx: Context, parts) -> Num:
    """Rate share of an op made of GEMMs with inner (reduction) dimensions K_i per chip, taking shares s_i of its
    FLOPs: 1 / sum(s_i / f(K_i)), f(K) = K / (K + gemm_half_inner): a short K loop spends as long loading its
    first blocks and writing its output tile as computing."""
    half = ctx.k.gemm_half_inner
    if not half:
        return 1.0
    return 1.0 / sum(share * (inner + half) / inner for share, inner in parts)


def compute_op(ctx: Context, name: str, nbytes, flops, group: str, kernel_key: str | None = None,
               rows=None, prefill_share=0.0, bytes_per_s=None, prefill_rate_ratio=1.0, inner=None,
               scale=1.0) -> OpCost:
    """An op reading `nbytes` and computing `flops`; `prefill_share` of the FLOPs belong to prompt tokens and run at
    the prefill rate (times `prefill_rate_ratio`), the rest at the decode rate; `rows` (token rows of a GEMM) and
    `inner` ((FLOP share, inner dimension) of each of its GEMMs) set its tile efficiency; `scale` multiplies the
    rate (grouped expert GEMMs)."""
    rate = ctx.rates[group]
    s_per_flop = rate.s_per_flop + (rate.s_per_flop_prefill / prefill_rate_ratio - rate.s_per_flop) * prefill_share
    bw = ctx.bytes_per_s if bytes_per_s is None else bytes_per_s
    eff = gemm_efficiency(ctx, rows, inner) * scale
    if is_scalar(eff) and is_scalar(flops):
        t_compute = flops * s_per_flop / eff if flops else 0.0         # no tokens, no work (and no 0 / 0)
    else:
        t_compute = np.divide(flops * s_per_flop, eff, out=np.zeros(np.broadcast_shapes(np.shape(flops), np.shape(eff),
                                                                                          np.shape(s_per_flop))),
                              where=np.asarray(eff) > 0)
    return OpCost(name, nbytes, flops, 0.0, "", nbytes / bw, t_compute, 0.0, launch_s(ctx, kernel_key or name))


def act_bytes(ctx: Context, elems) -> Num:
    """Bytes of `elems` activation elements (bf16) read or written in the weight/KV memory tier."""
    return elems * ctx.act_bytes_per_elem


def elementwise_op(ctx: Context, nbytes) -> OpCost:
    """The memory-bound kernels between a block's GEMMs (fused add + RMSNorm, rotary, the gated activation, MoE token
    permute and combine): activations read and written once each, beside the GEMMs' own time. Their launches are
    counted with the block's GEMMs (KERNELS)."""
    return OpCost("elementwise", nbytes, 0.0, 0.0, "", nbytes / ctx.bytes_per_s, 0.0, 0.0, 0.0)


def prefill_share(b: Batch):
    """Share of the batch's new tokens that are prompt tokens (0 for pure decode, 1 for pure prefill)."""
    return b.prefill_share


def weight_op(ctx: Context, name: str, params_per_chip, b: Batch, group: str, kernel_key: str | None = None,
              tokens=None, inner=None) -> OpCost:
    """A GEMM/GEMV over `params_per_chip` weights: read them once, 2 FLOPs per weight per token of the batch
    (or per `tokens` when given: the LM head computes logits only for the tokens that sample), and each token's
    input and output activations (2 d + params_per_chip / d elements: a d-wide input and output, and the op's
    inner widths). `inner`: (FLOP share, inner dimension) of each of its GEMMs (default: one GEMM of inner d)."""
    t = b.tokens if tokens is None else tokens
    d = ctx.model.hidden_size
    io = act_bytes(ctx, t * (2.0 * d + params_per_chip / d))
    return compute_op(ctx, name, params_per_chip * ctx.rates[group].bytes_per_weight + io, 2.0 * params_per_chip * t,
                      group, kernel_key, rows=t, prefill_share=prefill_share(b),
                      inner=inner if inner is not None else ((1.0, d),))


def gated_ffn_inner(d: int, params_per_chip) -> tuple:
    """A gated FFN per chip: gate_up (2/3 of the FLOPs) reduces over d, down (1/3) over its intermediate width per
    chip, I / tp = params_per_chip / (3 d)."""
    return ((2.0 / 3.0, d), (1.0 / 3.0, np.maximum(params_per_chip / (3.0 * d), 1.0)))


def comm_op(ctx: Context, name: str, nbytes: float, group_chips: int, latency_s: float, peer=False) -> OpCost:
    """A point-to-point transfer (a pipeline hop): the link's own latency, `latency_s` beyond it, one kernel launch."""
    t, link = ctx.link_time(nbytes, group_chips, latency_s, peer)
    return OpCost(name, 0.0, 0.0, nbytes, link, 0.0, 0.0, t, launch_s(ctx, name))


def collective_op(ctx: Context, name: str, nbytes: float, group_chips: int, measured_latency_s: float, peer=False) -> OpCost:
    """A collective whose small-message time was measured end to end (NCCL all-reduce, DeepEP dispatch/combine):
    that time already holds the link latency and the kernel launch, so neither is added again (docs/model.md 2.1)."""
    t, link = ctx.link_time(nbytes, group_chips, measured_latency_s, peer, link_latency=False)
    return OpCost(name, 0.0, 0.0, nbytes, link, 0.0, 0.0, t, 0.0)


def kv_shard(att: Attention, tp: int) -> int:
    """How many ways one sequence's KV is split across a TP group: GQA by KV heads, MLA's latent not at all."""
    return np.minimum(tp, att.n_kv_heads) if att.kind == "gqa" else 1


def query_heads_per_kv_head(att: Attention, tp) -> Num:
    """A grouped-query layer's query heads per KV head on one chip (heads per chip / KV heads per chip), at least 1."""
    return np.maximum(att.n_heads / tp * kv_shard(att, tp) / att.n_kv_heads, 1.0)


def decode_kv_reads(ctx: Context, att: Attention) -> Num:
    """How many times a decode step reads each cached KV entry: once, or, where the engine release's decode kernel
    gives every query head its own pass over its KV head (trait gqa_kv_read_per_query_head: TensorRT-LLM before
    XQA), once per query head that shares it on a chip: heads per chip / KV heads per chip."""
    if not ctx.kv_read_per_query_head or att.kind != "gqa":
        return 1.0
    return query_heads_per_kv_head(att, ctx.dep.tp)


def mixed_step_kv_reads(ctx: Context, att: Attention, b: Batch) -> Num:
    """How many times a decode sequence's cached KV is read in a step that also prefills: 1 + u (g - 1), g the query
    heads per KV head on a chip and u = mixed_step_gqa_unpacked_share. A kernel that runs such a step's decodes in
    its prefill path (one varlen call for the whole batch, as vLLM's FlashAttention-2 backend does) gives every query
    head its own pass over the shared KV head; u is the share of those extra passes that reach DRAM (the rest hit
    L2). 1 in a decode-only step, for non-GQA attention, and where u = 0 (engines that run decodes in a decode kernel
    whatever else the step holds)."""
    u = ctx.k.mixed_step_gqa_unpacked_share
    if not u or att.kind != "gqa":
        return 1.0
    g = query_heads_per_kv_head(att, ctx.dep.tp)
    mixed = np.asarray(b.prefill_seqs) > 0
    out = 1.0 + u * (g - 1.0) * mixed
    return float(out) if is_scalar(b.prefill_seqs) and np.ndim(out) == 0 else out


def _share(part, total):
    if is_scalar(total) and is_scalar(part):
        return float(part / total) if total else 0.0
    total = np.asarray(total, dtype=float)
    return np.divide(part, total, out=np.zeros(np.broadcast_shapes(np.shape(part), total.shape)), where=total > 0)


def attention_ops(ctx: Context, att: Attention, b: Batch) -> list[OpCost]:
    tp = ctx.dep.tp
    d = ctx.model.hidden_size
    # the output projection reduces over the heads' value width per chip; the others over d (or a LoRA rank)
    o_share = min(att.n_heads * att.v_head_dim * d / att.params, 0.5)
    inner = ((1.0 - o_share, d), (o_share, np.maximum(att.n_heads * att.v_head_dim / tp, 1.0)))
    ops = [weight_op(ctx, "attn.proj", att.params / tp, b, "attention", "attn.proj.mla" if att.kind == "mla" else None,
                     inner=inner)]
    entry = att.kv_elems_per_token * ctx.kv_bytes_per_elem / kv_shard(att, tp)
    index_entry = att.indexer_elems_per_token * ctx.index_bytes_per_elem
    pair = att.score_flops_per_pair
    # decode: every sequence reads its cache once for its q query tokens
    read, cached = att.read_entries(b.decode_context), att.cached_entries(b.decode_context)
    nbytes = b.decode_seqs * (read * entry * decode_kv_reads(ctx, att) * mixed_step_kv_reads(ctx, att, b)
                              + cached * index_entry)
    flops_decode = b.decode_tokens * (pair * read + att.indexer_flops_per_pair * cached) / tp
    # prefill: new tokens write their KV; a chunk after earlier chunks (or a prefix hit) reads what they cached
    pos = b.position
    nbytes = nbytes + b.new_prefill_tokens * entry
    if any_true(b.prefill_cached):
        nbytes = nbytes + b.prefill_seqs * (att.read_entries(b.prefill_cached) * entry
                                            + att.cached_entries(b.prefill_cached) * index_entry)
    prefill_pair = pair
    if att.kind == "mla":
        # prefill runs MLA un-absorbed (keys and values expanded per head), as vLLM and SGLang do:
        # 2 x heads x (qk width + v width) per pair instead of the absorbed 2 x heads x (2 x latent + rope)
        prefill_pair = 2 * att.n_heads * (att.head_dim + att.v_head_dim)
    flops_prefill = b.new_prefill_tokens * (prefill_pair * att.read_entries(pos)
                                            + att.indexer_flops_per_pair * att.cached_entries(pos)) / tp
    flops = flops_decode + flops_prefill
    # each query token's q is read and its output written (heads x value width per chip)
    nbytes = nbytes + act_bytes(ctx, b.tokens * att.n_heads * (att.head_dim + att.v_head_dim) / tp)
    # a sparse-attention indexer (DSA) runs its own kernels before the sparse core (KERNELS["attn.core.dsa"])
    core_kernels = "attn.core.dsa" if att.indexer_elems_per_token else None
    ops.append(compute_op(ctx, "attn.core", nbytes, flops, KV_CORE, core_kernels, prefill_share=_share(flops_prefill, flops),
                          bytes_per_s=ctx.kv_bytes_per_s, prefill_rate_ratio=ctx.k.attention_prefill_rate_ratio))
    # fused residual add + RMSNorm (read x and the residual, write both), rotary on q and k
    ops.append(elementwise_op(ctx, act_bytes(ctx, b.tokens * (4.0 * d + 2.0 * (att.n_heads + att.n_kv_heads)
                                                                 * att.head_dim / tp))))
    return ops


def linear_mixer_ops(ctx: Context, mix: LinearMixer, b: Batch) -> list[OpCost]:
    tp = ctx.dep.tp
    state_bytes = 2.0 * b.seqs * mix.state_elems * ctx.state_bytes_per_elem / tp      # read and write the state once per step
    d = ctx.model.hidden_size
    return [
        weight_op(ctx, "linear.proj", mix.params / tp, b, "attention"),
        compute_op(ctx, "linear.state", state_bytes, b.tokens * mix.flops_per_token / tp, "attention",
                   prefill_share=prefill_share(b)),
        elementwise_op(ctx, act_bytes(ctx, b.tokens * (4.0 * d + mix.params / tp / d))),   # add + norm, gates, conv
    ]


def expected_experts_touched(n_experts: int, top_k: int, tokens: Num, load_cv: float = 0.0) -> Num:
    """Distinct experts hit by `tokens` tokens routed to top_k of n_experts each (docs/model.md 1.1).

    Uniform routing misses an expert with probability (1 - k/E)^T = exp(-T a), a = -ln(1 - k/E). A skewed router
    gives expert i a rate g_i a with g_i spread across experts, mean 1 and coefficient of variation `load_cv`;
    taking g gamma-distributed (the standard model of a positive spread), E[exp(-T a g)] = (1 + T a c^2)^(-1/c^2).
    So a skewed router touches fewer experts than a uniform one (the hot ones again and again), and c -> 0 gives
    back the uniform E(1 - (1 - k/E)^T). Never fewer than the k distinct experts one token picks (k min(T, 1)): the
    mixture treats a token's k picks as independent, which undercounts them where k/E is large (Mixtral's 2 of 8
    at one token: 1.84 experts at c = 0.85)."""
    a = -math.log1p(-top_k / n_experts) if top_k < n_experts else math.inf
    c2 = load_cv * load_cv
    if c2 < 1e-9 or a == math.inf:
        return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)
    out = np.maximum(n_experts * (1.0 - (1.0 + tokens * a * c2) ** (-1.0 / c2)), top_k * np.minimum(tokens, 1.0))
    return float(out) if is_scalar(out) else out


def remote_ranks_per_token(n_experts: int, top_k: int, ep) -> Num:
    """Other expert-parallel ranks a token is sent to: those holding at least one of its top_k experts (E / ep each,
    routed uniformly without replacement), (ep - 1) x (1 - C(E - E / ep, k) / C(E, k)). An EP dispatch sends a token
    once to every rank that holds one of its experts, not once per expert (DeepEP's dispatch layout marks each
    token per rank, is_token_in_rank, and its combine returns one partial sum per rank), so at EP 2 a top-8 token
    crosses the link about once, not four times. Group-limited routing (DeepSeek's topk_group of n_group) bounds the
    ranks lower still; the model spec does not carry it, so this count is an upper bound there."""
    ep = np.asarray(ep, dtype=float)
    others = n_experts - n_experts / ep
    miss = np.ones_like(ep)
    for i in range(top_k):
        miss = miss * np.clip((others - i) / (n_experts - i), 0.0, 1.0)
    # never more than the token's remote experts (a rank can hold under one expert when redundant slots pad E)
    out = np.minimum((ep - 1.0) * (1.0 - miss), top_k * (ep - 1.0) / ep)
    return float(out) if out.ndim == 0 else out


@cache
def expected_max_std_normal(n: int) -> float:
    """E[max of n independent standard normals]: 0 for one, 0.564 for 2, 1.029 for 4, 1.424 for 8, 2.344 for 64
    (integral of x n phi(x) Phi(x)^(n-1) on a fine grid)."""
    if n <= 1:
        return 0.0
    x = np.linspace(-9.0, 9.0, 9001)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return float(np.sum(x * n * pdf * cdf ** (n - 1)) * (x[1] - x[0]))


def expert_rank_imbalance(slots: Num, top_k: int, ep: Num, moe_tokens: Num, expert_load_cv: float,
                          groups: int = 1) -> Num:
    """The busiest expert-parallel rank's (token, expert) pairs over the mean rank's (docs/model.md 1.1).

    A rank's load is the sum of its slots / ep experts' loads. Two things make it vary between ranks: the router's
    skew (each expert's share of the pairs has coefficient of variation `expert_load_cv` across experts, so a rank
    averaging slots / ep of them varies by cv sqrt(ep / slots)) and sampling (T k pairs over ep ranks, about
    Poisson: sqrt(ep / (T k))). The step waits for the busiest of ep ranks, E[max] ~ mean (1 + z_ep CV) with
    z_ep the expected maximum of ep standard normals; never more than ep (every pair on one rank). One rank has
    no imbalance. So EP 2 over 128 experts at a prefill stays near 1 and EP 8 of a decode batch of 8 tokens
    reaches about 1.5, where a single factor had to be one number for both.

    Group-limited routing (`groups` > 1: DeepSeek-V3 picks a token's experts from 4 of 8 groups) adds the groups'
    skew: a rank holding groups / ep whole groups (all of one group's load when ep >= groups) varies by
    cv sqrt(min(ep / groups, 1)), a group's share taken to vary across groups as an expert's does across experts
    (an assumption: no measurement of group loads was found; DeepSeek's EPLB balances groups across nodes first)."""
    ep_arr = np.asarray(ep, dtype=float)
    z: Num
    if ep_arr.ndim == 0:                 # one layout (predict, the simulator's steps): no table of z to build
        z = expected_max_std_normal(round(float(ep_arr)))
    else:
        ranks, where = np.unique(np.rint(ep_arr).astype(int), return_inverse=True)
        z = np.array([expected_max_std_normal(int(n)) for n in ranks])[where].reshape(ep_arr.shape)
    pairs = np.maximum(np.asarray(moe_tokens, dtype=float) * top_k, 1.0)
    group_share = np.minimum(ep_arr / groups, 1.0) if groups > 1 else 0.0
    cv = np.sqrt(expert_load_cv ** 2 * (ep_arr / slots + group_share) + ep_arr / pairs)
    out = np.where(ep_arr > 1, np.minimum(1.0 + z * cv, ep_arr), 1.0)
    return float(out) if is_scalar(out) else out


def moe_ops(ctx: Context, moe: MoE, b: Batch) -> list[OpCost]:
    dep, k = ctx.dep, ctx.k
    ops = []
    d = ctx.model.hidden_size
    always_on = moe.shared_params + moe.router_params + moe.latent_params
    if moe.shared_params + moe.latent_params:
        ops.append(weight_op(ctx, "moe.shared", always_on / dep.tp, b, "shared_experts",
                             inner=gated_ffn_inner(d, always_on / dep.tp)))
    elif always_on:
        # the gate alone: its weights are read, its GEMM is one of moe.experts' launches
        ops.append(weight_op(ctx, "moe.router", always_on / dep.tp, b, "shared_experts"))
    moe_tokens = b.moe_tokens_for(dep.attn_dp)
    imbalance = expert_rank_imbalance(moe.n_experts + dep.redundant_experts, moe.top_k, dep.ep, moe_tokens,
                                      k.expert_load_cv, moe.routing_groups)
    slots = (moe.n_experts + dep.redundant_experts) / moe.n_experts
    distinct = expected_experts_touched(moe.n_experts, moe.top_k, moe_tokens, k.expert_load_cv)
    touched = distinct * slots / dep.ep
    rate = ctx.rates["routed_experts"]
    # the busiest chip reads `imbalance` times the mean of the experts touched, but never more than it holds
    held = (moe.n_experts + dep.redundant_experts) / dep.ep
    nbytes = np.minimum(imbalance * touched, held) * moe.expert_params / dep.moe_tp * rate.bytes_per_weight
    flops = imbalance * 2.0 * moe_tokens * moe.top_k * moe.expert_params / (dep.ep * dep.moe_tp)
    rows_per_expert = moe_tokens * moe.top_k / np.maximum(distinct, 1e-9)
    # (token, expert) pairs this chip computes, and each pair's GEMM inputs and outputs
    pairs = imbalance * moe_tokens * moe.top_k / dep.ep
    width = moe.expert_params / dep.moe_tp / d                 # 3 x the expert's intermediate width per chip
    io = act_bytes(ctx, pairs * (2.0 * d + width))
    ops.append(compute_op(ctx, "moe.experts", nbytes + io, flops, "routed_experts", rows=rows_per_expert,
                          prefill_share=prefill_share(b), inner=gated_ffn_inner(d, moe.expert_params / dep.moe_tp),
                          scale=k.grouped_gemm_fraction))
    tokens = b.tokens
    # add + norm of the rank's tokens, their permute and combine (read/write d per pair and per token) and the
    # gated activation of every pair
    ops.append(elementwise_op(ctx, act_bytes(ctx, tokens * 6.0 * d + pairs * (2.0 * d + width))))
    gather = (dep.attn_dp > 1) & (dep.ep < dep.stage_chips)
    if needed(gather):
        # attention-DP ranks hand their tokens to experts split across ranks (SGLang dp_gather / dp_scatter):
        # every chip receives the other ranks' tokens before the experts and returns their partial sums after
        nbytes = (moe_tokens - tokens) * ctx.model.hidden_size * ctx.act_bytes_per_elem
        for name in ("dp.gather", "dp.scatter"):
            ops.append(gated(collective_op(ctx, name, nbytes, dep.stage_chips, k.collective_latency_s), gather))
    if needed(dep.ep > 1):
        per_chip_tokens = moe_tokens / dep.stage_chips
        nbytes = (per_chip_tokens * ctx.model.hidden_size * ctx.act_bytes_per_elem
                  * remote_ranks_per_token(moe.n_experts, moe.top_k, dep.ep))
        for name in ("ep.dispatch", "ep.combine"):
            ops.append(gated(collective_op(ctx, name, nbytes, dep.ep, k.all_to_all_latency_s), dep.ep > 1))
    return ops


def allreduce_op(ctx: Context, tokens) -> OpCost:
    tp = ctx.dep.tp
    nbytes = 2.0 * (tp - 1) / tp * tokens * ctx.model.hidden_size * ctx.act_bytes_per_elem     # ring all-reduce traffic per chip
    return collective_op(ctx, "tp.allreduce", nbytes, tp, ctx.k.collective_latency_s, peer=tp == 2)   # two chips share one link


def layer_ops(ctx: Context, layer: Layer, b: Batch) -> list[OpCost]:
    ops: list[OpCost] = []
    if isinstance(layer.mixer, Attention):
        ops += attention_ops(ctx, layer.mixer, b)
    elif isinstance(layer.mixer, LinearMixer):
        ops += linear_mixer_ops(ctx, layer.mixer, b)
    if layer.mixer is not None and needed(ctx.dep.tp > 1):
        ops.append(gated(allreduce_op(ctx, b.tokens), ctx.dep.tp > 1))
    if isinstance(layer.ffn, DenseFFN):
        d, per_chip = ctx.model.hidden_size, layer.ffn.params / ctx.dep.tp
        ops.append(weight_op(ctx, "ffn", per_chip, b, "dense_ffn", inner=gated_ffn_inner(d, per_chip)))
        # add + norm (4 d per token) and the gated activation (read 2 I / tp, write I / tp)
        ops.append(elementwise_op(ctx, act_bytes(ctx, b.tokens * (4.0 * d + per_chip / d))))
    elif isinstance(layer.ffn, MoE):
        ops += moe_ops(ctx, layer.ffn, b)
    if layer.ffn is not None and needed(ctx.dep.tp > 1):
        ops.append(gated(allreduce_op(ctx, b.tokens), ctx.dep.tp > 1))
    if needed(ctx.dep.overlap_comm):
        ops = hide_comm(ops, ctx.dep.overlap_comm)
    if ctx.k.layer_latency_s or ctx.k.layer_latency_s_per_byte:
        # dataflow chips (wafers, LPUs): a per-layer time, a fixed part plus a part per byte of weights it touches
        weight_bytes = sum(o.bytes for o in ops if o.name in WEIGHT_OPS)
        floor = ctx.k.layer_latency_s + ctx.k.layer_latency_s_per_byte * weight_bytes
        ops.append(OpCost("layer.floor", 0.0, 0.0, 0.0, "", 0.0, 0.0, 0.0, floor))
    return ops


WEIGHT_OPS = ("attn.proj", "linear.proj", "ffn", "moe.shared", "moe.router", "moe.experts")


def hide_comm(ops: list[OpCost], overlap=True) -> list[OpCost]:
    """Two-micro-batch overlap: communication runs under the layer's own work; only the excess is exposed."""
    work = sum(np.maximum(o.t_memory_s, o.t_compute_s) for o in ops)
    comm = sum(o.t_comm_s for o in ops)
    if not needed(comm > 0):
        return ops
    exposed = np.maximum(0.0, comm - work) / np.where(comm > 0, comm, 1.0)
    exposed = np.where(overlap, exposed, 1.0)
    if is_scalar(exposed):
        exposed = float(exposed)
    return [o if not needed(o.t_comm_s) else OpCost(o.name, o.bytes, o.flops, o.comm_bytes, o.link, 0.0, 0.0,
                                                    o.t_comm_s * exposed, o.t_fixed_s)
            for o in ops]
