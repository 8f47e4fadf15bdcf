"""Where the simulator's error on measured serving runs lies: the same errors grouped by the load on each scheduler
(a run's clients per attention rank of one worker, the light-load rule's count) and by model, so that a median over
thousands of runs says which regime or model it hides."""
from __future__ import annotations

import math

import numpy as np

from tokensim.validate.load import error_stats
from tokensim.validate.repeats import setup_key
from tokensim.validate.serving import LIGHT_LOAD_CLIENTS

# clients per attention rank, upper bounds of each regime (the last is open): light load (the light-load TTFT rule's
# bound: a few requests in flight, TTFT near a lone prefill), a partly filled batch, a full batch of the size most
# benchmarks end at, and beyond it
LOAD_REGIMES = ((LIGHT_LOAD_CLIENTS, f"1-{LIGHT_LOAD_CLIENTS} clients"), (32, f"{LIGHT_LOAD_CLIENTS + 1}-32 clients"),
                (128, "33-128 clients"), (math.inf, "over 128 clients"))
MIN_LOADS = 3      # runs of one configuration at different loads needed for its own median to mean something


def load_regime(clients_per_rank: float) -> str:
    """The regime name of a run with `clients_per_rank` concurrent clients on each attention rank."""
    if not (clients_per_rank > 0 and math.isfinite(clients_per_rank)):
        raise ValueError(f"clients_per_rank: {clients_per_rank!r}; expected a finite number > 0")
    return next(name for top, name in LOAD_REGIMES if clients_per_rank <= top)


def _stats(errors: list[float]) -> dict:
    """`error_stats` (rows, median and p90 of |error|) and the median signed error, over the finite errors."""
    a = np.asarray(errors, dtype=float)
    a = a[np.isfinite(a)]
    return {**error_stats(a), "median_signed_error": float(np.median(a)) if a.size else None}


def group_errors(keys: list[str], ttft_errors, tpot_errors) -> dict[str, dict]:
    """Per key: the group's runs (`runs`, finite or not) and, for TTFT and for TPOT, the runs with a finite error
    (`rows`), the median and p90 of |error| and the median signed error (predicted / measured - 1; negative: too
    early or too fast); keys in first-seen order."""
    ttft, tpot = list(ttft_errors), list(tpot_errors)
    if not len(keys) == len(ttft) == len(tpot):
        raise ValueError(f"keys, ttft_errors, tpot_errors: lengths {len(keys)}, {len(ttft)}, {len(tpot)}; expected equal")
    groups: dict[str, tuple[list[float], list[float]]] = {}
    for k, a, b in zip(keys, ttft, tpot, strict=True):
        g = groups.setdefault(k, ([], []))
        g[0].append(a)
        g[1].append(b)
    return {k: {"runs": len(a), "ttft": _stats(a), "tpot": _stats(b)} for k, (a, b) in groups.items()}


def simulated_breakdown(results) -> dict[str, dict]:
    """Simulated serving runs (`LoadResult`s) grouped by load regime (in LOAD_REGIMES order) and by model (by name),
    and their error split into each configuration's level and its change with load (`level_and_load`)."""
    results = list(results)
    ttft = [r.ttft_error for r in results]
    tpot = [r.tpot_error for r in results]
    by_load = group_errors([load_regime(r.case.concurrency / r.case.deployment.attn_dp) for r in results], ttft, tpot)
    by_model = group_errors([r.case.run.model for r in results], ttft, tpot)
    order = [name for _, name in LOAD_REGIMES]
    return {"by_load": {k: by_load[k] for k in order if k in by_load},
            "by_model": {k: by_model[k] for k in sorted(by_model)},
            "level_and_load": level_and_load([configuration_key(r.case) for r in results], ttft, tpot)}


def configuration_key(case) -> tuple:
    """A serving run's configuration less its load (`repeats.setup_key`: without the clients and the batch cap, which a
    generator sets from them), and the harness that measured it."""
    return (*setup_key(case), case.run.harness)


def _median_abs(logs: np.ndarray) -> float | None:
    return float(np.median(np.abs(np.expm1(logs)))) if logs.size else None


def level_and_load(keys: list, ttft_errors, tpot_errors) -> dict:
    """How much of the error is each configuration's level and how much its change with load: over the configurations
    measured at MIN_LOADS or more loads (runs sharing a key), the median |error| of their runs as they are, and again
    after each configuration's median log error (its level: ln(predicted / measured) shared by all its loads) is
    taken out. What is left is the part that varies with the load within one configuration. Runs with a non-finite
    error are left out of both."""
    out: dict = {}
    for metric, errors in (("ttft", ttft_errors), ("tpot", tpot_errors)):
        logs: dict = {}
        for k, e in zip(keys, errors, strict=True):
            if math.isfinite(e) and e > -1:
                logs.setdefault(k, []).append(math.log1p(e))
        kept = [np.asarray(v) for v in logs.values() if len(v) >= MIN_LOADS]
        as_is = np.concatenate(kept) if kept else np.zeros(0)
        within = np.concatenate([v - np.median(v) for v in kept]) if kept else np.zeros(0)
        out[metric] = {"configurations": len(kept), "runs": int(as_is.size), "as_is_median_abs_error": _median_abs(as_is),
                       "load_only_median_abs_error": _median_abs(within)}
    return out


__all__ = ["LOAD_REGIMES", "configuration_key", "group_errors", "level_and_load", "load_regime", "simulated_breakdown"]
