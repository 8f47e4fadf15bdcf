"""HTML pieces for `tokensim.output.report`: one page with inline styles and inline PNGs, no scripts, no fetches.

Every value goes through `esc` on its way into the page, whatever its origin; callers pass plain text,
never markup, except where a function's docstring says it takes already-built HTML.
"""
from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from tokensim.output.units import fmt_si as si
from tokensim.output.units import fmt_time as duration

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 72em;
       padding: 0 1.5em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.3em; margin-top: 2.2em; border-bottom: 2px solid #ddd; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; flex-wrap: wrap; gap: 1.2em; align-items: flex-start; } .cards table { margin: 0; }
.headline { display: flex; flex-wrap: wrap; gap: 1em; margin: 1em 0; }
.metric { border: 1px solid #ddd; border-radius: 6px; padding: 0.6em 1em; min-width: 12em; }
.metric .value { font-size: 1.5em; font-weight: 600; } .metric .label, .muted { color: #666; font-size: 0.9em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; margin: 0.5em 0; }
.verdict-ok { color: #1a7f37; font-weight: 600; } .verdict-if { color: #9a6700; font-weight: 600; }
.verdict-no { color: #b42318; font-weight: 600; }
nav ol { columns: 2; } code { background: #f4f4f6; padding: 0 0.25em; }
"""
# The page may load nothing at all: images are data: URIs and styles are inline; scripts are refused.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def num(v: float) -> str:
    """Three significant digits without an exponent between 0.001 and a million: 1918.9 -> 1919, 28.43 -> 28.4."""
    if v == 0 or not math.isfinite(v) or not 1e-3 <= abs(v) < 1e6:
        return f"{v:.3g}"
    return f"{v:.{max(0, 2 - math.floor(math.log10(abs(v))))}f}"


def speed(tokens_per_s: float) -> str:
    """Tokens/s as the report prints it (one decimal, as `tokensim predict`)."""
    return f"{tokens_per_s:.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], numeric: Collection[int] = frozenset(),
          cells_html: bool = False) -> str:
    """A table of plain-text cells (escaped here); columns in `numeric` align right. With `cells_html` the
    cells are already-built HTML (the caller escaped every piece)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = ' class="num"' if i in numeric else ""
            cells.append(f"<td{cls}>{cell if cells_html else esc(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def key_values(pairs: Sequence[tuple[str, object]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs)
    return f"<table><tbody>{rows}</tbody></table>"


def bullets(items: Sequence[object]) -> str:
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>" if items else ""


def metric(label: str, value: str, note: str = "") -> str:
    return (f'<div class="metric"><div class="label">{esc(label)}</div><div class="value">{esc(value)}</div>'
            f'<div class="muted">{esc(note)}</div></div>')


def figure_img(fig: Figure, alt: str) -> str:
    """The figure as an inline PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def verdict_class(kind: str) -> str:
    """CSS class of a verdict kind (tokensim.scenarios.claims.VerdictKind)."""
    return "verdict-ok" if kind == "consistent" else "verdict-no"


def page(title: str, body: str) -> str:
    """The whole document around already-built `body` HTML."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><link rel=\"icon\" href=\"data:,\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


__all__ = ["CSP", "bullets", "duration", "esc", "figure_img", "key_values", "metric", "num", "page", "si", "speed", "table",
           "verdict_class"]
