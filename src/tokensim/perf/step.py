"""One engine step of the whole model: layers grouped into pipeline stages, LM head, hops, host time.

`step_cost(ctx, batch)` is the one cost function every prediction goes through: `predict`, the planner
(numpy arrays over candidate deployments), attention-FFN and prefill-decode disaggregation, validation and
the serving simulator (a batch of any mix of decode sequences and prefill chunks)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokensim.perf.context import Context
from tokensim.perf.layers import Batch, comm_op, layer_ops, needed, weight_op
from tokensim.perf.ops import OpCost, OpSummary, any_true, is_scalar, summarize


@dataclass(frozen=True)
class StepCost:
    stage_s: tuple[float, ...]     # time of each pipeline stage for this step (hops excluded)
    hop_s: float                   # one stage-to-stage transfer
    host_s: float                  # per step, outside the accelerators
    per_layer_ops: tuple[tuple[OpCost, int], ...]   # each op of one layer (one hop), and how many times the step runs it
    stage_bytes: tuple[float, ...]   # bytes moved per chip in each stage
    stage_flops: tuple[float, ...]   # FLOPs per chip in each stage
    stage_busy_s: tuple[float, ...] = ()   # time a stage's chips move data, compute or communicate (floors excluded)

    @property
    def latency_s(self) -> float:
        """One token through every stage: the per-user interval without pipelining."""
        return sum(self.stage_s) + (len(self.stage_s) - 1) * self.hop_s + self.host_s

    @property
    def ops(self) -> tuple[tuple[OpCost, int], ...]:
        """Each op summed over its repeats (`OpCost.scaled`), with the repeat count; built on demand: a simulated
        step or a fit's objective only needs the totals."""
        return tuple((op if count == 1 else op.scaled(count), count) for op, count in self.per_layer_ops)

    def breakdown(self) -> tuple[OpSummary, ...]:
        return summarize(list(self.ops))


def layer_groups(ctx: Context) -> list[dict]:
    """For each stage, its distinct layers and how many times each occurs (in first-seen order)."""
    distinct, index = ctx.model.layer_kinds
    groups, start = [], 0
    for n in ctx.dep.stages(len(index)):
        counts: dict[int, int] = {}
        for i in index[start:start + n]:
            counts[i] = counts.get(i, 0) + 1
        groups.append({distinct[i]: c for i, c in counts.items()})
        start += n
    return groups


def step_cost(ctx: Context, batch: Batch, head: bool = True) -> StepCost:
    """`head`: the LM head runs on the last stage (False for a pool that holds only FFN/experts)."""
    dep, model = ctx.dep, ctx.model
    ops: list[tuple[OpCost, int]] = []
    stage_s, stage_bytes, stage_flops = [], [], []
    groups = layer_groups(ctx)
    per_layer: dict = {}           # a layer type's ops and totals, computed once for every stage holding it
    stage_busy = []
    for index, group in enumerate(groups):
        t = b = f = busy = 0.0
        for layer, count in group.items():
            if layer not in per_layer:
                lops = layer_ops(ctx, layer, batch)
                lt = lb = lf = lbusy = 0        # one pass, the same sums (and order) as sum() over each field
                for o in lops:
                    lt, lb, lf, lbusy = lt + o.time_s, lb + o.bytes, lf + o.flops, lbusy + o.busy_s
                per_layer[layer] = (lops, lt, lb, lf, lbusy)
            lops, lt, lb, lf, lbusy = per_layer[layer]
            ops.extend((op, count) for op in lops)
            t, b, f, busy = t + lt * count, b + lb * count, f + lf * count, busy + lbusy * count
        if head and index == len(groups) - 1:
            # logits for every decode query token and for the last token of each prefill chunk
            logits_tokens = batch.decode_tokens + batch.prefill_seqs
            lm = weight_op(ctx, "lm_head", model.lm_head_matmul_params / dep.tp, batch, "lm_head", tokens=logits_tokens)
            ops.append((lm, 1))
            t, b, f, busy = t + lm.time_s, b + lm.bytes, f + lm.flops, busy + lm.busy_s
        if ctx.k.eager_layer_overhead_s and needed(batch.prefill_seqs):
            # a step with prompt tokens runs outside the engine's CUDA graphs: the host dispatches every layer's
            # kernels itself, and the stage takes at least that long
            dispatch = ctx.k.eager_layer_overhead_s * sum(group.values())
            floored = np.where(np.asarray(batch.prefill_seqs) > 0, np.maximum(t, dispatch), t)
            t = float(floored) if is_scalar(floored) else floored  # type: ignore[assignment]  # arrays in the planner
        stage_s.append(t)
        stage_bytes.append(b)
        stage_flops.append(f)
        stage_busy.append(busy)
    hop = 0.0
    if dep.pp > 1:
        # one stage hands its activations to the next: a point-to-point transfer inside one replica
        hop_op = comm_op(ctx, "pp.hop", batch.tokens * model.hidden_size * ctx.act_bytes_per_elem, dep.stage_chips * dep.pp,
                         ctx.k.stage_hop_latency_s, peer=True)
        ops.append((hop_op, dep.pp - 1))
        hop = hop_op.time_s
    # host time per step: a fixed part plus a part per running sequence (scheduling, sampling, detokenizing)
    host = ctx.k.host_overhead_s + ctx.k.host_overhead_per_seq_s * batch.seqs * ctx.dep.attn_dp
    if any_true(host):
        ops.append((OpCost("host", 0.0, 0.0, 0.0, "", 0.0, 0.0, 0.0, host), 1))
    return StepCost(tuple(stage_s), hop, host, tuple(ops), tuple(stage_bytes), tuple(stage_flops), tuple(stage_busy))
