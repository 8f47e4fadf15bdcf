"""The two units of work `tokensim fit` repeats, timed: one evaluation of the objective on the rows a constant moves
(the golden-section search makes 13 per constant per sweep in sample, each split over the processes; 12 per refit out
of sample, each refit in one process), and the
serving runs simulated at one set of constants (three full passes in sample, each pair's runs again out of sample).

Run: python benchmarks/fit.py [--runs N] [--workers W]
Both simulation passes are timed by the wall clock (what the fit waits for); the one-process pass also by its CPU
time, which a busy machine does not inflate.
"""
from __future__ import annotations

import argparse
import time

from tokensim.validate.fit import FITTED_LEVELS, PARAMS, buildable, pinned, simulate_runs, start_values, table_for
from tokensim.validate.fit_report import serving_cases
from tokensim.validate.objective import FitData, affected, loss
from tokensim.validate.pool import available_cpus
from tokensim.validate.run import shipped_measurements
from tokensim.validate.split_loss import SplitLoss


def main(runs: int, workers: int) -> None:
    cases = serving_cases(None)
    data = FitData.of(buildable(shipped_measurements()), cases)
    values = start_values()
    current = pinned(data, table_for(values))
    start, n_rows, serial = time.process_time(), 0, []
    for p in PARAMS:
        rows = affected(p, current, FITTED_LEVELS)
        n_rows += len(rows)
        serial.append(loss(rows, table_for(values)))
    took = time.process_time() - start
    print(f"objective: one evaluation per constant ({len(PARAMS)} constants, {n_rows} rows in all): {took:.1f} s CPU, "
          f"{took / len(PARAMS):.2f} s per constant")
    if workers > 1:
        with SplitLoss(current, FITTED_LEVELS, workers) as split:
            for p in PARAMS:           # a sweep's first evaluation of a constant also picks its rows in each process
                split.loss(p, table_for(values))
            wall = time.perf_counter()
            same = all(split.loss(p, table_for(values)) == v for p, v in zip(PARAMS, serial, strict=True))
            wall = time.perf_counter() - wall
        print(f"objective: the same evaluations split over {workers} processes (as the fit's sweeps run them): "
              f"{wall:.1f} s wall, {took / wall:.2f}x the one process's CPU time "
              f"({'the same losses' if same else 'DIFFERENT losses'})")
    sample = cases[:: max(1, len(cases) // runs)]
    table = table_for(values)
    wall, start = time.perf_counter(), time.process_time()
    one = simulate_runs(sample, table, workers=1)
    cpu, wall = time.process_time() - start, time.perf_counter() - wall
    print(f"simulation: {len(sample)} of {len(cases)} serving runs in one process: {wall:.1f} s wall, {cpu:.1f} s CPU "
          f"({cpu / len(sample) * 1e3:.0f} ms a run; all {len(cases)}: about {cpu / len(sample) * len(cases) / 60:.1f} min)")
    if workers > 1:
        pooled = time.perf_counter()
        many = simulate_runs(sample, table, workers=workers)
        pooled = time.perf_counter() - pooled
        print(f"simulation: the same runs in {workers} processes: {pooled:.1f} s wall, {wall / pooled:.2f}x the one "
              f"process ({'the same results' if many == one else 'DIFFERENT results'})")

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=176, help="serving runs to simulate (an even sample)")
    ap.add_argument("--workers", type=int, default=available_cpus(), help="processes for the second pass")
    a = ap.parse_args()
    main(a.runs, a.workers)
