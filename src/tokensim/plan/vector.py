"""Evaluate many deployments at once: numpy arrays through the same cost functions as `predict`.

Candidates are grouped by what changes the op list's structure (pipeline depth, stored and KV
precision); inside a group the parallel degrees, batch and speculative decoding are arrays, and the
op formulas of tokensim.perf run on them unchanged. A test checks sampled deployments against `predict`
(decode speed, TTFT, memory, power).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tokensim.perf.constants import for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.layers import Shape, layer_ops, weight_op
from tokensim.perf.step import step_cost
from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.perf.energy import SECONDS_PER_HOUR, power_w
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.perf.memory import stage_memory
from tokensim.specs.model.spec import ModelSpec
from tokensim.prediction.predictor import chip_utilization, decode_context


@dataclass(frozen=True)
class VecDeployment:
    """The fields of Deployment that the cost functions read, as arrays (one element per candidate)."""

    tp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    attn_dp: np.ndarray
    batch: np.ndarray
    overlap_comm: np.ndarray
    redundant_experts: np.ndarray
    pp: int
    weights: str | None
    expert_weights: str | None
    kv: str
    input_tokens: int
    output_tokens: int
    engine: str = "default"
    compute: str | None = None
    stage_layers: tuple[int, ...] | None = None
    micro_batches: int | None = None
    spec: SpecDecode | None = None

    @property
    def chips(self):
        return self.tp * self.attn_dp * self.pp * self.dp

    @property
    def stage_chips(self):
        return self.tp * self.attn_dp

    @property
    def moe_tp(self):
        return self.tp * self.attn_dp // self.ep

    @property
    def seqs_per_rank(self):
        return -(-self.batch // (self.dp * self.attn_dp))

    def stages(self, n_layers: int) -> tuple[int, ...]:
        return Deployment(pp=self.pp, stage_layers=self.stage_layers).stages(n_layers)


@dataclass(frozen=True)
class Group:
    """Candidates sharing a pipeline depth and precisions."""

    pp: int
    weights: str | None
    expert_weights: str | None
    kv: str
    tp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    attn_dp: np.ndarray
    batch: np.ndarray
    spec_on: np.ndarray          # bool: speculative decoding with `spec`


def evaluate_group(model: ModelSpec, hw: HardwareSpec, g: Group, input_tokens: int, output_tokens: int,
                   spec: SpecDecode | None, engine: str = "default") -> dict[str, np.ndarray]:
    """Every number `predict` gives that the planner needs, for each candidate of the group."""
    n = len(g.tp)
    vec = VecDeployment(tp=g.tp, ep=g.ep, dp=g.dp, attn_dp=g.attn_dp, batch=g.batch, overlap_comm=g.ep > 1,
                        redundant_experts=np.zeros(n, dtype=int), pp=g.pp, weights=g.weights,
                        expert_weights=g.expert_weights, kv=g.kv, input_tokens=input_tokens,
                        output_tokens=output_tokens, engine=engine)
    k = for_hardware(hw, engine)
    scalar = Deployment(pp=g.pp, weights=g.weights, expert_weights=g.expert_weights, kv=g.kv, engine=engine,
                        input_tokens=input_tokens, output_tokens=output_tokens)
    ctx = replace(make_context(model, hw, scalar, k), dep=vec)
    pctx = replace(make_context(model, hw, scalar, k, prefill=True), dep=vec)
    context = decode_context(vec)

    seqs = vec.seqs_per_rank.astype(float)
    micro = np.minimum(g.pp, seqs)
    draft_tokens = spec.draft_tokens if spec else 0
    q = 1.0 + draft_tokens * g.spec_on
    mb = seqs / micro
    cost = step_cost(ctx, Shape(mb, q, context, mb * g.attn_dp * q))
    stage_max = np.maximum.reduce([np.broadcast_to(s, (n,)) for s in cost.stage_s])
    cycle = np.maximum(cost.latency_s, micro * stage_max + cost.host_s)
    tokens_per_step = np.where(g.spec_on, spec.expected_tokens_per_step if spec else 1.0, 1.0)
    if spec is not None and np.any(g.spec_on):
        shape = Shape(seqs, 1.0, context, seqs * g.attn_dp)
        head = layer_ops(ctx, model.layers[-1], shape)
        head.append(weight_op(ctx, "lm_head", model.lm_head_matmul_params / g.tp, seqs, "lm_head"))
        cycle = cycle + g.spec_on * draft_tokens * sum(op.time_s for op in head)
    tpot = cycle / tokens_per_step

    chunks = min(g.pp, input_tokens)
    qp = input_tokens / chunks
    pre = step_cost(pctx, Shape(np.ones(n), qp, float(input_tokens), qp * np.ones(n)))
    pre_max = np.maximum.reduce([np.broadcast_to(s, (n,)) for s in pre.stage_s])
    ttft = pre.latency_s + (chunks - 1) * pre_max

    # every prompt of the batch prefilled once (predictor.batch_prefill_s): what aggregated serving interleaves
    batch_pre = step_cost(pctx, Shape(seqs, float(input_tokens), float(input_tokens), seqs * g.attn_dp * input_tokens))

    stages = stage_memory(ctx, input_tokens + output_tokens)
    per_chip = np.maximum.reduce([np.broadcast_to(w + kv * seqs, (n,)) for w, kv in stages])
    capacity = k.usable_memory_fraction * hw.capacity_bytes

    throughput = g.batch / tpot
    chips = vec.chips
    u = chip_utilization([np.broadcast_to(b, (n,)) for b in cost.stage_busy_s], micro, cycle)
    power = power_w(hw, chips, u)
    price = hw.price_usd_per_hour
    usd = chips * price / SECONDS_PER_HOUR / throughput * 1e6 if price else np.full(n, np.nan)
    return {
        "tokens_per_s_per_user": 1.0 / tpot, "time_per_output_token_s": tpot, "ttft_s": np.broadcast_to(ttft, (n,)),
        "throughput_tokens_per_s": throughput, "throughput_tokens_per_s_per_chip": throughput / chips,
        "chips": chips, "memory_per_chip_bytes": per_chip, "fits": per_chip <= capacity, "power_w": power,
        "tokens_per_joule": throughput / power, "usd_per_million_tokens": usd,
        "prefill_batch_s": np.broadcast_to(batch_pre.latency_s, (n,)),
    }
