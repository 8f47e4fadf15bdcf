"""Simulated requests per second of wall time for the serving simulator (plain Python, one core).

The load: vLLM's scheduler at its `vllm serve` defaults (2,048 batched tokens, 256 sequences,
16-token blocks), Poisson arrivals at 90 % of the engine's capacity, every request 1,000 input
and 200 output tokens, and an AffineTimer shaped like Llama-3.1-8B on one H100 (5 ms per step,
20 us per token, 10 ns per token of attended context). The capacity is measured first with a
closed loop of 1,024 clients. Last, a sweep of 8 rates (10k requests each) through tokensim.sim.sweep
in one process and in a pool of 2: sweep points per second of wall time. Beside each run it prints its CPU time
in units of a fixed reference loop timed in the same process, since one machine's speed moved 2x between days.

Run: python benchmarks/simulate.py            (100k and 1M requests)
     python benchmarks/simulate.py 20000      (other sizes)
"""
from __future__ import annotations

import sys
import time

import numpy as np

from tokensim.prediction.serving import LoadSpec
from tokensim.sim import AffineTimer, ClosedLoop, EngineSpec, VllmScheduler, simulate, synthetic
from tokensim.sim.sweep import SweepPoint, run_sweep

TIMER = AffineTimer(fixed_s=0.005, per_token_s=2e-5, per_context_token_s=1e-8, per_seq_s=0.0)
SPEC = EngineSpec(VllmScheduler(), TIMER, kv_cache_tokens=2_000_000)
INPUT_TOKENS, OUTPUT_TOKENS, LOAD = 1000, 200, 0.9


class _Ref:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a, self.b = 0, 0.0


def reference_cpu_s() -> float:
    """CPU seconds of a fixed loop shaped like the simulator's step (Python attribute updates, list appends, a small
    numpy sum), best of 3: the same machine runs it slower or faster from one hour to the next, so the simulator's
    time divided by it compares runs on different machines or days."""
    ctx = np.arange(256, dtype=np.int64)
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        r, out = _Ref(), []
        for i in range(1_000_000):
            r.a += 1
            r.b += 0.5
            out.append(i)
            if i % 10 == 0:
                r.b += float(ctx.sum())
        best = min(best, time.process_time() - t)
    return best


def capacity_requests_per_s() -> float:
    work = synthetic(20_000, np.random.default_rng(0), input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)
    return simulate(ClosedLoop(1024, work), SPEC).summary["requests_per_s"]


def run(n: int, rate: float, ref_s: float) -> None:
    work = synthetic(n, np.random.default_rng(1), rate_per_s=rate, input_tokens=INPUT_TOKENS,
                     output_tokens=OUTPUT_TOKENS)
    wall, cpu = time.perf_counter(), time.process_time()
    s = simulate(work, SPEC, seed=1).summary
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    steps = s["engines"][0]["steps"]
    print(f"{n:>9,} requests: {wall:6.1f} s wall ({n / wall:8,.0f} requests/s), {cpu:6.1f} s CPU "
          f"({n / cpu:8,.0f} requests/s); {steps:,} engine steps = {steps / n:.2f} per request, "
          f"{cpu / steps * 1e6:.1f} us CPU per step; simulated TTFT {s['ttft_s']['mean'] * 1e3:.0f} ms, "
          f"TPOT {s['tpot_s']['mean'] * 1e3:.1f} ms; CPU = {cpu / ref_s:,.0f} x the reference loop")


def sweep(rate: float, points: int = 8, n: int = 10_000) -> None:
    loads = [LoadSpec(n, rate_per_s=rate * (i + 1) / points, input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS,
                      seed=1) for i in range(points)]
    for workers in (1, 2):
        wall = time.perf_counter()
        run_sweep([SweepPoint(SPEC, ld) for ld in loads], workers=workers)
        wall = time.perf_counter() - wall
        print(f"sweep of {points} rates x {n:,} requests, {workers} worker(s): {wall:5.1f} s wall, "
              f"{points / wall:.2f} points/s")


def main(sizes: list[int]) -> None:
    cap = capacity_requests_per_s()
    rate = LOAD * cap
    print(f"vLLM scheduler defaults, {INPUT_TOKENS} in / {OUTPUT_TOKENS} out, {TIMER}")
    print(f"capacity {cap:.2f} requests/s; Poisson arrivals at {LOAD:.0%} of it = {rate:.2f} requests/s")
    ref_s = reference_cpu_s()
    print(f"reference loop (machine speed, best of 3): {ref_s * 1e3:.1f} ms CPU; the runs below in units of it "
          "compare machines and days")
    for n in sizes:
        run(n, rate, ref_s)
    print("What bounds it: the engine steps. Every step is a few microseconds of numpy (the decode "
          "batch's contexts for the timer) plus tens of Python attribute operations (scheduling, "
          "KV accounting, events); per-request work is O(1) per arrival and per finish. At 90 % "
          "load a new request arrives in most steps, so runs of identical decode steps are short "
          "and little can be skipped: the step count (output tokens / mean batch + prefill steps) "
          "sets the time. Wall time above CPU time is other processes sharing the core.")
    sweep(rate)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100_000, 1_000_000])
