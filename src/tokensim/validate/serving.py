"""Measured serving runs (silicon_dev.csv) against the cost model: deployment rules and the steady-state estimate.

A run is one engine serving requests of `isl` input and `osl` output tokens at a fixed client concurrency
(aiconfigurator's benchmark: aiperf --concurrency C --num-requests 20 C --warmup-request-count 2 C, per
src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2 at commit 095f58a51c4c).

Steady-state estimate of time per output token (TPOT), used until each row is simulated and by the fit, which
needs it fast: every running request decodes one token per step (the running batch capped at the run's batch size),
and the prompts of the requests that replace finished ones are prefilled beside them in whole prefill steps, as
closed-loop clients return in cohorts (`cohort_step_s`). A disaggregated run's decode workers see no prefill. Rows
are grouped by deployment and evaluated as numpy arrays over their concurrencies through `perf.step.step_cost`,
the function every prediction uses.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from tokensim.deploy.deployment import Deployment
from tokensim.deploy.layout import check_against_model
from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.layers import Batch
from tokensim.perf.step import step_cost
from tokensim.prediction.predictor import draft_step_s
from tokensim.specs.hardware.catalog import catalog
from tokensim.specs.model.catalog import catalog_model
from tokensim.specs.model.spec import MoE
from tokensim.validate.harness import (
    APPLY_LAUNCH_FUSIONS,
    INFERENCEX,
    Launch,
    harness_speculation,
    launch_fusions,
    lengths_note,
    mean_lengths,
    mtp_drafts,
    multinode_disaggregated,
    sglang_launch,
    sglang_mtp,
    sglang_mtp_note,
    trtllm_launch,
    vllm_launch,
)
from tokensim.validate.serving_rows import Pool, SiliconRun

LOW_PRECISION = ("fp8", "nvfp4", "mxfp4", "fp4", "int4")
TILE_COLUMNS = 128      # output columns of one tensor-core GEMM tile (CUTLASS/cuBLAS tiles are 64-256 wide)


@dataclass(frozen=True)
class ServingCase:
    """A run turned into a deployment of one worker, with the load that worker carries."""

    run: SiliconRun
    deployment: Deployment          # one worker (an agg replica, or one decode worker of a disagg run)
    concurrency: float              # requests on that worker
    prefill_in_decode: bool         # prompts share the worker's steps (agg) or not (a disagg decode worker)
    assumptions: tuple[str, ...]
    batch_cap: int | None = None    # running requests the engine admits per attention rank (the run's batch size)

    @property
    def running_per_rank(self) -> float:
        """Requests decoding on one attention rank: the clients, unless the engine's batch cap holds some back."""
        seqs = self.concurrency / self.deployment.attn_dp
        return seqs if self.batch_cap is None else min(seqs, float(self.batch_cap))

    @property
    def spread_arrivals(self) -> bool:
        """True where the run's client drew each request's lengths (`harness.lengths_note`) and prompts share the
        worker's steps: its closed-loop clients then finish one by one and come back alone, not as cohorts."""
        return self.prefill_in_decode and lengths_note(self.run.harness, self.run.isl, self.run.osl) is not None

    @property
    def group(self) -> tuple:
        """Rows that differ only in concurrency share a group (one vectorized evaluation)."""
        return (self.run.model, self.run.system, self.deployment.__class__, _dep_key(self.deployment),
                self.prefill_in_decode, self.spread_arrivals)

    @property
    def pair(self) -> tuple[str, str]:
        """(system, engine): the unit left out in out-of-sample error."""
        return self.run.system, self.run.engine


def _dep_key(d: Deployment) -> tuple:
    return (d.tp, d.pp, d.ep, d.attn_dp, d.weights, d.expert_weights, d.kv, d.engine, d.input_tokens, d.output_tokens,
            d.overlap_comm, d.spec)


def kv_rule(run: SiliconRun) -> tuple[str, str]:
    """The KV precision of a run (`kv_default` on its stated KV, engine and weights)."""
    return kv_default(run.kv, run.engine, run.gemm_weights or run.weights)


def kv_default(kv: str | None, engine: str, weights: str | None) -> tuple[str, str]:
    """The KV precision a measurement does not state: FP8 where TensorRT-LLM serves an FP8/FP4 checkpoint (its
    quantized checkpoints carry an FP8 KV cache), else the engines' default 'auto' = the model's bf16."""
    if kv:
        return kv, f"KV: {kv} (stated)"
    if engine == "trtllm" and weights in LOW_PRECISION:
        return "fp8", "KV: not stated; FP8, as TensorRT-LLM pairs FP8/FP4 checkpoints with an FP8 KV cache (rule)"
    return "bf16", "KV: not stated; bf16, the engines' default 'auto' (rule)"


def _squared_layout(pool: Pool, model, run: SiliconRun) -> tuple[int, int, int] | None:
    """(tp, attention DP, ep) where a row writes its width squared, N GPUs written as N^2: tp x attention_dp = N^2 with
    moe_tp = moe_ep = N (tp or attention_dp N^2, the other 1), or tp = attention_dp = N with moe_tp 1 and
    moe_ep = N^2; and either its id names the layout tpN_epN or N^2 GPUs would leave the system's scale-up domain.
    The source's 2026-04-06 rows so written are named tpN_epN, and its 2026-03-25 rows write the same named layouts
    as tp N, moe_tp 1, moe_ep N with the same measured speed (gpt-oss-120b on H200, tp8_ep8, 8 clients, 1k/8k: TPOT
    5.27 ms there, 5.23 ms here; MiniMax-M2.5 on H100, tp4_ep4, 4 clients, 1k/1k: 10.12 and 10.09 ms); the unnamed
    rows of the db-dump show the first pattern (16 and 64 'GPUs' on 8-GPU B200 and H200 nodes). Every InferenceX row
    (harness inferencex) so written is read this way, named or not: its single-node configs run on `tp` GPUs whatever
    their `ep` and `dp-attn` (each launch script passes --tensor-parallel-size $TP, or --data-parallel-size $TP with
    tensor parallelism 1 under DP attention: benchmarks/single_node/minimaxm2.5_fp4_b200.sh at 79bd988e9), and the
    unnamed MiniMax-M2.5 B200 vLLM rows written tp 2 x attention_dp 2 with moe_ep 4 (measured 2026-04-03 to 04-22)
    come from configs whose only 2-GPU-wide entries are {tp: 2, ep: 2} (.github/configs/nvidia-master.yaml at
    bddbf4031 and 79bd988e9); their named twins (tp2_ep2) are already read as 2 GPUs. An ordinary layout such as
    tp 4 with moe_tp 2 x moe_ep 2 on one node, unnamed and from another harness, stands."""
    if not model.is_moe or not pool.moe_ep or not pool.moe_tp:
        return None
    tp, adp, mtp, mep = pool.tp, pool.attention_dp, pool.moe_tp, pool.moe_ep
    side = math.isqrt(tp * adp)
    if side < 2 or side * side != tp * adp:
        return None
    if mtp == mep == side and (tp, adp) in ((side * side, 1), (1, side * side)):
        layout = (side, 1, side) if tp > 1 else (1, side, side)
    elif tp == adp == side and mtp == 1 and mep == side * side:
        layout = (side, 1, side)
    else:
        return None
    named = re.search(rf"_tp{side}(?:_0)?_ep{side}(?:_|$)", run.id) is not None
    up = catalog()[run.system].link("scale_up")
    beyond = up is not None and 0 < up.domain_chips < side * side
    return layout if named or beyond or run.harness == INFERENCEX else None


def _layout(pool: Pool, model, run: SiliconRun) -> tuple[int, int, int, list[str]]:
    """(tp, attention DP, ep) of one worker; aiconfigurator writes moe_tp x moe_ep = tp x attention_dp."""
    notes = []
    tp, adp = pool.tp, pool.attention_dp
    ep = pool.moe_ep or 1
    squared = _squared_layout(pool, model, run)
    if squared:
        notes.append(f"tp {tp} x attention_dp {adp} with moe_tp {pool.moe_tp} x moe_ep {pool.moe_ep}: read as "
                     f"{squared[0] * squared[1]} GPUs, tp {squared[0]}, attention_dp {squared[1]}, expert parallelism "
                     f"{squared[2]}, the layout the source names tp{squared[2]}_ep{squared[2]} (rule)")
        tp, adp, ep = squared
    if not model.is_moe:
        ep = 1
    elif (tp * adp) % ep:
        notes.append(f"moe_ep {ep} does not divide tp x attention_dp {tp * adp}; experts read as tensor-parallel (rule)")
        ep = 1
    expert = next((layer.ffn for layer in model.layers if isinstance(layer.ffn, MoE)), None)
    if expert is not None and ep == 1 and expert.expert_params / (3 * model.hidden_size) < TILE_COLUMNS * tp * adp:
        # an expert's intermediate width split below one tensor-core tile per chip is not a layout engines run (and
        # the stated concurrency's KV would not fit under tensor-parallel attention): the source writes the GPU
        # count as tp; read as expert parallelism over those GPUs, with attention data parallelism
        notes.append(f"moe_tp {tp * adp} with moe_ep 1 would split each expert's "
                     f"{expert.expert_params // (3 * model.hidden_size)}-wide intermediate below one "
                     f"{TILE_COLUMNS}-column tile per GPU: read as expert parallelism {tp * adp} with attention data "
                     f"parallelism {tp * adp} (rule)")
        ep, adp, tp = tp * adp, tp * adp, 1
    heads = min((layer.mixer.n_heads for layer in model.layers if hasattr(layer.mixer, "n_heads")), default=tp)
    if heads % tp:
        notes.append(f"tp {tp} does not divide the model's {heads} attention heads: read as attention data parallelism "
                     f"{tp * adp} with tp 1 on the same chips (rule)")
        adp, tp = tp * adp, 1
    return tp, adp, ep, notes


def _redundant_slots(model, ep: int) -> tuple[int, int]:
    """(routed experts, redundant slots that make ep divide them)."""
    experts = next((layer.ffn.n_experts for layer in model.layers if isinstance(layer.ffn, MoE)), 0)
    return experts, (-experts % ep if experts else 0)


def _worker(run: SiliconRun, pool: Pool, model, tp: int, adp: int, ep: int, kv: str, batch: int) -> Deployment:
    """One worker as a deployment; its lengths are the mean of what the run's client sent (`harness.mean_lengths`)."""
    isl, osl = mean_lengths(run.harness, run.isl, run.osl)
    dep = Deployment(tp=tp, pp=pool.pp, attn_dp=adp, ep=ep, weights=run.gemm_weights or run.weights,
                     expert_weights=run.moe_weights if model.is_moe else None, kv=kv, engine=run.engine,
                     batch=max(1, batch), input_tokens=isl, output_tokens=osl, overlap_comm=ep > 1,
                     redundant_experts=_redundant_slots(model, ep)[1])
    check_against_model(model, dep)
    return dep


def pool_deployment(run: SiliconRun, pool: Pool, model, kv: str) -> Deployment:
    """One worker of `pool` (a disaggregated run's prefill workers, say) as a deployment, by the layout rules."""
    tp, adp, ep, _ = _layout(pool, model, run)
    return _worker(run, pool, model, tp, adp, ep, kv, (pool.batch_size or 1) * adp)


def serving_case(run: SiliconRun) -> ServingCase:
    """The deployment of one worker of `run` (agg: the replica; disagg: one decode worker)."""
    model = catalog_model(run.model)
    pool = run.agg if run.agg is not None else run.decode
    if pool is None:
        raise TokensimError(f"{run.id}: no worker layout")
    if run.agg is not None:
        why = multinode_disaggregated(run.harness, run.system, run.model, pool.chips_per_worker)
        if why:
            raise TokensimError(f"{run.id}: {why}")
    tp, adp, ep, notes = _layout(pool, model, run)
    kv, kv_note = kv_rule(run)
    notes.append(kv_note)
    if run.agg is not None:
        concurrency = run.concurrency / (pool.workers or 1)     # one replica's clients (serving_rows.silicon_run)
    elif pool.workers:
        concurrency = run.concurrency / pool.workers
        notes.append(f"decode worker load: concurrency {run.concurrency} over {pool.workers} decode workers")
    elif pool.batch_size:
        concurrency = float(pool.batch_size * adp)
        notes.append("decode worker load: decode workers not stated; decode_batch_size x attention_dp (rule)")
    else:
        raise TokensimError(f"{run.id}: decode worker count and decode batch size not stated (the load on a decode "
                            f"worker is unknown)")
    experts, redundant = _redundant_slots(model, ep)
    if redundant:
        notes.append(f"ep {ep} does not divide the {experts} routed experts: {redundant} redundant expert slots fill "
                     f"every GPU's share, as expert-parallel load balancers place them (rule)")
    dep = _worker(run, pool, model, tp, adp, ep, kv, math.ceil(concurrency))
    implied = harness_speculation(run.image, run.engine, adp, run.measured)
    if implied is None and run.engine == "sglang" and run.agg is not None:
        mtp = sglang_mtp(run.harness, run.image, run.model, run.system, run.weights, run.measured, tp, run.isl,
                         run.osl, max(1, int(round(concurrency))))
        if mtp is not None:
            notes.append(sglang_mtp_note(mtp))
    if implied is not None:
        dep = replace(dep, spec=implied[0])
        notes.append(implied[1])
    fused = (launch_fusions(run.harness, run.engine, run.model, run.system, run.weights, run.measured, tp, adp, run.isl,
                            run.osl, max(1, int(round(concurrency))), apply=APPLY_LAUNCH_FUSIONS)
             if run.agg is not None else None)
    if fused is not None:
        dep = replace(dep, fusions=fused[0])
        notes.append(fused[1])
    launch = harness_launch(run, dep, concurrency, run.agg is not None)
    if launch is not None:
        notes.append(launch.note)
    drawn = lengths_note(run.harness, run.isl, run.osl)
    if drawn:
        notes.append(drawn)
    cap = pool.batch_size if run.agg is not None else None
    if cap is not None and cap < concurrency / adp:
        # a replica with more clients than batch_size x attention_dp, not a whole multiple of it (a whole multiple is
        # that many replicas: serving_rows.silicon_run); no shipped run. The engine is taken to run every client, as
        # measured TTFTs of such runs show no queue behind a full batch (0.1-1 s where one would wait whole requests)
        notes.append(f"concurrency {concurrency:g} exceeds batch_size {cap} x attention_dp {adp}: every client runs "
                     f"(measured TTFTs of such runs show no queue behind a full batch) (rule)")
        cap = math.ceil(concurrency / adp)
    return ServingCase(run, dep, concurrency, run.agg is not None, tuple(notes), cap)


def harness_launch(run: SiliconRun, dep: Deployment, concurrency: float, agg: bool) -> Launch | None:
    """The scheduler settings an aggregated run's harness launched its engine with, the KV cache's memory fraction
    where the launch sets it, and the note that says so (`validate.harness.sglang_launch`, `trtllm_launch`,
    `vllm_launch`); None where the harness's launch is not known. InferenceX's MTP runs keep their own limits
    (`harness_limits`)."""
    if not agg:
        return None
    clients = max(1, int(round(concurrency)))
    if run.engine == "sglang":
        found = sglang_launch(run.harness, run.model, run.system, run.weights, run.engine_version, dep.tp, run.isl,
                              run.osl, clients, image=run.image, measured=run.measured)
        return None if found is None else Launch(found[0], None, found[1])
    if run.engine == "trtllm" and mtp_drafts(run.image, run.engine, dep.attn_dp, run.measured) is None:
        return trtllm_launch(run.harness, run.model, run.system, run.weights, run.measured, dep.tp, dep.attn_dp,
                             run.isl, run.osl, clients)
    if run.engine == "vllm":
        return vllm_launch(run.harness, run.model, run.system, run.weights, run.measured, dep.tp, dep.attn_dp,
                           run.isl, run.osl, clients)
    return None


def steady_tpot(cases: list[ServingCase], constants: ConstantsTable | None = None) -> np.ndarray:
    """Steady-state TPOT of every case (seconds), evaluated group by group as arrays over concurrency."""
    out = np.full(len(cases), np.nan)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        groups[c.group].append(i)
    for idx in groups.values():
        first = cases[idx[0]]
        model, hw = catalog_model(first.run.model), catalog()[first.run.system]
        dep = first.deployment
        ctx = make_context(model, hw, dep, for_hardware(hw, dep.engine, constants))
        seqs = np.array([cases[i].running_per_rank for i in idx])     # decoding sequences per attention rank
        step = (cohort_step_s(ctx, seqs, dep.input_tokens, dep.output_tokens, dep.engine, first.spread_arrivals)
                if first.prefill_in_decode else _step_s(ctx, seqs, np.zeros_like(seqs), dep))
        out[idx] = step / tokens_per_step(dep)
    return out


LIGHT_LOAD_CLIENTS = 4      # runs with at most this many clients per replica have (almost) no queue


def light_ttft(cases: list[ServingCase], constants: ConstantsTable | None = None, steps=None) -> np.ndarray:
    """TTFT (seconds) of lightly loaded aggregated runs in their closed-loop steady state, the way the simulator
    serves them: requests admitted in one prefill step finish together, so g = u / isl prompts (u: the tokens one
    prefill step takes, `prefill_step_tokens`) return as a cohort while the m = clients - g others decode. The
    cohort arrives as a step starts that was scheduled before it arrived (vLLM's async scheduling, the overlap
    schedulers of SGLang and TensorRT-LLM), waits for that step (m decodes; none when the engine was idle), and gets
    its first tokens from the next (g prompts beside the m decodes); the engine's request path
    (request_overhead_s) comes on top. `steps` (one per case): how many such waits and prefill steps the simulator
    finds a first token takes in that run (chunked prompts can span two steps; `tokensim fit` measures it on the
    simulator at its current constants), default 1. Where the client drew each request's lengths
    (`ServingCase.spread_arrivals`) the clients do not move in cohorts: a prompt arrives alone (g = 1) while the
    m = clients - 1 others decode."""
    out = np.full(len(cases), np.nan)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        groups[c.group].append(i)
    for idx in groups.values():
        first = cases[idx[0]]
        model, hw = catalog_model(first.run.model), catalog()[first.run.system]
        dep = first.deployment
        k = for_hardware(hw, dep.engine, constants)
        ctx = make_context(model, hw, dep, k)
        seqs = np.array([cases[i].running_per_rank for i in idx])
        prompts = (np.minimum(seqs, 1.0) if first.spread_arrivals
                   else np.minimum(prefill_step_tokens(seqs, dep.input_tokens, dep.engine) / dep.input_tokens, seqs))
        others = seqs - prompts
        decodes, step = _steps_s(ctx, others, (np.zeros_like(seqs), prompts), dep)
        wait = np.where(others > 0, decodes, 0.0)
        scale = 1.0 if steps is None else np.asarray([steps[i] for i in idx], dtype=float)
        out[idx] = k.request_overhead_s + scale * (wait + step)
    return out


# The token budget aiconfigurator's generator gives each engine beyond the running batch (its rule files
# src/aiconfigurator/generator/rule_plugin/benchmark/{vllm,sglang,trtllm}.rule at commit 095f58a51c4c:
# max_num_tokens / max_num_batched_tokens = batch + isl + 1,500; SGLang max_prefill_tokens = isl + 1,500)
PREFILL_SLACK_TOKENS = 1500


def prefill_step_tokens(seqs, isl: int, engine: str):
    """Prompt tokens one prefill step takes in a closed-loop run of `seqs` clients: every prompt that has arrived,
    up to the budget; TensorRT-LLM (no chunked prefill in these runs) only whole prompts."""
    budget = isl + PREFILL_SLACK_TOKENS
    if engine == "trtllm":
        budget = isl * (budget // isl)
    return np.minimum(np.asarray(seqs, dtype=float) * isl, budget)


def cohort_step_s(ctx, seqs: np.ndarray, isl: int, osl: int, engine: str, spread: bool = False) -> np.ndarray:
    """Mean step time a request sees while it decodes, in a closed loop of `seqs` clients sending identical requests.

    A client sends its next request when the last one ends, so requests admitted in the same prefill step finish in
    the same step and return together: the clients move in k = seqs x isl / u cohorts, u the tokens one prefill
    step takes (`prefill_step_tokens`). In one request's osl decode steps the k - 1 other cohorts are prefilled,
    each in one step beside the decodes; its own cohort's prefill belongs to its TTFT. So a share
    g = (k - 1) / osl of the steps carries u prompt tokens and the rest decode only (g >= 1: prefill in every step).
    Pricing every step with the mean prompt tokens instead would overstate a MoE step (its expert reads are concave
    in tokens: Qwen3-235B on 4 H100 at 4 clients, 1,024 in / 128 out, 36 ms against 17 ms) and charge lockstepped
    clients (k = 1) for prefills that never interrupt them.

    `spread`: the client drew each request's lengths, so the clients finish one by one and each of the seqs - 1
    others sends its next prompt alone once in the request's osl decode steps: a share a = (seqs - 1) / steps of
    the steps carries a prompt (a >= 1: every step carries a prompts, as many as the step's budget takes)."""
    u = prefill_step_tokens(seqs, isl, engine)
    steps = osl / tokens_per_step(ctx.dep)          # decode steps of one request
    if spread:
        arrivals = np.maximum(np.asarray(seqs, dtype=float) - 1.0, 0.0) / steps
        share, prompts = np.clip(arrivals, 0.0, 1.0), np.clip(arrivals, 1.0, np.maximum(u / isl, 1.0))
    else:
        share, prompts = np.clip((seqs * isl / u - 1.0) / steps, 0.0, 1.0), u / isl
    decode_only, with_prefill = _steps_s(ctx, seqs, (np.zeros_like(seqs), prompts), ctx.dep)
    return (1.0 - share) * decode_only + share * with_prefill


def _steps_s(ctx, seqs, prompts: tuple, dep) -> list[np.ndarray]:
    """`_step_s` of `seqs` decodes beside each array of `prompts`, priced in one call of the cost model: each
    element's arithmetic is the same as in its own call (every op is elementwise over the batch arrays), and one call
    of arrays twice as long costs about what one call costs (the objective of `tokensim fit` makes thousands)."""
    seqs = np.asarray(seqs, dtype=float)
    n = seqs.size
    both = _step_s(ctx, np.tile(seqs.ravel(), len(prompts)),
                   np.concatenate([np.broadcast_to(np.asarray(p, dtype=float), seqs.shape).ravel() for p in prompts]),
                   dep)
    return [both[i * n:(i + 1) * n].reshape(seqs.shape) for i in range(len(prompts))]


def _step_s(ctx, seqs, prompts, dep) -> np.ndarray:
    """Wall time of a step of `seqs` decodes beside `prompts` prompts per attention rank (their means; the busiest
    rank sets the step, Batch.on_busiest_rank). Under speculative decoding (dep.spec) a step
    verifies 1 + k tokens per sequence and runs k draft passes (it yields `tokens_per_step(dep)` tokens each)."""
    isl, osl = dep.input_tokens, dep.output_tokens
    spec = dep.spec
    q = 1.0 + spec.draft_tokens if spec is not None else 1.0
    ranks = dep.attn_dp
    b = Batch.on_busiest_rank(ranks, seqs * ranks, prompts * ranks, query_per_decode=q,
                              decode_context=isl + osl / 2.0, prefill_tokens=float(isl), prefill_position=isl / 2.0)
    t = step_cost(ctx, b).latency_s
    if spec is not None:
        t = t + spec.draft_tokens * draft_step_s(ctx, spec, seqs)
    return np.broadcast_to(t, np.shape(seqs))


def tokens_per_step(dep: Deployment) -> float:
    """Tokens a decoding sequence gains per step: 1, or 1 + its expected accepted drafts."""
    return dep.spec.expected_tokens_per_step if dep.spec is not None else 1.0


def build_cases(runs: list[SiliconRun]) -> tuple[list[ServingCase], list[tuple[str, str]]]:
    """Cases for every run the rules can lay out; the others with the reason."""
    cases, skipped = [], []
    for r in runs:
        try:
            cases.append(serving_case(r))
        except TokensimError as exc:
            skipped.append((r.id, str(exc)))
    return cases, skipped


def with_engine(case: ServingCase, engine: str) -> ServingCase:
    return replace(case, deployment=replace(case.deployment, engine=engine))
