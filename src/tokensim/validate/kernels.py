"""Per-op times against kernel profiles measured on one chip (data/kernels/): how far tokensim's GEMM pricing is from
the kernels an engine runs, and the chip-level constants those profiles set.

The profiles (LLMServingSim's profiler, vLLM 0.19.0, enforce_eager, one decoder layer, bf16; data/kernels/README.md)
time each projection of a layer at 1 to 2,048 tokens. tokensim prices the same layer in two op groups, so each
point compares a group with the sum of its kernels: `attn.proj` = qkv_proj + o_proj, `ffn` = gate_up_proj +
down_proj + act_fn. Token counts up to 256 are priced as a decode batch (the decode GEMM fraction), larger ones as
one prompt (the prefill fraction). The attention projections are compared only at 512 tokens and more: the profile
runs one layer again and again, so their weights (17-105 MB per chip) stay in the chip's L2 cache (72 MB on the RTX
4090, 128 MB on the RTX PRO 6000) and the memory-bound points time L2, not DRAM; the FFN's weights (117-524 MB per
chip) do not fit and are compared at every token count.

`fit_chip(chip)` sets the four constants of one chip's [<chip>.vllm] level by coordinate descent (`fit.golden_log`
per constant, inside the bounds below) on the squared log error of those points; `python -m tokensim.validate.kernels`
prints the errors with the shipped constants and what a fit gives.
"""
from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from tokensim.deploy.deployment import Deployment
from tokensim.perf.constants import ConstantsTable, table_or_default
from tokensim.perf.context import make_context
from tokensim.perf.layers import Batch
from tokensim.perf.step import step_cost
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.model.catalog import load_model

GROUPS = {"attn.proj": ("qkv_proj", "o_proj"), "ffn": ("gate_up_proj", "down_proj", "act_fn")}
DECODE_MAX_TOKENS = 256          # up to this many tokens a point is priced as a decode batch, above as one prompt
ATTENTION_MIN_TOKENS = 512       # attention projections below this are L2-resident in a one-layer profile
ENGINE = "vllm"                  # the engine whose kernels the shipped profiles time
BOUNDS = {"hbm_bandwidth_fraction": (0.3, 0.95), "gemm_flops_fraction": (0.15, 1.0),
          "prefill_flops_fraction": (0.1, 1.0), "gemm_half_inner": (16.0, 2048.0)}


@dataclass(frozen=True)
class KernelPoint:
    chip: str
    model: str
    tp: int
    tokens: int
    group: str           # tokensim's op group: attn.proj or ffn
    measured_s: float    # the sum of the group's kernels in one layer


@lru_cache(maxsize=1)
def kernel_points() -> tuple[KernelPoint, ...]:
    """The shipped profiles as comparison points (the rule for which points count is in the module docstring)."""
    path = resources.files("tokensim") / "data" / "kernels" / "llmservingsim_vllm_0_19.csv"
    times: dict[tuple, dict[str, float]] = defaultdict(dict)
    with path.open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            times[(r["chip"], r["model"], int(r["tp"]), int(r["tokens"]))][r["op"]] = float(r["time_s"])
    points = []
    for (chip, model, tp, tokens), ops in sorted(times.items()):
        for group, kernels in GROUPS.items():
            if group == "attn.proj" and tokens < ATTENTION_MIN_TOKENS:
                continue
            if all(k in ops for k in kernels):
                points.append(KernelPoint(chip, model, tp, tokens, group, sum(ops[k] for k in kernels)))
    return tuple(points)


def predicted_s(point: KernelPoint, table: ConstantsTable | None = None) -> float:
    """tokensim's time for the point's op group in one layer on its chip, with the constants of `table`."""
    hw, model = load_hardware(point.chip), load_model(point.model)
    dep = Deployment(tp=point.tp, engine=ENGINE)
    ctx = make_context(model, hw, dep, table_or_default(table).for_hardware(hw, ENGINE))
    batch = (Batch(decode_seqs=point.tokens, decode_context=1) if point.tokens <= DECODE_MAX_TOKENS
             else Batch(prefill_seqs=1, prefill_tokens=point.tokens))
    op = next(o for o in step_cost(ctx, batch).breakdown() if o.name == point.group)
    return op.time_s / op.count


def log_errors(chip: str | None = None, table: ConstantsTable | None = None) -> np.ndarray:
    """ln(predicted / measured) of every point (of one chip, when named)."""
    return np.array([math.log(predicted_s(p, table) / p.measured_s) for p in kernel_points()
                     if chip is None or p.chip == chip])


def fit_chip(chip: str, table: ConstantsTable | None = None, sweeps: int = 3, steps: int = 12) -> dict[str, float]:
    """The [<chip>.vllm] constants that best reproduce the chip's profiled op times (least squares in log error)."""
    from tokensim.validate.fit import golden_log

    base = table_or_default(table)
    hw = load_hardware(chip)
    current = base.for_hardware(hw, ENGINE)
    values = {name: float(min(max(getattr(current, name), lo), hi)) for name, (lo, hi) in BOUNDS.items()}

    def loss(trial: dict[str, float]) -> float:
        return float(np.sum(log_errors(chip, base.with_overlay({chip: {ENGINE: trial}})) ** 2))

    for _ in range(sweeps):
        for name, (lo, hi) in BOUNDS.items():
            values[name] = golden_log(lambda x, n=name: loss({**values, n: x}), lo, hi, steps)
    return values


def main() -> None:
    base = table_or_default(None)
    for chip in sorted({p.chip for p in kernel_points()}):
        errors = np.abs(np.expm1(log_errors(chip, base)))
        print(f"{chip}: {errors.size} points, shipped constants: median |error| {np.median(errors):.1%}, "
              f"max {errors.max():.1%}")
        fitted = fit_chip(chip, base)
        refit = np.abs(np.expm1(log_errors(chip, base.with_overlay({chip: {ENGINE: fitted}}))))
        print("  a fit gives " + ", ".join(f"{k} = {v:.3g}" for k, v in fitted.items()) +
              f": median |error| {np.median(refit):.1%}, max {refit.max():.1%}")


if __name__ == "__main__":
    main()
