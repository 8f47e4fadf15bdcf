"""How far two measurements of one stated configuration differ: the floor under any model's error on the serving runs.

silicon_dev.csv measures many configurations more than once (the same model, system, engine, lengths, clients and
layout in two source files, or re-run a week apart). Where two such runs differ, no prediction can match both: the
spread between them bounds how close a model can come. Runs copied verbatim between files are counted apart
(identical copies), since they say nothing about repeatability.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from itertools import combinations

from tokensim.validate.load import error_stats

IDENTICAL = 1e-9     # relative difference below which two runs are one run copied


def pair_differences(runs: Iterable[tuple[Hashable, float]]) -> tuple[list[float], int]:
    """(|a / b - 1| over every pair of runs sharing a key whose values differ, the number of identical pairs), each
    pair ordered so that a >= b (the larger over the smaller)."""
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for key, value in runs:
        groups[key].append(value)
    differences, identical = [], 0
    for values in groups.values():
        for a, b in combinations(values, 2):
            hi, lo = max(a, b), min(a, b)
            d = hi / lo - 1.0
            if d <= IDENTICAL:
                identical += 1
            else:
                differences.append(d)
    return differences, identical


def setup_key(case) -> tuple:
    """What a silicon run states about itself once read, but its load: model, system, engine, lengths and the worker's
    layout and precisions."""
    d = case.deployment
    return (case.run.model, case.run.system, case.run.engine, case.run.isl, case.run.osl, d.tp, d.pp, d.attn_dp, d.ep,
            d.weights, d.expert_weights, d.kv, case.prefill_in_decode)


def case_key(case) -> tuple:
    """`setup_key` with the run's clients and batch cap: all a silicon run states about itself once read."""
    return (*setup_key(case), case.concurrency, case.batch_cap)


def repeat_spread(cases) -> dict:
    """For the serving cases measured more than once: how many configurations and runs, how many pairs are verbatim
    copies, and the spread |a / b - 1| of TTFT and TPOT over the pairs that differ (median and p90)."""
    keyed = [(case_key(c), c) for c in cases]
    counts: dict[tuple, int] = defaultdict(int)
    for key, _ in keyed:
        counts[key] += 1
    repeated = [(key, c) for key, c in keyed if counts[key] > 1]
    ttft, identical = pair_differences((key, c.run.ttft_s) for key, c in repeated)
    tpot, _ = pair_differences((key, c.run.tpot_s) for key, c in repeated)
    return {"configurations": sum(1 for n in counts.values() if n > 1), "runs": len(repeated),
            "identical_pairs": identical, "ttft": error_stats(ttft), "tpot": error_stats(tpot)}
