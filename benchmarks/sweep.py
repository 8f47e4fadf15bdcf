"""Deployments evaluated per second by `tokensim plan` on a large sweep: a 1T-parameter MoE (Kimi K2.6)
over chip counts, TP/PP/EP/attention-DP/replicas, batch, weight and KV precision, speculative decoding
and prefill-decode disaggregation, on three GPU types.

Run: python benchmarks/sweep.py
"""
from __future__ import annotations

import time

import tokensim
from tokensim.plan.search import PlanRequest, plan


def main() -> None:
    model = tokensim.load_model("kimi-k2.6")
    hardware = tuple(tokensim.load_hardware(h) for h in ("h200", "b200", "gb200-nvl72"))
    req = PlanRequest(model, hardware, max_chips=256, input_tokens=2000, output_tokens=500,
                      batches=tuple(2**i for i in range(13)))
    plan(PlanRequest(model, hardware[:1], max_chips=8))          # warm the catalogs
    start = time.perf_counter()
    result = plan(req)
    seconds = time.perf_counter() - start
    print(f"{result.evaluated:,} deployments evaluated in {seconds:.2f} s: {result.evaluated / seconds:,.0f} per second")
    print(f"{int(result.feasible.sum()):,} fit; Pareto front of {len(result.front)} points")


if __name__ == "__main__":
    main()
