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

The attention profiles (the same profiler's attention.csv: one layer's attention at a prefill chunk of 128 to 2,048
tokens, 1 to 256 decoding sequences of 64 to 16,384 cached tokens each, and the two together, the way vLLM's V1
FlashAttention backend runs a mixed step in one kernel) are compared with tokensim's `attn.core` op. They set two
more constants of the level: the prefill attention's FLOP rate against the prefill GEMMs' (the FlashAttention-2
kernel these chips run reaches about half of it), and the share of a grouped-query model's extra per-query-head KV
reads that a step's decodes pay when the step also prefills (`layers.mixed_step_kv_reads`: a mixed step reads the
decodes' KV up to 3.7 times over for Llama-3.1-8B's 4 query heads per KV head and 7.6 times for Qwen3-32B's 8, where
a decode-only step reads it once). Points under ATTENTION_MIN_S are left out: there the eager profile times a
launch floor of 8-12 us per call that tokensim does not model per op.

`fit_chip(chip)` sets the six constants of one chip's [<chip>.vllm] level by coordinate descent (`fit.golden_log`
per constant, inside the bounds below) on the squared log error of those points; `python -m tokensim.validate.kernels`
prints the errors with the shipped constants and what a fit gives.
"""
from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, replace
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
MIXED_MIN_DECODE_SHARE = 2 / 3  # the mixed points that set the decodes' extra reads: where those reads dominate
ATTENTION_MIN_S = 50e-6         # attention points faster than this time a launch floor, not the kernel's work
BOUNDS = {"hbm_bandwidth_fraction": (0.3, 0.95), "gemm_flops_fraction": (0.15, 1.0),
          "prefill_flops_fraction": (0.1, 1.0), "gemm_half_inner": (16.0, 2048.0),
          "attention_prefill_rate_ratio": (0.05, 1.0), "mixed_step_gqa_unpacked_share": (0.01, 1.0)}
PROJECTION_CONSTANTS = ("hbm_bandwidth_fraction", "gemm_flops_fraction", "prefill_flops_fraction", "gemm_half_inner")
ATTENTION_CONSTANTS = {"attention_prefill_rate_ratio": "prefill", "mixed_step_gqa_unpacked_share": "mixed"}


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


@dataclass(frozen=True)
class AttentionPoint:
    chip: str
    model: str
    tp: int
    prefill_tokens: int   # one prompt's chunk (no cached prefix), or 0
    decode_seqs: int      # sequences decoding in the same step, or 0
    decode_context: int   # tokens cached by each of them
    measured_s: float     # the layer's attention in one call
    decode_share: float = 1.0   # measured: the decodes' time alone over theirs plus the chunk's alone (mixed points)

    @property
    def kind(self) -> str:
        return "mixed" if self.prefill_tokens and self.decode_seqs else "prefill" if self.prefill_tokens else "decode"


@lru_cache(maxsize=1)
def attention_points() -> tuple[AttentionPoint, ...]:
    """The shipped attention profiles at ATTENTION_MIN_S and more."""
    path = resources.files("tokensim") / "data" / "kernels" / "llmservingsim_vllm_0_19_attention.csv"
    with path.open(encoding="utf-8") as f:
        points = [AttentionPoint(r["chip"], r["model"], int(r["tp"]), int(r["prefill_tokens"]), int(r["decode_seqs"]),
                                 int(r["decode_context"]), float(r["time_s"])) for r in csv.DictReader(f)]
    alone = {(p.chip, p.model, p.tp, p.prefill_tokens, p.decode_seqs, p.decode_context): p.measured_s
             for p in points if p.kind != "mixed"}
    out = []
    for p in points:
        if p.kind == "mixed":
            d = alone[(p.chip, p.model, p.tp, 0, p.decode_seqs, p.decode_context)]
            p = replace(p, decode_share=d / (d + alone[(p.chip, p.model, p.tp, p.prefill_tokens, 0, 0)]))
        if p.measured_s >= ATTENTION_MIN_S:
            out.append(p)
    return tuple(out)


def _context(chip: str, model: str, tp: int, table: ConstantsTable | None):
    hw = load_hardware(chip)
    return make_context(load_model(model), hw, Deployment(tp=tp, engine=ENGINE),
                        table_or_default(table).for_hardware(hw, ENGINE))


def attention_predicted_s(point: AttentionPoint, table: ConstantsTable | None = None) -> float:
    """tokensim's attention core of one layer for the point's step, with the constants of `table`."""
    batch = Batch(decode_seqs=point.decode_seqs, decode_context=point.decode_context,
                  prefill_seqs=1 if point.prefill_tokens else 0, prefill_tokens=point.prefill_tokens)
    ctx = _context(point.chip, point.model, point.tp, table)
    op = next(o for o in step_cost(ctx, batch).breakdown() if o.name == "attn.core")
    return op.time_s / op.count


def predicted_s(point: KernelPoint, table: ConstantsTable | None = None) -> float:
    """tokensim's time for the point's op group in one layer on its chip, with the constants of `table`."""
    ctx = _context(point.chip, point.model, point.tp, table)
    batch = (Batch(decode_seqs=point.tokens, decode_context=1) if point.tokens <= DECODE_MAX_TOKENS
             else Batch(prefill_seqs=1, prefill_tokens=point.tokens))
    op = next(o for o in step_cost(ctx, batch).breakdown() if o.name == point.group)
    return op.time_s / op.count


def log_errors(chip: str | None = None, table: ConstantsTable | None = None) -> np.ndarray:
    """ln(predicted / measured) of every projection point (of one chip, when named)."""
    return np.array([math.log(predicted_s(p, table) / p.measured_s) for p in kernel_points()
                     if chip is None or p.chip == chip])


def attention_log_errors(chip: str | None = None, table: ConstantsTable | None = None,
                         kind: str | None = None, min_decode_share: float = 0.0) -> np.ndarray:
    """ln(predicted / measured) of every attention point (of one chip, of one kind: decode, prefill or mixed; of a
    mixed point whose decodes take at least `min_decode_share` of the time the two parts take alone)."""
    return np.array([math.log(attention_predicted_s(p, table) / p.measured_s) for p in attention_points()
                     if (chip is None or p.chip == chip) and (kind is None or p.kind == kind)
                     and p.decode_share >= min_decode_share])


def fit_chip(chip: str, table: ConstantsTable | None = None, sweeps: int = 3, steps: int = 12) -> dict[str, float]:
    """The [<chip>.vllm] constants that best reproduce the chip's profiled op times (least squares in log error)."""
    from tokensim.validate.fit import golden_log

    base = table_or_default(table)
    hw = load_hardware(chip)
    current = base.for_hardware(hw, ENGINE)
    values = {name: float(min(max(getattr(current, name), lo), hi)) for name, (lo, hi) in BOUNDS.items()}

    def loss(trial: dict[str, float]) -> float:
        return float(np.sum(log_errors(chip, base.with_overlay({chip: {ENGINE: trial}})) ** 2))

    def attention_loss(trial: dict[str, float], kind: str) -> float:
        t = base.with_overlay({chip: {ENGINE: trial}})
        return float(np.sum(attention_log_errors(chip, t, kind, MIXED_MIN_DECODE_SHARE if kind == "mixed" else 0) ** 2))

    # the projections first, on their own points; then the prefill attention's rate on the prompt-only attention points
    # and the mixed steps' extra KV reads on the mixed ones, each holding what was fitted before it
    for _ in range(sweeps):
        for name in PROJECTION_CONSTANTS:
            lo, hi = BOUNDS[name]
            values[name] = golden_log(lambda x, n=name: loss({**values, n: x}), lo, hi, steps)
    for name, kind in ATTENTION_CONSTANTS.items():
        lo, hi = BOUNDS[name]
        values[name] = golden_log(lambda x, n=name, k=kind: attention_loss({**values, n: x}, k), lo, hi, steps)
    return values


def main() -> None:
    base = table_or_default(None)
    for chip in sorted({p.chip for p in kernel_points()}):
        errors = np.abs(np.expm1(log_errors(chip, base)))
        print(f"{chip}: {errors.size} points, shipped constants: median |error| {np.median(errors):.1%}, "
              f"max {errors.max():.1%}")
        fitted = fit_chip(chip, base)
        refitted = base.with_overlay({chip: {ENGINE: fitted}})
        refit = np.abs(np.expm1(log_errors(chip, refitted)))
        print("  a fit gives " + ", ".join(f"{k} = {v:.3g}" for k, v in fitted.items()) +
              f": median |error| {np.median(refit):.1%}, max {refit.max():.1%}")
        for kind, share in (("decode", 0), ("prefill", 0), ("mixed", 0), ("mixed", MIXED_MIN_DECODE_SHARE)):
            shipped = np.expm1(attention_log_errors(chip, base, kind, share))
            fit = np.expm1(attention_log_errors(chip, refitted, kind, share))
            kind = kind + (f", decodes >= {share:.0%} of it" if share else "")
            print(f"  attention, {kind}: {shipped.size} points, shipped: median |error| {np.median(np.abs(shipped)):.1%} "
                  f"(signed {np.median(shipped):+.1%}); the fit: {np.median(np.abs(fit)):.1%} (signed {np.median(fit):+.1%})")


if __name__ == "__main__":
    main()
