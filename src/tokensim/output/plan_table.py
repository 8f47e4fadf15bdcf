"""Printing, JSON and CSV for `tokensim plan`."""
from __future__ import annotations

import csv
import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tokensim.output.files import atomic_open
from tokensim.plan.search import PlanRequest, PlanResult

CSV_COLUMNS = ("hardware", "chips", "tp", "pp", "ep", "attn_dp", "dp", "batch", "weights", "kv", "fusions", "spec_on",
               "disaggregated", "prefill_chips", "fits", "tokens_per_s_per_user", "time_per_output_token_s", "ttft_s",
               "throughput_tokens_per_s", "throughput_tokens_per_s_per_chip", "memory_per_chip_bytes", "power_w",
               "tokens_per_joule", "usd_per_million_tokens")


def sorted_front(r: PlanResult) -> list[int]:
    return sorted(r.front.tolist(), key=lambda i: -r.points["tokens_per_s_per_user"][i])


def plan_json(r: PlanResult) -> dict:
    return {"evaluated": r.evaluated, "feasible": int(r.feasible.sum()),
            "front": [dict(r.point(i), best=(i == r.best)) for i in sorted_front(r)],
            "cost_front": [r.point(i) for i in sorted(r.cost_front.tolist(),
                                                       key=lambda i: -r.points["tokens_per_s_per_user"][i])],
            "best": r.point(r.best) if r.best is not None else None, "note": r.note or None}


def write_csv(r: PlanResult, path: str | os.PathLike[str], field: str = "path") -> Path:
    """Every evaluated deployment, one row each; written to a temporary file and renamed (never half-written)."""
    with atomic_open(path, "w", field, newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        cols = [r.points[c] for c in CSV_COLUMNS]
        for row in zip(*cols, strict=True):
            w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in (x.item() if hasattr(x, "item") else x for x in row)])
    return Path(path)


def print_plan(r: PlanResult, req: PlanRequest, console: Console) -> None:
    hw = ", ".join(h.name for h in req.hardware)
    console.print(f"[bold]{req.model.name}[/bold] on {hw}: {r.evaluated:,} deployments evaluated, "
                  f"{int(r.feasible.sum()):,} fit and meet the limits")
    if r.best is None:
        console.print(f"[red]{r.note}[/red]")
        return
    t = Table(title="Pareto front: tokens/s per user against throughput per chip (best for the objective marked *)",
              title_justify="left")
    for col in ("", "tok/s/user", "tok/s/chip", "$/Mtok", "TTFT", "chips", "layout", "batch", "weights/KV", "spec", "PD"):
        t.add_column(col)
    for i in sorted_front(r):
        p = r.point(i)
        d = p["deployment"]
        t.add_row("*" if i == r.best else "", f"{p['tokens_per_s_per_user']:.1f}", f"{p['throughput_tokens_per_s_per_chip']:.1f}",
                  f"{p['usd_per_million_tokens']:.3f}" if p["usd_per_million_tokens"] is not None else "-",
                  f"{p['ttft_s']:.3g} s", str(p["chips"]),
                  f"{d['hardware']} tp{d['tp']} pp{d['pp']} ep{d['ep']} adp{d['attn_dp']} dp{d['dp']}",
                  str(d["batch"]), f"{d['weights']}/{d['kv']}", "yes" if d["speculative"] else "no",
                  f"+{d['prefill_chips']}" if d["disaggregated"] else "no")
    console.print(t)
    if req.fusions:
        from tokensim.perf.context import fusions_on
        runs = "; ".join(f"{h.name}: {'+'.join(fusions_on(h, req.fusions) or ()) or 'none'}" for h in req.hardware)
        console.print(f"kernel fusions each chip's kernels run of those asked ({'+'.join(req.fusions)}): {runs}",
                      highlight=False)
    if r.best not in set(r.front.tolist()):
        p = r.point(r.best)
        console.print(f"best for {req.objective}: {p}")
