"""Plots (matplotlib `Figure` objects: no pyplot, no display, no global backend). Every figure is written as
PNG and SVG side by side.

The same hardware family keeps the same colour in every plot (FAMILY_COLOURS), and the same op the
same colour in every breakdown and roofline (op_colour). Each `*_figure` builds a figure; the function
of the same name without the suffix writes it with `save`, atomically (output/files.py); pass `outputs`
to write several figures all together or not at all. Sweeps that feed the plots live in plot_data.
"""
from __future__ import annotations

import math
import os
import zlib
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from tokensim.errors import TokensimError, bad_value
from tokensim.output.files import Outputs, atomic_outputs, check_target
from tokensim.output.units import fmt_si as _si

PathLike = str | os.PathLike[str]

FAMILY_COLOURS = {
    "nvidia-ampere": "#76b900", "nvidia-hopper": "#1a7f37", "nvidia-blackwell": "#0b4f2a", "nvidia-ada": "#9acd32",
    "amd-cdna3": "#d62728", "amd-cdna4": "#8c1515", "cerebras-wafer": "#ff7f0e", "groq-lpu": "#9467bd",
    "sambanova-rdu": "#8c564b", "google-tpu": "#1f77b4", "cpu": "#7f7f7f",
}
METRIC_MARKERS = {"output_tps_per_user": "o", "ttft_s": "v", "throughput_tps_total": "s", "throughput_tps_per_chip": "D"}
OP_COLOURS = {
    "attn.proj": "#4e79a7", "attn.core": "#a0cbe8", "linear.proj": "#59a14f", "linear.state": "#8cd17d",
    "ffn": "#f28e2b", "moe.shared": "#ffbe7d", "moe.router": "#f1ce63", "moe.experts": "#e15759", "lm_head": "#b6992d",
    "tp.allreduce": "#76b7b2", "ep.dispatch": "#b07aa1", "ep.combine": "#d4a6c8", "pp.hop": "#9d7660",
    "afd.transfer": "#d7b5a6", "layer.floor": "#79706e", "host": "#bab0ac",
}
_SPARE = ("#499894", "#86bcb6", "#d37295", "#fabfd2", "#ff9d9a", "#edc948", "#bcbd22")
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def colour(family: str) -> str:
    return FAMILY_COLOURS.get(family, "#17becf")


def op_colour(name: str) -> str:
    """A fixed colour per op name; an op outside OP_COLOURS gets a spare colour chosen from its name."""
    return OP_COLOURS.get(name) or _SPARE[zlib.crc32(name.encode()) % len(_SPARE)]


def family_of(hardware: str) -> str:
    """The family of a catalog chip; for a disaggregated pair ("a+b", "a->b") the decode pool's; "" if unknown."""
    from tokensim.specs.hardware.catalog import catalog, find_name

    part = hardware.split("->")[-1].split("+")[0].strip()
    name = find_name(part)
    return catalog()[name].family if name else ""


def _point_family(p: dict) -> str:
    return p.get("family") or family_of(str(p.get("hardware", "")))


def _axes(figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    fig = Figure(figsize=figsize)
    return fig, fig.add_subplot()


def save(fig: Figure, path: PathLike, outputs: Outputs | None = None, field: str = "path") -> list[Path]:
    """Write `path` and its PNG/SVG sibling (whatever suffix `path` has); returns both paths. Without `outputs`
    both appear together at the end; with it, when that `atomic_outputs` block ends."""
    return save_all([(fig, path)], outputs, field)


def save_all(figures: list[tuple[Figure, PathLike]], outputs: Outputs | None = None, field: str = "path") -> list[Path]:
    """Each figure as PNG and SVG beside its path, all written or none."""
    if outputs is None:
        with atomic_outputs() as own:
            return save_all(figures, own, field)
    written = []
    for fig, path in figures:
        stem = check_target(path, field)
        for fmt in ("png", "svg"):
            target = stem.with_suffix(f".{fmt}")
            fig.savefig(outputs.open(target, "wb", field), format=fmt, dpi=150, bbox_inches="tight")
            written.append(target)
    return written


def _time_unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= scale:
            return scale, unit
    return 1e-9, "ns"


def _fmt_time(seconds: float) -> str:
    scale, unit = _time_unit(seconds)
    return f"{seconds / scale:.3g} {unit}"


def _plain_log(ax, axis: str) -> None:
    """Tick labels on a log axis as plain numbers (0.1, 2, 500), minor ticks labelled at 2 and 5 when the axis
    spans under two decades."""
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    short = hi / lo < 100

    def minor(v, _):
        mantissa = round(v / 10 ** math.floor(math.log10(v)), 6)
        return f"{v:g}" if short and mantissa in (2, 5) else ""

    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(FuncFormatter(minor))


def _log_if_wide(ax, axis: str, values) -> None:
    """Log scale with plain labels where positive data spans more than a decade."""
    vals = [v for v in values if v and v > 0]
    if vals and max(vals) / min(vals) > 10:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        _plain_log(ax, axis)


def _finish(ax) -> None:
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.spines[["top", "right"]].set_visible(False)


def predicted_vs_measured_figure(results: Any) -> Figure:
    """Log-log scatter of every modelled row, coloured by hardware family, marker by metric."""
    if not any(r.predicted is not None for r in results):
        raise bad_value("results", f"{len(results)} rows", "at least one modelled (predicted) row")
    fig, ax = _axes((7.5, 6.5))
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
    handles = [Line2D([], [], marker="o", ls="", color=colour(f), label=f) for f in sorted(seen_family)]
    handles += [Line2D([], [], marker=METRIC_MARKERS.get(m, "o"), ls="", color="white", markeredgecolor="black", label=m)
                for m in sorted(seen_metric)]
    ax.legend(handles=handles, fontsize=7, loc="upper left", frameon=False)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    return fig


def predicted_vs_measured(results: Any, path: PathLike, outputs: Outputs | None = None, field: str = "path") -> list[Path]:
    return save(predicted_vs_measured_figure(results), path, outputs, field)


def breakdown_figure(prediction: Any) -> Figure:
    """One horizontal bar per phase (decode step, prefill), each op's share of the phase's summed op time."""
    phases = [("decode step", prediction.breakdown), ("prefill (TTFT)", prediction.prefill_breakdown)]
    phases = [(label, ops) for label, ops in phases if ops and sum(o.time_s for o in ops) > 0]
    if not phases:
        raise bad_value("prediction.breakdown", (), "at least one op with a positive time")
    fig, ax = _axes((9, 1.0 + 1.0 * len(phases)))
    seen: dict[str, None] = {}
    labels = []
    for row, (label, ops) in enumerate(phases):
        total = sum(o.time_s for o in ops)
        left = 0.0
        for op in ops:
            share = 100.0 * op.time_s / total
            ax.barh(row, share, left=left, color=op_colour(op.name), edgecolor="white", linewidth=0.5, height=0.6)
            if share >= 7:
                ax.text(left + share / 2, row, op.name, ha="center", va="center", fontsize=7)
            left += share
            seen.setdefault(op.name)
        labels.append(f"{label}\n{_fmt_time(total)}")
    ax.set_yticks(range(len(phases)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the phase's summed op time (%)")
    ax.set_title(f"Where the time goes: {prediction.model} on {prediction.chips} x {prediction.hardware}", fontsize=10)
    handles = [Rectangle((0, 0), 1, 1, color=op_colour(n), label=n) for n in seen]
    ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def breakdown(prediction: Any, path: PathLike, outputs: Outputs | None = None, field: str = "path") -> list[Path]:
    return save(breakdown_figure(prediction), path, outputs, field)


def roofline_figure(prediction: Any, hardware: Any, compute: str | None = None) -> Figure:
    """Each decode op with FLOPs and bytes at (FLOP/byte, achieved FLOP/s per chip) under the chip's roofs.
    Bytes and FLOPs are per chip summed over the stages a token passes, so a pipeline's dot is its mean chip."""
    from tokensim.perf.context import compute_format

    dep = prediction.deployment          # the deployment's compute format, else its weights' native one
    compute = compute or compute_format(hardware, dep, dep.weights or "bf16")
    bw = hardware.weight_tier.bandwidth_bytes_per_s
    peak = hardware.peak_flops(compute)
    ops = [o for o in prediction.breakdown if o.flops > 0 and o.bytes > 0 and o.time_s > 0]
    xs = [o.flops / o.bytes for o in ops]
    ridge = peak / bw
    lo = min(xs + [ridge]) / 10
    hi = max(xs + [ridge]) * 10
    fig, ax = _axes((7.5, 5.5))
    ax.plot([lo, ridge, hi], [bw * lo, peak, peak], color="black", lw=1.5,
            label=f"{hardware.weight_tier.tier.upper()} {_si(bw, 'B/s')}, {compute} peak {_si(peak, 'FLOP/s')}")
    for i, (fmt, rate) in enumerate(sorted(hardware.flops_per_s, key=lambda fr: fr[1])):
        if rate != peak:
            ax.plot([rate / bw, hi], [rate, rate], color="grey", lw=0.8, ls=LINESTYLES[1 + i % 3],
                    label=f"{fmt} peak {_si(rate, 'FLOP/s')}")
    placed: list[tuple[float, float, list[str]]] = []     # ops within 8 % of each other share one label
    for op, x in zip(ops, xs, strict=True):
        y = op.flops / op.time_s
        ax.scatter(x, y, s=50, color=op_colour(op.name), edgecolors="black", linewidths=0.4, zorder=3)
        near = next((p for p in placed if abs(math.log(p[0] / x)) < 0.08 and abs(math.log(p[1] / y)) < 0.08), None)
        if near:
            near[2].append(op.name)
        else:
            placed.append((x, y, [op.name]))
    for i, (x, y, names) in enumerate(sorted(placed)):     # neighbours alternate above and below their dot
        ax.annotate(", ".join(names), (x, y), textcoords="offset points", xytext=(6, 5 if i % 2 == 0 else -11),
                    fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _si(v, "FLOP/s")))
    y0, y1 = ax.get_ylim()
    short = math.log10(y1 / y0) < 1.6           # a short log axis has too few decades to label
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: _si(v, "FLOP/s") if short and
                                               round(v / 10 ** math.floor(math.log10(v)), 6) in (2, 5) else ""))
    _plain_log(ax, "x")
    ax.set_xlabel("arithmetic intensity (FLOP per byte read)")
    ax.set_ylabel("achieved FLOP/s per chip (op FLOPs / op time)")
    ax.set_title(f"Decode-step roofline: {prediction.model} on {hardware.display_name or hardware.name}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right", frameon=False)
    _finish(ax)
    return fig


def roofline(prediction: Any, hardware: Any, path: PathLike, compute: str | None = None, outputs: Outputs | None = None,
             field: str = "path") -> list[Path]:
    return save(roofline_figure(prediction, hardware, compute), path, outputs, field)


def prediction_plots(prediction: Any, hardware: Any, path: PathLike, outputs: Outputs | None = None,
                     field: str = "path") -> list[Path]:
    """The breakdown and the roofline of one prediction, beside `path`: STEM-breakdown.png/.svg and
    STEM-roofline.png/.svg (for the CLI's --plot)."""
    stem = check_target(path, field)
    figures: list[tuple[Figure, PathLike]] = [(breakdown_figure(prediction), sibling(stem, "breakdown"))]
    if any(o.flops > 0 and o.bytes > 0 for o in prediction.breakdown):
        figures.append((roofline_figure(prediction, hardware), sibling(stem, "roofline")))
    return save_all(figures, outputs, field)


def sibling(path: PathLike, name: str) -> Path:
    """STEM-name.png beside `path` (STEM: its name without the suffix)."""
    path = Path(path)
    return path.with_name(f"{path.stem}-{name}.png")


def _by(points: list[dict], key) -> dict:
    groups: dict = {}
    for p in points:
        groups.setdefault(key(p), []).append(p)
    return groups


def _styles(groups) -> dict:
    """Colour by family; lines of one family told apart by dash and marker."""
    used: dict[str, int] = {}
    out = {}
    for name, pts in groups.items():
        fam = _point_family(pts[0])
        n = used.get(fam, 0)
        used[fam] = n + 1
        out[name] = dict(color=colour(fam), ls=LINESTYLES[n % 4], marker=MARKERS[n % len(MARKERS)])
    return out


def speed_vs_batch_figure(points: list[dict]) -> Figure:
    """points: dicts with hardware, batch, tokens_per_s_per_user (and optionally family)."""
    _require_points(points, ("hardware", "batch", "tokens_per_s_per_user"), "speed_vs_batch")
    groups = _by(points, lambda p: p["hardware"])
    styles = _styles(groups)
    fig, ax = _axes((7.5, 5.5))
    for hw, pts in groups.items():
        pts = sorted(pts, key=lambda p: p["batch"])
        ax.plot([p["batch"] for p in pts], [p["tokens_per_s_per_user"] for p in pts], label=hw, ms=4, **styles[hw])
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    _log_if_wide(ax, "y", [p["tokens_per_s_per_user"] for p in points])
    ax.set_xlabel("batch (concurrent sequences)")
    ax.set_ylabel("tokens/s per user")
    varies = any(len({p.get("chips") for p in pts}) > 1 for pts in groups.values())
    ax.set_title("Decode speed per user against batch"
                 + ("\n(chips: the fewest that hold weights and KV at each batch)" if varies else ""), fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    _finish(ax)
    return fig


def speed_vs_batch(points: list[dict], path: PathLike, outputs: Outputs | None = None, field: str = "path") -> list[Path]:
    return save(speed_vs_batch_figure(points), path, outputs, field)


def pareto_figure(points: list[dict]) -> Figure:
    """points: tokens_per_s_per_user, throughput_tokens_per_s_per_chip, hardware or family, front, best."""
    _require_points(points, ("tokens_per_s_per_user", "throughput_tokens_per_s_per_chip"), "pareto")
    groups = _by(points, lambda p: p.get("hardware") or p.get("family") or "")
    styles = _styles(groups)
    fig, ax = _axes((7.5, 5.5))
    for name, pts in groups.items():
        st = styles[name]
        ax.scatter([p["tokens_per_s_per_user"] for p in pts], [p["throughput_tokens_per_s_per_chip"] for p in pts],
                   s=12, color=st["color"], alpha=0.3, marker=st["marker"], linewidths=0)
        front = sorted((p for p in pts if p.get("front")), key=lambda p: p["tokens_per_s_per_user"])
        if front:
            ax.plot([p["tokens_per_s_per_user"] for p in front], [p["throughput_tokens_per_s_per_chip"] for p in front],
                    color=st["color"], ls=st["ls"], marker=st["marker"], ms=5,
                    label=f"{name} (front)")
    for p in points:
        if p.get("best"):
            ax.scatter(p["tokens_per_s_per_user"], p["throughput_tokens_per_s_per_chip"], marker="*", s=260,
                       color=colour(_point_family(p)), edgecolors="black", linewidths=0.8, zorder=4)
            ax.annotate(str(p.get("label", "best")), (p["tokens_per_s_per_user"], p["throughput_tokens_per_s_per_chip"]),
                        textcoords="offset points", xytext=(8, 6), fontsize=8)
    _log_if_wide(ax, "x", [p["tokens_per_s_per_user"] for p in points])
    _log_if_wide(ax, "y", [p["throughput_tokens_per_s_per_chip"] for p in points])
    ax.set_xlabel("tokens/s per user (interactivity)")
    ax.set_ylabel("output tokens/s per chip (throughput)")
    ax.set_title("Throughput against interactivity (lines: Pareto front; star: best)", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    _finish(ax)
    return fig


def pareto(points: list[dict], path: PathLike, outputs: Outputs | None = None, field: str = "path") -> list[Path]:
    return save(pareto_figure(points), path, outputs, field)


def ttft_vs_depth_figure(points: list[dict]) -> Figure:
    """points: model, hardware, pp, ttft_s (one line per model and hardware)."""
    _require_points(points, ("model", "hardware", "pp", "ttft_s"), "ttft_vs_depth")
    groups = _by(points, lambda p: f"{p['model']} on {p['hardware']}")
    styles = _styles(groups)
    fig, ax = _axes((7.5, 5.5))
    ttfts = [p["ttft_s"] for p in points]
    scale, unit = _time_unit(min(ttfts))
    for name, pts in groups.items():
        pts = sorted(pts, key=lambda p: p["pp"])
        ax.plot([p["pp"] for p in pts], [p["ttft_s"] / scale for p in pts], label=name, ms=3, **styles[name])
    _log_if_wide(ax, "y", ttfts)
    ax.set_xlabel("pipeline depth (stages; one chip or wafer per stage)")
    ax.set_ylabel(f"time to first token ({unit})")
    ax.set_title("TTFT against pipeline depth", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    _finish(ax)
    return fig


def ttft_vs_depth(points: list[dict], path: PathLike, outputs: Outputs | None = None, field: str = "path") -> list[Path]:
    return save(ttft_vs_depth_figure(points), path, outputs, field)


def check_factors(factors: list[tuple[str, float]], total_ratio: float, rel_tol: float = 1e-6) -> None:
    """Every factor positive and their product equal to total_ratio (within rel_tol)."""
    if not factors:
        raise bad_value("factors", factors, "at least one (name, factor) pair")
    for name, f in factors:
        if not isinstance(f, (int, float)) or isinstance(f, bool) or not f > 0 or math.isinf(f):
            raise bad_value(f"factors[{name!r}]", f, "a positive finite number")
    if not total_ratio > 0:
        raise bad_value("total_ratio", total_ratio, "a positive number")
    product = math.prod(f for _, f in factors)
    if abs(math.log(product / total_ratio)) > rel_tol:
        raise TokensimError(f"total_ratio = {total_ratio!r}: expected the product of the factors, {product:.6g}")


def waterfall_figure(factors: list[tuple[str, float]], total_ratio: float) -> Figure:
    """Bars on a log axis from 1: each factor moves the running product; the last bar is the total."""
    check_factors(factors, total_ratio)
    fig, ax = _axes((max(6.0, 1.1 * (len(factors) + 2)), 5.0))
    run = 1.0
    for i, (_, f) in enumerate(factors):
        lo, hi = sorted((run, run * f))
        ax.bar(i, hi - lo, bottom=lo, color="#59a14f" if f >= 1 else "#e15759", width=0.6)
        ax.text(i, hi, f"x{f:.3g}", ha="center", va="bottom", fontsize=8)
        if i + 1 < len(factors):
            ax.plot([i + 0.3, i + 0.7], [run * f, run * f], color="grey", lw=0.8)
        run *= f
    n = len(factors)
    lo, hi = sorted((1.0, total_ratio))
    ax.bar(n, hi - lo, bottom=lo, color="#4e79a7", width=0.6)
    ax.text(n, hi, f"x{total_ratio:.3g}", ha="center", va="bottom", fontsize=8, weight="bold")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(n + 1), [name for name, _ in factors] + ["total"], rotation=25, ha="right", fontsize=8)
    levels = [1.0, total_ratio] + [math.prod(f for _, f in factors[:i + 1]) for i in range(n)]
    ax.set_ylim(min(levels) / 1.15, max(levels) * 1.3)      # room for the labels above the bars
    _plain_log(ax, "y")
    ax.tick_params(axis="y", which="both", labelsize=8)
    ax.set_ylabel("running ratio (x, log scale)")
    ax.set_title("How the factors multiply to the total", fontsize=10)
    _finish(ax)
    return fig


def waterfall(factors: list[tuple[str, float]], total_ratio: float, path: PathLike, outputs: Outputs | None = None,
              field: str = "path") -> list[Path]:
    return save(waterfall_figure(factors, total_ratio), path, outputs, field)


def _require_points(points: list[dict], keys: tuple[str, ...], what: str) -> None:
    if not points:
        raise bad_value(f"{what}.points", points, "at least one point")
    for i, p in enumerate(points):
        for key in keys:
            if key not in p:
                raise bad_value(f"{what}.points[{i}].{key}", None, "a value (field missing)")
