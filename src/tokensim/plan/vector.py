"""Evaluate many deployments at once: numpy arrays through the same cost functions as `predict`.

Candidates are grouped by what changes the op list's structure (pipeline depth, stored and KV
precision); inside a group the parallel degrees, batch and speculative decoding are arrays, and the
op formulas of tokensim.perf run on them unchanged. A test checks sampled deployments against `predict`
(decode speed, TTFT, memory, power).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.energy import SECONDS_PER_HOUR, power_w
from tokensim.perf.memory import stage_memory
from tokensim.prediction.predictor import batch_prefill_step, chip_utilization, decode_step, ttft_step
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import ModelSpec


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
    engine_version: str | None = None
    fusions: tuple[str, ...] | None = None
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

    @property
    def seqs_per_replica(self):
        return -(-self.batch // self.dp)

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
                   spec: SpecDecode | None, engine: str = "default",
                   constants: ConstantsTable | None = None, engine_version: str | None = None,
                   fusions: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Every number `predict` gives that the planner needs, for each candidate of the group: the decode cycle,
    TTFT and batch prefill come from the same functions `predict_deployment` calls, on arrays. `engine_version` and
    `fusions` as Deployment's (the release's traits, the kernel fusions the launch runs)."""
    n = len(g.tp)
    vec = VecDeployment(tp=g.tp, ep=g.ep, dp=g.dp, attn_dp=g.attn_dp, batch=g.batch, overlap_comm=g.ep > 1,
                        redundant_experts=np.zeros(n, dtype=int), pp=g.pp, weights=g.weights,
                        expert_weights=g.expert_weights, kv=g.kv, input_tokens=input_tokens,
                        output_tokens=output_tokens, engine=engine, engine_version=engine_version, fusions=fusions)
    k = for_hardware(hw, engine, constants)
    scalar = Deployment(pp=g.pp, weights=g.weights, expert_weights=g.expert_weights, kv=g.kv, engine=engine,
                        input_tokens=input_tokens, output_tokens=output_tokens, engine_version=engine_version,
                        fusions=fusions)
    ctx = replace(make_context(model, hw, scalar, k), dep=vec)  # type: ignore[arg-type]  # arrays through the same formulas
    step = decode_step(ctx, spec, g.spec_on)
    tpot = step.tpot_s
    _, ttft = ttft_step(ctx)
    # every prompt of the batch prefilled once (predictor.batch_prefill_s): what aggregated serving interleaves
    batch_pre = batch_prefill_step(ctx)

    stages = stage_memory(ctx, input_tokens + output_tokens)
    seqs = vec.seqs_per_rank.astype(float)
    per_chip = np.maximum.reduce([np.broadcast_to(w + kv * seqs, (n,)) for w, kv in stages])
    capacity = k.usable_memory_fraction * hw.capacity_bytes

    throughput = g.batch / tpot
    chips = vec.chips
    u = chip_utilization([np.broadcast_to(b, (n,)) for b in step.cost.stage_busy_s], step.micro, step.cycle_s)
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
