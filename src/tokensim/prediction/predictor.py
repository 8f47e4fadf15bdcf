"""predict(): model + hardware + deployment -> a frozen Prediction with its per-op breakdown."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.deploy.layout import check_against_model, fit_error, resolve_layout
from tokensim.perf.constants import ConstantsTable, for_hardware, table_or_default
from tokensim.perf.context import Context, make_context
from tokensim.perf.energy import energy
from tokensim.perf.layers import Batch, layer_ops, weight_op
from tokensim.perf.memory import max_batch, memory_use, stage_memory
from tokensim.perf.ops import Num, OpSummary
from tokensim.perf.step import StepCost, step_cost
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.hardware.p2p import has_pcie_link, peer_to_peer_note, peer_to_peer_on, with_peer_to_peer
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.catalog import load_model
from tokensim.specs.model.spec import ModelSpec
from tokensim.validate.uncertainty import band, batch_regime, shipped_residuals


@dataclass(frozen=True)
class Prediction:
    model: str
    hardware: str
    deployment: Deployment
    chips: int
    tokens_per_s_per_user: float
    time_per_output_token_s: float
    ttft_s: float
    throughput_tokens_per_s: float          # output tokens/s of the whole deployment, steady decode
    throughput_tokens_per_s_per_chip: float
    throughput_tokens_per_s_per_system: float
    memory_per_chip_bytes: float
    weights_per_chip_bytes: float
    kv_per_chip_bytes: float
    capacity_per_chip_bytes: float
    kv_capacity_tokens: float               # tokens of KV the deployment can hold beside its weights
    max_batch: int                          # at this context length
    min_chips: int                          # fewest chips whose memory holds weights + KV (capacity bound)
    bytes_per_step_per_chip: float
    bandwidth_bound_tokens_per_s_per_user: float   # E_spec / sum over stages of (bytes / peak bandwidth)
    roofline_bound_tokens_per_s_per_user: float    # E_spec / sum over stages of max(bytes/peak BW, FLOPs/peak FLOP/s)
    tokens_per_step: float                  # expected tokens per sequence per step (1 without speculative decoding)
    breakdown: tuple[OpSummary, ...]
    prefill_breakdown: tuple[OpSummary, ...]
    assumptions: tuple[str, ...]
    power_w: float = 0.0                    # all chips, at this step's busy share
    tokens_per_joule: float = 0.0
    sequences_per_s_per_kw: float = 0.0     # whole sequences (output_tokens each) finished per second per kW
    usd_per_million_tokens: float | None = None   # from $ per chip-hour, where a price is known
    # purchase amortized + energy (data/costs.toml), where a purchase price is known
    tco_usd_per_million_tokens: float | None = None
    # calibrated by out-of-sample validation residuals (validate/uncertainty.py): the bias-corrected central estimate
    # and the 10th-90th percentile range of what would be measured; the estimate always lies inside its range
    tokens_per_s_per_user_estimate: float = 0.0
    tokens_per_s_per_user_range: tuple[float, float] = (0.0, 0.0)
    ttft_s_estimate: float = 0.0
    ttft_s_range: tuple[float, float] = (0.0, 0.0)
    range_note: str = ""

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("breakdown", "prefill_breakdown", "deployment")}
        d["deployment"] = asdict(self.deployment)
        d["breakdown"] = [op.to_dict() for op in self.breakdown]
        d["prefill_breakdown"] = [op.to_dict() for op in self.prefill_breakdown]
        d["assumptions"] = list(self.assumptions)
        return d

    def to_pandas(self, breakdown: bool = False):
        """One row (or, with `breakdown`, one row per op of the decode step) as a pandas DataFrame."""
        from tokensim.output.frames import to_pandas
        return to_pandas(self, breakdown=breakdown)


def fewest_by_capacity(ctx, capacity_per_chip_bytes: float) -> int:
    """Chips whose usable memory holds one replica's weights, summed over stages (KV excluded)."""
    weights = sum(w for w, _ in stage_memory(ctx, 0.0)) * ctx.dep.stage_chips
    return max(1, math.ceil(weights / capacity_per_chip_bytes))


def pipeline_bound(stage_s: list[float], micro: int) -> float:
    """A cycle lasts at least one micro-batch's trip through every stage, and at least `micro` turns of the
    slowest stage: the lower bound on the cycle from per-stage lower bounds."""
    return max(sum(stage_s), micro * max(stage_s))


def chip_utilization(stage_busy_s, micro, cycle):
    """Average busy share of a chip over a cycle: each stage is busy `micro` times its busy time."""
    return micro * sum(stage_busy_s) / (len(stage_busy_s) * cycle)


def decode_context(dep) -> float:
    """Mean tokens attended over the generation: the prompt plus half the output."""
    return dep.input_tokens + dep.output_tokens / 2.0


@dataclass(frozen=True)
class DecodeStep:
    """One decode cycle of a deployment (numbers, or arrays over the planner's candidates)."""

    cost: StepCost
    cycle_s: Num               # one token step of every micro-batch, drafts included
    tokens_per_step: Num       # expected tokens per sequence per cycle (1 without speculative decoding)
    micro: Num                 # pipeline micro-batches in flight

    @property
    def tpot_s(self):
        return self.cycle_s / self.tokens_per_step


def _stage_max(stage_s, like):
    return np.maximum.reduce([np.broadcast_to(s, np.shape(like)) for s in stage_s]) if np.ndim(like) else max(stage_s)


def decode_step(ctx: Context, spec: SpecDecode | None, spec_on=True) -> DecodeStep:
    """The decode cycle of ctx.dep at its batch: micro-batches through the stages, host time, draft tokens.
    `spec_on` (bool or a mask over candidates) switches speculative decoding with `spec`."""
    dep = ctx.dep
    seqs: Num = dep.seqs_per_rank
    if np.ndim(seqs):
        seqs = np.asarray(seqs, dtype=float)
    micro = dep.micro_batches or np.minimum(dep.pp, seqs)
    micro = np.minimum(micro, seqs)
    if np.ndim(micro) == 0:
        micro = int(micro)
    k = spec.draft_tokens if spec else 0
    q = 1.0 + k * spec_on
    mb_seqs = seqs / micro
    # the MoE layers route the replica's sequences (not a rank's rounded-up share times the ranks)
    cost = step_cost(ctx, Batch.decode(mb_seqs, decode_context(dep), q, moe_tokens=dep.seqs_per_replica / micro * q))
    cycle = np.maximum(cost.latency_s, micro * _stage_max(cost.stage_s, seqs) + cost.host_s)
    tokens_per_step = np.where(spec_on, spec.expected_tokens_per_step, 1.0) if spec else 1.0
    if spec is not None and np.any(spec_on):
        cycle = cycle + spec_on * k * draft_step_s(ctx, spec, seqs, moe_tokens=dep.seqs_per_replica)
    if np.ndim(cycle) == 0:
        cycle, tokens_per_step = float(cycle), float(tokens_per_step)
    return DecodeStep(cost, cycle, tokens_per_step, micro)


def draft_step_s(ctx: Context, spec: SpecDecode, seqs, context=None, moe_tokens=None):
    """Time of one draft token for `seqs` sequences (per attention rank) of `context` tokens each (default: the
    deployment's mean over a generation): an MTP/EAGLE head (one layer + LM head) or a draft model's step.
    `moe_tokens`: the tokens the replica's MoE layers route (default seqs x attention ranks)."""
    dep, model = ctx.dep, ctx.model
    b = Batch.decode(seqs, decode_context(dep) if context is None else context, 1.0,
                     moe_tokens=seqs * dep.attn_dp if moe_tokens is None else moe_tokens)
    if spec.method == "draft" and spec.draft_model:
        draft = load_model(spec.draft_model)
        ddep = replace(dep, pp=1, stage_layers=None, ep=1, spec=None, weights=None, expert_weights=None)
        cost = step_cost(make_context(draft, ctx.hw, ddep, ctx.k), b)
        return cost.latency_s - cost.host_s
    head = layer_ops(ctx, model.layers[-1], b)
    head.append(weight_op(ctx, "lm_head", model.lm_head_matmul_params / dep.tp, b, "lm_head"))
    return sum(op.time_s for op in head)


def ttft_step(ctx: Context) -> tuple[StepCost, Num]:
    """Prefill of one prompt, in min(pp, prompt) chunks pipelined through the stages: (step of one chunk, TTFT)."""
    dep = ctx.dep
    chunks = np.minimum(dep.pp, dep.input_tokens)
    q = dep.input_tokens / chunks
    cost = step_cost(ctx, Batch.prefill(1.0, q, position=dep.input_tokens / 2.0, moe_tokens=q))
    ttft = cost.latency_s + (chunks - 1) * _stage_max(cost.stage_s, cost.latency_s)
    return cost, ttft


def batch_prefill_step(ctx: Context) -> StepCost:
    """One prefill step holding every prompt of the batch (weights read once per stage)."""
    dep = ctx.dep
    seqs = dep.seqs_per_rank
    return step_cost(ctx, Batch.prefill(seqs * 1.0, float(dep.input_tokens), position=dep.input_tokens / 2.0,
                                        moe_tokens=dep.seqs_per_replica * float(dep.input_tokens)))


def peak_bounds(hw: HardwareSpec, ctx: Context, cost: StepCost, micro) -> tuple[float, float]:
    """Step time bounds at datasheet peaks: bandwidth alone, and max(bandwidth, compute) per stage."""
    peak_bw = hw.weight_tier.bandwidth_bytes_per_s
    peak_f = hw.peak_flops(max((r.compute for r in ctx.rates.values()), key=hw.peak_flops))
    mem = pipeline_bound([b / peak_bw for b in cost.stage_bytes], micro)
    roof = pipeline_bound([max(b / peak_bw, f / peak_f) for b, f in zip(cost.stage_bytes, cost.stage_flops, strict=True)], micro)
    return mem, roof


def other_link_case(model: ModelSpec, hw: HardwareSpec, dep: Deployment, table: ConstantsTable) -> str:
    """What a deployment over PCIe assumes about GPU peer-to-peer, and its speed and TTFT with the other case: the
    catalog states one box, the user's may differ (specs/hardware/p2p.py)."""
    other = with_peer_to_peer(hw, not peer_to_peer_on(hw))
    ctx = make_context(model, other, dep, table.for_hardware(other, dep.engine))
    tps = 1.0 / decode_step(ctx, dep.spec).tpot_s
    return (f"{peer_to_peer_note(hw)}: cost model {tps:.3g} tokens/s per user, TTFT "
            f"{float(ttft_step(ctx)[1]) * 1e3:.3g} ms")


def predict_deployment(model: ModelSpec, hw: HardwareSpec, dep: Deployment, assumptions: tuple[str, ...] = (),
                       check_fit: bool = True, constants: ConstantsTable | None = None) -> Prediction:
    """`check_fit=False` predicts a deployment whose weights and KV would not fit (what-if steps of `compare`).
    `constants`: the table of empirical constants to use (default: the shipped one)."""
    check_against_model(model, dep)
    table = table_or_default(constants)
    err = fit_error(model, hw, dep, table) if check_fit else None
    if err is not None:
        raise err
    ctx = make_context(model, hw, dep, table.for_hardware(hw, dep.engine))
    if dep.chips > 1 and has_pcie_link(hw):
        assumptions = (*assumptions, other_link_case(model, hw, dep, table))
    if ctx.fusions:
        assumptions = (*assumptions, f"kernel fusions: {', '.join(sorted(ctx.fusions))}, as the deployment states "
                                     "(each one launch fewer per fused kernel: docs/model.md 1.4)")
    step = decode_step(ctx, dep.spec)
    cost, cycle, micro = step.cost, step.cycle_s, step.micro
    tpot = step.tpot_s
    prefill_cost, ttft = ttft_step(ctx)
    use = memory_use(ctx, dep.batch, dep.input_tokens + dep.output_tokens)
    mem_bound, roof = peak_bounds(hw, ctx, cost, micro)
    throughput = dep.batch / tpot
    full_context = dep.input_tokens + dep.output_tokens
    mb = max_batch(ctx, full_context)
    system_chips = max(1, hw.chips_per_system)
    kv_seq = use.kv_per_seq_per_chip_bytes
    power = energy(hw, dep.chips, chip_utilization(cost.stage_busy_s, micro, cycle), throughput)
    residuals = shipped_residuals()
    regime = batch_regime(dep.batch)
    speed = band(residuals, hw.family, dep.engine, "output_tps_per_user", regime, 1.0 / tpot)
    first = band(residuals, hw.family, dep.engine, "ttft_s", regime, float(ttft))
    return Prediction(
        model=model.name, hardware=hw.name, deployment=dep, chips=dep.chips,
        tokens_per_s_per_user=1.0 / tpot, time_per_output_token_s=tpot, ttft_s=float(ttft),
        throughput_tokens_per_s=throughput,
        throughput_tokens_per_s_per_chip=throughput / dep.chips,
        throughput_tokens_per_s_per_system=throughput / dep.chips * min(system_chips, dep.chips),
        memory_per_chip_bytes=use.per_chip_bytes, weights_per_chip_bytes=use.weights_per_chip_bytes,
        kv_per_chip_bytes=use.kv_per_chip_bytes, capacity_per_chip_bytes=use.capacity_per_chip_bytes,
        kv_capacity_tokens=(mb * full_context) if kv_seq > 0 else math.inf,
        max_batch=mb,
        min_chips=fewest_by_capacity(ctx, use.capacity_per_chip_bytes),
        bytes_per_step_per_chip=max(cost.stage_bytes),
        bandwidth_bound_tokens_per_s_per_user=step.tokens_per_step / mem_bound if mem_bound else math.inf,
        roofline_bound_tokens_per_s_per_user=step.tokens_per_step / roof if roof else math.inf,
        tokens_per_step=step.tokens_per_step,
        breakdown=cost.breakdown(), prefill_breakdown=prefill_cost.breakdown(),
        assumptions=assumptions,
        power_w=power.power_w, tokens_per_joule=power.tokens_per_joule,
        sequences_per_s_per_kw=throughput / dep.output_tokens / (power.power_w / 1e3) if power.power_w else 0.0,
        usd_per_million_tokens=power.usd_per_million_tokens,
        tco_usd_per_million_tokens=power.tco_usd_per_million_tokens,
        tokens_per_s_per_user_estimate=speed.estimate, tokens_per_s_per_user_range=(speed.low, speed.high),
        ttft_s_estimate=first.estimate, ttft_s_range=(first.low, first.high),
        range_note=speed.note,
    )


def predict(
    model: str | ModelSpec,
    hardware: str | HardwareSpec,
    *,
    chips: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    ep: int = 1,
    dp: int = 1,
    attn_dp: int = 1,
    redundant_experts: int = 0,
    stage_layers: tuple[int, ...] | None = None,
    weights: str | None = None,
    expert_weights: str | None = None,
    compute: str | None = None,
    kv: str = "bf16",
    batch: int = 1,
    input_tokens: int = 1024,
    output_tokens: int = 256,
    engine: str = "default",
    spec: SpecDecode | None = None,
    micro_batches: int | None = None,
    overlap_comm: bool = False,
    constants: ConstantsTable | None = None,
    p2p: bool | None = None,
    engine_version: str | None = None,
    fusions: tuple[str, ...] | None = None,
) -> Prediction:
    """Predict decode speed, TTFT, throughput and memory. Names come from the catalogs (`tokensim models`,
    `tokensim hardware`) or are paths to a config.json / hardware TOML. With no chips, tp or pp given,
    the fewest chips that hold the weights and KV are used. `p2p`: GPU peer-to-peer on (True) or off (False) on the
    chip's PCIe links; None: as its hardware file states. `fusions`: the kernel fusions the launch runs
    (perf.engines.FUSIONS; None: none)."""
    m, hw = load_model(model), with_peer_to_peer(load_hardware(hardware), p2p, "p2p")
    fields = dict(ep=ep, dp=dp, attn_dp=attn_dp, redundant_experts=redundant_experts, stage_layers=stage_layers,
                  weights=weights, expert_weights=expert_weights, compute=compute, kv=kv, batch=batch,
                  input_tokens=input_tokens, output_tokens=output_tokens, engine=engine, engine_version=engine_version,
                  spec=spec, micro_batches=micro_batches, overlap_comm=overlap_comm, fusions=fusions)
    dep, how = resolve_layout(m, hw, fields, chips=chips, tp=tp, pp=pp)
    notes = [f"layout: {how}"] if how else []
    return predict_deployment(m, hw, dep, tuple(notes), constants=constants)


def batch_prefill_cost(model: ModelSpec, hw: HardwareSpec, dep: Deployment, constants: ConstantsTable | None = None) -> StepCost:
    """One prefill step holding every prompt of the batch (weights read once per stage)."""
    return batch_prefill_step(make_context(model, hw, dep, for_hardware(hw, dep.engine, constants)))


def batch_prefill_s(model: ModelSpec, hw: HardwareSpec, dep: Deployment, constants: ConstantsTable | None = None) -> float:
    """Time to prefill every sequence of the batch once, through every stage."""
    return batch_prefill_cost(model, hw, dep, constants).latency_s


def offline_throughput(model: ModelSpec, hw: HardwareSpec, dep: Deployment, p: Prediction,
                       constants: ConstantsTable | None = None) -> float:
    """Output tokens/s of a batch run end to end: prefill of every prompt plus all decode steps."""
    total_s = batch_prefill_s(model, hw, dep, constants) + dep.output_tokens * p.time_per_output_token_s
    return dep.batch * dep.output_tokens / total_s


def prefill_run_s(model: ModelSpec, hw: HardwareSpec, dep: Deployment, sequences: int,
                  constants: ConstantsTable | None = None) -> float:
    """Wall time to prefill `sequences` prompts in micro-batches of dep.batch, pipelined across stages:
    the first micro-batch crosses every stage, each further one adds the slowest stage's time."""
    cost = batch_prefill_cost(model, hw, dep, constants)
    batches = math.ceil(sequences / dep.batch)
    return cost.latency_s + (batches - 1) * (max(cost.stage_s) if dep.pp > 1 else cost.latency_s)
