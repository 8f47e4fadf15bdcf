"""Tables for `tokensim validate`."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tokensim.validate.run import Result, Summary


def print_validation(results: list[Result], s: Summary, console: Console) -> None:
    t = Table(title="published measurements against predictions", title_justify="left")
    for col in ("id", "metric", "measured", "predicted", "error", "assumptions"):
        t.add_column(col, overflow="fold")
    for r in results:
        if r.error is None:
            continue
        t.add_row(r.row.id, r.row.metric, f"{r.row.value:.4g}", f"{r.predicted:.4g}", f"{r.error:+.0%}",
                  "; ".join(a for a in r.assumptions if not a.startswith(("model:", "hardware:"))))
    console.print(t)
    skipped = Table(title="rows not modelled", title_justify="left")
    skipped.add_column("id")
    skipped.add_column("reason", overflow="fold")
    for r in results:
        if r.skipped_reason:
            skipped.add_row(r.row.id, r.skipped_reason)
    console.print(skipped)
    summary = Table(title="summary (absolute relative error)", title_justify="left")
    for col in ("group", "rows", "median", "p90"):
        summary.add_column(col)
    summary.add_row("all", f"{s.modelled} of {s.total} ({s.modelled / max(s.total, 1):.0%})",
                    f"{s.median_abs_error:.1%}", f"{s.p90_abs_error:.1%}")
    for title, groups in (("family", s.by_family), ("metric", s.by_metric)):
        for name, g in groups.items():
            summary.add_row(f"{title}: {name}", str(g["rows"]), f"{g['median_abs_error']:.1%}", f"{g['p90_abs_error']:.1%}")
    console.print(summary)
    console.print(f"median signed error {s.median_signed_error:+.1%} (positive: predictions too fast)")
