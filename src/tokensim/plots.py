"""Plots (matplotlib, no display needed). Every figure is written as PNG and SVG side by side.

The same hardware family keeps the same colour in every plot (FAMILY_COLOURS).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FAMILY_COLOURS = {
    "nvidia-ampere": "#76b900", "nvidia-hopper": "#1a7f37", "nvidia-blackwell": "#0b4f2a", "nvidia-ada": "#9acd32",
    "amd-cdna3": "#d62728", "amd-cdna4": "#8c1515", "cerebras-wafer": "#ff7f0e", "groq-lpu": "#9467bd",
    "sambanova-rdu": "#8c564b", "google-tpu": "#1f77b4", "cpu": "#7f7f7f",
}
METRIC_MARKERS = {"output_tps_per_user": "o", "ttft_s": "v", "throughput_tps_total": "s", "throughput_tps_per_chip": "D"}


def colour(family: str) -> str:
    return FAMILY_COLOURS.get(family, "#17becf")


def save(fig, path: str | Path) -> list[Path]:
    """Write `path` and its PNG/SVG sibling; returns both paths."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix in (".png", ".svg"):
        target = path.with_suffix(suffix)
        fig.savefig(target, dpi=150, bbox_inches="tight")
        out.append(target)
    plt.close(fig)
    return out


def predicted_vs_measured(results, path: str | Path) -> list[Path]:
    """Log-log scatter of every modelled row, coloured by hardware family, marker by metric."""
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    lo, hi = float("inf"), 0.0
    seen_family, seen_metric = set(), set()
    for r in results:
        if r.predicted is None:
            continue
        m, p = r.row.value, r.predicted
        lo, hi = min(lo, m, p), max(hi, m, p)
        ax.scatter(m, p, color=colour(r.family), marker=METRIC_MARKERS.get(r.row.metric, "o"), s=28,
                   edgecolors="black", linewidths=0.3, alpha=0.85)
        seen_family.add(r.family)
        seen_metric.add(r.row.metric)
    lo, hi = lo / 2, hi * 2
    ax.plot([lo, hi], [lo, hi], color="black", lw=1)
    for f, style in ((1.25, ":"), (1.6, "--")):
        ax.plot([lo, hi], [lo * f, hi * f], color="grey", lw=0.8, ls=style)
        ax.plot([lo, hi], [lo / f, hi / f], color="grey", lw=0.8, ls=style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (tokens/s, or seconds for TTFT)")
    ax.set_ylabel("predicted by tokensim (same unit)")
    ax.set_title("tokensim against published measurements\n(dotted: ±25 %, dashed: ±60 %)")
    handles = [plt.Line2D([], [], marker="o", ls="", color=colour(f), label=f) for f in sorted(seen_family)]
    handles += [plt.Line2D([], [], marker=METRIC_MARKERS[m], ls="", color="white", markeredgecolor="black", label=m)
                for m in sorted(seen_metric)]
    ax.legend(handles=handles, fontsize=7, loc="upper left", frameon=False)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    return save(fig, path)
