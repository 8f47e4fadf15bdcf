"""One figure per engine profile: its curves beside the evidence that sets them (issue 11).

Left: the achieved share of the datasheet peak the profile gives a GEMM as its token rows grow (decode and prefill
rates of Llama-3.1-8B's FFN at its inner dimensions, and a grouped expert GEMM's; the HBM and KV-read bandwidth
shares as flat lines), on a representative chip. Middle: the published
measurements that name the engine, predicted against measured. Right: silicon_dev's serving runs of the engine,
steady-state time per output token predicted over measured, against the client concurrency. The data comes from
`engine_profile_data`; `engine_profile_figure` only draws it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from matplotlib.figure import Figure

from tokensim.output.files import Outputs
from tokensim.output.plots import FAMILY_COLOURS, MARKERS, PathLike, _finish, _plain_log, family_of, save

ROWS = np.geomspace(1, 65536, 80)


@dataclass(frozen=True)
class EngineProfileData:
    engine: str
    hardware: str                    # the chip the curves are drawn for
    rows: np.ndarray                 # GEMM token rows
    decode_share: np.ndarray         # achieved / peak FLOP/s of a decode GEMM with that many rows
    prefill_share: np.ndarray        # the same for prompt tokens
    grouped_share: np.ndarray        # a MoE layer's grouped expert GEMM over prompt tokens
    hbm_share: float
    kv_read_share: float
    host_overhead_s: float
    host_overhead_per_seq_s: float
    eager_layer_overhead_s: float
    request_overhead_s: float
    published: list[tuple[float, float, str]] = field(default_factory=list)   # (measured, predicted, family)
    silicon: list[tuple[float, float, str]] = field(default_factory=list)     # (concurrency, predicted/measured, system)


def engine_profile_data(engine: str, published_results=(), silicon_cases=(), silicon_tpot_s=(),
                        hardware: str = "h100-sxm") -> EngineProfileData:
    """The profile's curves on `hardware`, and the evidence rows that name `engine`: validation results
    (validate.run.Result) and silicon cases with their steady-state TPOT estimates."""
    from tokensim.deploy.deployment import Deployment
    from tokensim.perf.constants import for_hardware
    from tokensim.perf.context import make_context
    from tokensim.perf.layers import gated_ffn_inner, gemm_efficiency
    from tokensim.specs.hardware.catalog import load_hardware
    from tokensim.specs.model.catalog import load_model

    hw = load_hardware(hardware)
    k = for_hardware(hw, engine)
    model = load_model("llama-3.1-8b")
    ctx = make_context(model, hw, Deployment(engine=engine), k)
    ffn = model.layers[0].ffn
    inner = gated_ffn_inner(model.hidden_size, ffn.params if ffn is not None else 3 * model.hidden_size ** 2)
    eff = np.array([gemm_efficiency(ctx, r, inner) for r in ROWS]) * k.sustained_clock_fraction
    published = [(r.row.value, r.predicted, r.family) for r in published_results
                 if r.engine == engine and r.predicted is not None and r.row.value]
    silicon = [(c.concurrency, float(p) / c.run.tpot_s, c.run.system)
               for c, p in zip(silicon_cases, silicon_tpot_s, strict=True)
               if c.deployment.engine == engine and np.isfinite(p)]
    prefill = k.prefill_flops_fraction * k.prefill_clock_fraction        # the prompt-token rate perf.context prices
    return EngineProfileData(engine, hw.name, ROWS, k.gemm_flops_fraction * eff, prefill * eff,
                             prefill * k.grouped_gemm_fraction * eff,
                             k.hbm_bandwidth_fraction, k.attention_bandwidth_fraction, k.host_overhead_s,
                             k.host_overhead_per_seq_s, k.eager_layer_overhead_s, k.request_overhead_s, published, silicon)


def engine_profile_figure(d: EngineProfileData) -> Figure:
    fig = Figure(figsize=(15, 4.4))
    curves, pub, sil = fig.subplots(1, 3)
    curves.plot(d.rows, d.decode_share, color="#1a7f37", label="GEMM, decode tokens")
    curves.plot(d.rows, d.prefill_share, color="#ff7f0e", ls="--", label="GEMM, prompt tokens")
    curves.plot(d.rows, d.grouped_share, color="#b07aa1", ls="--", label="grouped expert GEMM, prompt tokens")
    curves.axhline(d.hbm_share, color="#4e79a7", ls=":", label=f"weight streaming, {d.hbm_share:.0%} of HBM")
    curves.axhline(d.kv_read_share, color="#a0cbe8", ls="-.", label=f"KV reads, {d.kv_read_share:.0%} of HBM")
    curves.axhline(1.0, color="black", lw=0.8)
    curves.set_xscale("log")
    _plain_log(curves, "x")
    curves.set_ylim(0, 1.05)
    curves.set_xlabel("token rows of a GEMM")
    curves.set_ylabel("achieved share of the datasheet peak")
    curves.set_title(f"{d.engine}: curves on {d.hardware}\nhost {d.host_overhead_s * 1e3:.2g} ms per step "
                     f"+ {d.host_overhead_per_seq_s * 1e6:.2g} us per sequence; eager {d.eager_layer_overhead_s * 1e3:.2g} "
                     f"ms per layer; request path {d.request_overhead_s * 1e3:.0f} ms", fontsize=9)
    curves.legend(fontsize=8, loc="lower right")
    _finish(curves)

    if d.published:
        for fam in sorted({f for _, _, f in d.published}):
            pts = [(m, p) for m, p, f in d.published if f == fam]
            pub.scatter([m for m, _ in pts], [p for _, p in pts], s=18, color=FAMILY_COLOURS.get(fam, "#555555"),
                        label=fam)
        lo = min(min(m, p) for m, p, _ in d.published) / 1.5
        hi = max(max(m, p) for m, p, _ in d.published) * 1.5
        pub.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        pub.fill_between([lo, hi], [lo / 1.25, hi / 1.25], [lo * 1.25, hi * 1.25], color="grey", alpha=0.12,
                         label="within 25 %")
        pub.set_xscale("log")
        pub.set_yscale("log")
        pub.legend(fontsize=8)
    else:
        pub.text(0.5, 0.5, "no published row names this engine", ha="center", va="center", transform=pub.transAxes)
    pub.set_xlabel("measured (tokens/s, s or tokens/s per chip)")
    pub.set_ylabel("predicted")
    pub.set_title(f"published measurements naming {d.engine}: {len(d.published)} rows", fontsize=10)
    _finish(pub)

    if d.silicon:
        for i, system in enumerate(sorted({s for _, _, s in d.silicon})):
            pts = [(c, r) for c, r, s in d.silicon if s == system]
            sil.scatter([c for c, _ in pts], [r for _, r in pts], s=10, alpha=0.5, marker=MARKERS[i % len(MARKERS)],
                        color=FAMILY_COLOURS.get(family_of(system), "#555555"), label=system)
        sil.axhline(1.0, color="black", lw=0.8)
        sil.axhspan(1 / 1.25, 1.25, color="grey", alpha=0.12)
        ratios = np.array([r for _, r, _ in d.silicon])
        sil.set_xscale("log")
        sil.set_yscale("log")
        _plain_log(sil, "x")
        _plain_log(sil, "y")
        sil.legend(fontsize=8, markerscale=2)
        title = (f"silicon_dev runs of {d.engine}: {len(d.silicon)}, median |error| "
                 f"{np.median(np.abs(ratios - 1)):.0%}")
    else:
        sil.text(0.5, 0.5, "no silicon_dev run uses this engine", ha="center", va="center", transform=sil.transAxes)
        title = f"silicon_dev runs of {d.engine}: none"
    sil.set_xlabel("client concurrency")
    sil.set_ylabel("steady-state TPOT, predicted / measured")
    sil.set_title(title, fontsize=10)
    _finish(sil)
    fig.tight_layout()
    return fig


def engine_profile(d: EngineProfileData, path: PathLike, outputs: Outputs | None = None, field: str = "path"):
    return save(engine_profile_figure(d), path, outputs, field)
