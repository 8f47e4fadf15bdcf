"""Pictures of a simulated serving run: latency against request rate (the knee), latency CDFs, and the
engine's batch size, KV use and queue length over time."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tokensim.output.plots import PathLike, save_all, sibling


def knee_figure(runs: list[tuple[Any, Any]]) -> Figure:
    """TTFT and TPOT (p50 and p99) against the request rate of a sweep."""
    fig = Figure(figsize=(9, 3.6))
    rates = [load.rate_per_s for load, _ in runs]
    for i, (metric, label) in enumerate((("ttft_s", "TTFT"), ("tpot_s", "TPOT"))):
        ax = fig.add_subplot(1, 2, i + 1)
        for q, style in (("p50", "-o"), ("p99", "--s")):
            ax.plot(rates, [r.summary[metric][q] or np.nan for _, r in runs], style, label=q)
        ax.set_xlabel("request rate (requests/s)")
        ax.set_ylabel(f"{label} (s)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("latency against load: the knee is where the queue starts to grow")
    fig.tight_layout()
    return fig


def cdf_figure(result: Any) -> Figure:
    req = result.requests
    done = np.isfinite(req["last_token_s"])
    ttft = (req["first_token_s"] - req["arrival_s"])[done]
    multi = done & (req["tokens"] > 1)
    tpot = ((req["last_token_s"] - req["first_token_s"]) / np.maximum(req["tokens"] - 1, 1))[multi]
    fig = Figure(figsize=(9, 3.6))
    for i, (values, label) in enumerate(((ttft, "TTFT (s)"), (tpot, "TPOT (s)"))):
        ax = fig.add_subplot(1, 2, i + 1)
        v = np.sort(values)
        ax.plot(v, np.arange(1, v.size + 1) / max(v.size, 1))
        ax.set_xlabel(label)
        ax.set_ylabel("share of requests")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def timeline_figure(result: Any) -> Figure:
    fig = Figure(figsize=(9, 6))
    series = result.summary.get("series", {})
    for i, (key, label) in enumerate((("batch_size", "running requests"), ("kv_blocks_used", "KV blocks used"),
                                      ("queue_length", "waiting requests"))):
        ax = fig.add_subplot(3, 1, i + 1)
        for name, s in series.items():
            ax.plot(s["time_s"], s[key], label=name)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    fig.axes[-1].set_xlabel("time (s)")
    fig.tight_layout()
    return fig


def serving_plots(runs: list[tuple[Any, Any]], path: PathLike) -> list[Path]:
    """A sweep: the knee at `path`; one run: CDFs at `path` and the timeline beside it. PNG and SVG, atomically."""
    if len(runs) > 1:
        return save_all([(knee_figure(runs), path)], field="--plot")
    _, result = runs[0]
    return save_all([(cdf_figure(result), path), (timeline_figure(result), sibling(path, "timeline"))], field="--plot")
