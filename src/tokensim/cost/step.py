"""One step of the whole model: layers grouped into pipeline stages, LM head, hops, host time."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .context import Context
from .layer import Shape, comm_op, layer_ops, weight_op
from .ops import OpCost, OpSummary, summarize


@dataclass(frozen=True)
class StepCost:
    stage_s: tuple[float, ...]     # time of each pipeline stage for this step (hops excluded)
    hop_s: float                   # one stage-to-stage transfer
    host_s: float                  # per step, outside the accelerators
    ops: tuple[tuple[OpCost, int], ...]
    stage_bytes: tuple[float, ...]   # bytes moved per chip in each stage
    stage_flops: tuple[float, ...]   # FLOPs per chip in each stage

    @property
    def latency_s(self) -> float:
        """One token through every stage: the per-user interval without pipelining."""
        return sum(self.stage_s) + (len(self.stage_s) - 1) * self.hop_s + self.host_s

    def breakdown(self) -> tuple[OpSummary, ...]:
        return summarize(list(self.ops))


def layer_groups(ctx: Context) -> list[Counter]:
    """For each stage, its distinct layers and how many times each occurs."""
    layers = ctx.model.layers
    groups, start = [], 0
    for n in ctx.dep.stages(len(layers)):
        groups.append(Counter(layers[start:start + n]))
        start += n
    return groups


def step_cost(ctx: Context, shape: Shape, head: bool = True) -> StepCost:
    """`head`: the LM head runs on the last stage (False for a pool that holds only FFN/experts)."""
    dep, model = ctx.dep, ctx.model
    ops: list[tuple[OpCost, int]] = []
    stage_s, stage_bytes, stage_flops = [], [], []
    groups = layer_groups(ctx)
    for index, group in enumerate(groups):
        t = b = f = 0.0
        for layer, count in group.items():
            for op in layer_ops(ctx, layer, shape):
                ops.append((op.scaled(count), count))
                t += op.time_s * count
                b += op.bytes * count
                f += op.flops * count
        if head and index == len(groups) - 1:
            logits_tokens = shape.seqs if ctx.prefill else shape.tokens
            head = weight_op(ctx, "lm_head", model.lm_head_matmul_params / dep.tp, logits_tokens, "lm_head")
            ops.append((head, 1))
            t, b, f = t + head.time_s, b + head.bytes, f + head.flops
        stage_s.append(t)
        stage_bytes.append(b)
        stage_flops.append(f)
    hop = 0.0
    if dep.pp > 1:
        hop_op = comm_op(ctx, "pp.hop", shape.tokens * model.hidden_size * ctx.b_act, dep.chips, ctx.k.stage_hop_latency_s)
        ops.append((hop_op.scaled(dep.pp - 1), dep.pp - 1))
        hop = hop_op.time_s
    # host time per step: a fixed part plus a part per running sequence (scheduling, sampling, detokenizing)
    host = ctx.k.host_overhead_s + ctx.k.host_overhead_per_seq_s * shape.seqs * ctx.dep.attn_dp
    if host:
        ops.append((OpCost("host", 0.0, 0.0, 0.0, "", 0.0, 0.0, 0.0, host), 1))
    return StepCost(tuple(stage_s), hop, host, tuple(ops), tuple(stage_bytes), tuple(stage_flops))
