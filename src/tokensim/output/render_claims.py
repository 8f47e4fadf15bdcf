"""Tables for `tokensim claims`."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tokensim.scenarios.claims import ClaimResult


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def print_claims(results: list[ClaimResult], console: Console) -> None:
    t = Table(title="public claims against tokensim", title_justify="left", show_lines=True)
    for col in ("id", "claim", "claimed", "predicted (calibrated estimate and 80 % range)", "claim / predicted", "verdict"):
        t.add_column(col, overflow="fold")
    for r in results:
        verdict_style = "green" if r.verdict_kind == "consistent" else "red"
        t.add_row(r.id, r.text, f"{_fmt(r.claim_value)} {r.unit}",
                  f"{_fmt(r.predicted_value)} ({_fmt(r.predicted_range[0])}-{_fmt(r.predicted_range[1])})",
                  f"{r.ratio:.2f}", f"[{verdict_style}]{r.verdict}[/{verdict_style}]")
    console.print(t)
    console.print("[bold]assumptions that decide each scenario[/bold]")
    seen = set()
    for r in results:
        if r.scenario in seen:
            continue
        seen.add(r.scenario)
        console.print(f"[bold]{r.scenario}[/bold]")
        for a in r.assumptions:
            console.print(f"  - {a}")
    for r in results:
        if r.study:
            s = Table(title=f"{r.scenario}: KV-cache designs by context (one user)", title_justify="left")
            for col in ("design", "context", "tokens/s/user", "TTFT", "KV+state per chip", "max batch"):
                s.add_column(col)
            for row in r.study:
                if row.get("fits"):
                    s.add_row(row["variant"], f"{row['context_tokens']:,}", f"{row['tokens_per_s_per_user']:.0f}",
                              f"{row['ttft_s']:.3g} s", f"{row['kv_per_chip_bytes'] / 1e9:.2f} GB", str(row["max_batch"]))
                else:
                    s.add_row(row["variant"], f"{row['context_tokens']:,}", "does not fit", "-", "-", "0")
            console.print(s)
    console.print("verdict rule: the base case (the claim's stated conditions) decides: consistent when the claim lies in its "
                  "calibrated 80 % range, else inconsistent, above or below it; an alternative declared with its source can "
                  "only add 'also consistent if', and one that breaks a stated condition is reported apart")
