"""Predict the measured quantity of a Case through the same predict path as `tokensim predict`."""
from __future__ import annotations

import re
from dataclasses import replace

from tokensim.deploy.deployment import Deployment
from tokensim.deploy.layout import check_against_model, fit_error
from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.prediction.predictor import Prediction, batch_prefill_s, offline_throughput, predict_deployment
from tokensim.specs.hardware.catalog import catalog
from tokensim.specs.model.catalog import catalog_model
from tokensim.validate.rules import Case

PER_CHIP = "throughput_tps_per_chip"


def counts_input_tokens(case: Case) -> bool:
    """InferenceX dashboards plot input + output tokens per GPU (process_result.py: tput_per_gpu =
    total_token_throughput / tp_size, github.com/SemiAnalysisAI/InferenceX); rows that say 'Output tput' don't."""
    return (bool(re.search(r"inferencex", case.row.provider_or_engine, re.I))
            and not re.search(r"output tput", case.row.notes, re.I))


def _throughput(case: Case, p: Prediction, offline: bool, constants: ConstantsTable | None = None) -> float:
    model, hw = catalog_model(case.model), catalog()[case.hardware]
    total = offline_throughput(model, hw, p.deployment, p, constants) if offline else p.throughput_tokens_per_s
    if counts_input_tokens(case):
        total *= (p.deployment.input_tokens + p.deployment.output_tokens) / p.deployment.output_tokens
    return total / p.chips if case.row.metric == PER_CHIP else total


def serving_speed(model, hw, dep, constants: ConstantsTable | None = None) -> tuple[float, Prediction] | None:
    """Per-user speed under continuous batching (decode plus the other users' prefills), or None if it doesn't fit."""
    if fit_error(model, hw, dep, constants) is not None:
        return None
    p = predict_deployment(model, hw, dep, constants=constants)
    if dep.batch <= 1:
        return p.tokens_per_s_per_user, p
    return offline_throughput(model, hw, dep, p, constants) / dep.batch, p


def _layout(case: Case, model, hw, tp: int, dp: int, adp: int, ep: int, batch: int, constants=None):
    """The case's deployment with this server layout, and its serving speed (None if invalid or too big)."""
    dep = replace(case.deployment, tp=tp, dp=dp, attn_dp=adp, ep=ep, overlap_comm=ep > 1, batch=batch, redundant_experts=0)
    try:
        check_against_model(model, dep)
    except TokensimError:
        return dep, None
    return dep, serving_speed(model, hw, dep, constants)


def _at_stated_concurrency(case: Case, constants: ConstantsTable | None = None) -> tuple[float, str, Deployment]:
    """The stated concurrency served by the server layout whose per-user speed is closest to the stated one."""
    import math
    model, hw = catalog_model(case.model), catalog()[case.hardware]
    layouts = [(tp, 1, 1) for tp in (1, 2, 4, 8)]
    if model.is_moe:
        layouts += [(tp, 1, tp) for tp in (2, 4, 8)] + [(1, 8, 8)]
    best = None
    for tp, adp, ep in layouts:
        dep, got = _layout(case, model, hw, tp, 1, adp, ep, case.row.batch or 1, constants)
        if got is None:
            continue
        gap = abs(math.log(got[0] / case.target_tps_user))
        if best is None or gap < best[0]:
            best = (gap, dep, got[1], f"tp {tp} x attention DP {adp}, ep {ep}, concurrency {case.row.batch}")
    if best is None and case.deployment.kv != "fp8" and not case.row.kv_precision:
        # unstated KV precision narrows to FP8 when the measured concurrency would not fit otherwise (rule)
        value, how, d = _at_stated_concurrency(replace(case, deployment=replace(case.deployment, kv="fp8")), constants)
        return value, how + "; KV narrowed to FP8: the stated concurrency does not fit at bf16 (rule)", d
    if best is None:
        raise TokensimError(f"no server layout of {hw.name} holds {case.row.batch} sequences")
    _, d, p, how = best
    value = offline_throughput(model, hw, d, p, constants) / p.chips
    if counts_input_tokens(case):
        value *= (d.input_tokens + d.output_tokens) / d.output_tokens
    return value, how, d


def _frontier(case: Case, constants: ConstantsTable | None = None) -> tuple[float, str, Deployment]:
    """Best throughput per chip over layouts of the node whose serving per-user speed still meets the target."""
    if case.row.batch is not None:
        return _at_stated_concurrency(case, constants)
    model, hw = catalog_model(case.model), catalog()[case.hardware]
    chips = case.deployment.chips
    target = case.target_tps_user
    best, how, best_dep = 0.0, "", None
    layouts = [(tp, chips // tp, 1, 1) for tp in (1, 2, 4, 8, 16) if chips % tp == 0]     # tp x replicas
    if model.is_moe:
        layouts += [(chips, 1, 1, chips), (1, 1, chips, chips)]                            # TP+EP, DP-attention+EP
    for tp, dp, adp, ep in layouts:
        dep, first = _layout(case, model, hw, tp, dp, adp, ep, dp * adp, constants)
        if first is None or target is None or first[0] < target:
            continue
        lo, hi = dp * adp, dp * adp * 4096
        while hi - lo > max(1, lo // 64):
            mid = (lo + hi) // 2
            got = serving_speed(model, hw, replace(dep, batch=mid), constants)
            lo, hi = (mid, hi) if got is not None and got[0] >= target else (lo, mid)
        d = replace(dep, batch=lo)
        p = predict_deployment(model, hw, d, constants=constants)
        value = offline_throughput(model, hw, d, p, constants) / p.chips
        if counts_input_tokens(case):
            value *= (d.input_tokens + d.output_tokens) / d.output_tokens
        if value > best:
            best, how, best_dep = value, f"tp {tp} x attention DP {adp} x replicas {dp}, ep {ep}, batch {lo}", d
    if best == 0.0 or best_dep is None:
        raise TokensimError(f"no layout on {chips} x {hw.name} reaches {target} tok/s/user")
    return best, how, best_dep


def freeze(case: Case, constants: ConstantsTable | None = None) -> Case:
    """A frontier case pinned at the operating point the current constants choose (for fitting)."""
    if case.mode != "frontier":
        return case
    try:
        _, how, dep = _frontier(case, constants)
    except TokensimError:
        return case
    return replace(case, deployment=dep, mode="offline_throughput", assumptions=case.assumptions + (f"frontier point: {how}",))


def kv_limited(model, hw, dep: Deployment, constants: ConstantsTable | None = None) -> tuple[Deployment, str | None]:
    """`dep` as stated when its sequences fit at full length; else the largest batch (a whole number per attention
    rank) that fits, with a note: a paged KV cache admits the requests it can hold and the others wait, so a
    measured run at a concurrency the memory cannot hold ran at this one (rule). Unchanged when not even one
    sequence per rank fits (the fit error is then raised where the deployment is predicted)."""
    err = fit_error(model, hw, dep, constants)
    if err is None:
        return dep, None
    step = max(1, dep.attn_dp)
    lo, hi = 0, dep.batch // step            # lo ranks' worth fits (0: none checked yet), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fit_error(model, hw, replace(dep, batch=mid * step), constants) is None else (lo, mid)
    if lo == 0:
        return dep, None
    need = str(err).split(": ", 1)[-1].split(" against")[0]
    return replace(dep, batch=lo * step), (f"the stated {dep.batch} sequences do not fit at full length ({need}); "
                                           f"the engine holds {lo * step} at once and the rest wait: a paged KV cache "
                                           f"admits what it can hold (rule)")


def predict_case(case: Case, constants: ConstantsTable | None = None) -> tuple[float, tuple[str, ...]]:
    """The predicted value of the row's metric, and any notes added while predicting."""
    value, notes, _ = predict_case_at(case, constants)
    return value, notes


def predict_case_at(case: Case, constants: ConstantsTable | None = None) -> tuple[float, tuple[str, ...], int]:
    """`predict_case`, and the batch the row was predicted at: a frontier row's operating point (not the placeholder
    its case starts from), a row whose stated batch does not fit at the batch the memory holds, else the stated one.
    It sets the row's regime (validate.uncertainty.batch_regime)."""
    if case.mode == "frontier":
        value, how, dep = _frontier(case, constants)
        return value, (f"frontier point: {how}",), dep.batch
    model, hw = catalog_model(case.model), catalog()[case.hardware]
    if case.mode not in ("ttft", "ttft_online"):            # a queue changes TTFT; the other metrics run at capacity
        dep, note = kv_limited(model, hw, case.deployment, constants)
        if note is not None:
            value, notes, batch = predict_case_at(replace(case, deployment=dep), constants)
            return value, (note, *notes), batch
    batch = case.deployment.batch
    p = predict_deployment(model, hw, case.deployment, constants=constants)
    if case.mode == "per_user":
        if case.deployment.batch > 1:
            tput = offline_throughput(model, hw, p.deployment, p, constants)
            return tput / case.deployment.batch, ("per-user speed under continuous batching: the other users' prefills "
                                                  "run between decode steps (rule)",), batch
        return p.tokens_per_s_per_user, (), batch
    if case.mode in ("ttft", "ttft_online"):
        value, notes = p.ttft_s, tuple[str, ...]()
        if case.deployment.batch > 1:
            value += p.time_per_output_token_s
            notes = ("TTFT under concurrency: prefill plus one decode step of the running batch (rule)",)
        if case.mode == "ttft_online":
            value += for_hardware(hw, case.deployment.engine, constants).request_overhead_s
        return value, notes, batch
    if case.mode == "prefill_throughput":
        dep = p.deployment
        total = dep.batch * dep.input_tokens / batch_prefill_s(model, hw, dep, constants)
        return (total / p.chips if case.row.metric == PER_CHIP else total), (), batch
    if case.mode == "decode_throughput":
        return _throughput(case, p, offline=False, constants=constants), (), batch
    return (_throughput(case, p, offline=True, constants=constants),
            ("throughput: prefill of every prompt plus all decode steps (offline rule)",), batch)
