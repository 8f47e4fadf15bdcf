"""Predict the measured quantity of a Case through the same predict path as `tokensim predict`."""
from __future__ import annotations

from dataclasses import replace

from ..errors import TokensimError
from ..hardware.catalog import catalog
from ..layout import check_against_model, fit_error
from ..model.catalog import catalog_model
from ..predictor import Prediction, offline_throughput, predict_deployment
from .rules import Case

PER_CHIP = "throughput_tps_per_chip"


def _throughput(case: Case, p: Prediction, offline: bool) -> float:
    model, hw = catalog_model(case.model), catalog()[case.hardware]
    total = offline_throughput(model, hw, p.deployment, p) if offline else p.throughput_tokens_per_s
    return total / p.chips if case.row.metric == PER_CHIP else total


def _frontier(case: Case) -> tuple[float, str, object]:
    """Best throughput per chip over layouts of the node whose per-user speed still meets the target."""
    model, hw = catalog_model(case.model), catalog()[case.hardware]
    chips = case.deployment.dp * case.deployment.tp
    best, how, best_dep = 0.0, "", None
    for tp in (1, 2, 4, 8, 16):
        if chips % tp:
            continue
        dp = chips // tp
        for ep in sorted({1, chips} if model.is_moe else {1}):
            dep = replace(case.deployment, tp=tp, dp=dp, ep=ep, overlap_comm=ep > 1, batch=dp)
            try:
                check_against_model(model, dep)
            except TokensimError:
                continue
            lo, hi = dp, dp * 4096
            if fit_error(model, hw, dep) is not None:
                continue
            if predict_deployment(model, hw, dep).tokens_per_s_per_user < case.target_tps_user:
                continue
            while hi - lo > max(1, lo // 64):
                mid = (lo + hi) // 2
                d = replace(dep, batch=mid)
                ok = fit_error(model, hw, d) is None and predict_deployment(model, hw, d).tokens_per_s_per_user >= case.target_tps_user
                lo, hi = (mid, hi) if ok else (lo, mid)
            d = replace(dep, batch=lo)
            p = predict_deployment(model, hw, d)
            value = offline_throughput(model, hw, d, p) / p.chips
            if value > best:
                best, how, best_dep = value, f"tp {tp} x dp {dp}, ep {ep}, batch {lo}", d
    if best == 0.0:
        raise TokensimError(f"no layout on {chips} x {hw.name} reaches {case.target_tps_user} tok/s/user")
    return best, how, best_dep


def freeze(case: Case) -> Case:
    """A frontier case pinned at the operating point the current constants choose (for fitting)."""
    if case.mode != "frontier":
        return case
    _, how, dep = _frontier(case)
    return replace(case, deployment=dep, mode="offline_throughput", assumptions=case.assumptions + (f"frontier point: {how}",))


def predict_case(case: Case) -> tuple[float, tuple[str, ...]]:
    """The predicted value of the row's metric, and any notes added while predicting."""
    if case.mode == "frontier":
        value, how, _ = _frontier(case)
        return value, (f"frontier point: {how}",)
    model, hw = catalog_model(case.model), catalog()[case.hardware]
    p = predict_deployment(model, hw, case.deployment)
    if case.mode == "per_user":
        return p.tokens_per_s_per_user, ()
    if case.mode == "ttft":
        if case.deployment.batch > 1:
            return p.ttft_s + p.time_per_output_token_s, ("TTFT under concurrency: prefill plus one decode step of the running batch (rule)",)
        return p.ttft_s, ()
    if case.mode == "decode_throughput":
        return _throughput(case, p, offline=False), ()
    return _throughput(case, p, offline=True), ("throughput: prefill of every prompt plus all decode steps (offline rule)",)
