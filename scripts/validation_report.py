"""Regenerate the README's validation section and docs/validation.png from the shipped measurements.

Run: python scripts/validation_report.py
"""
from __future__ import annotations

import re
from pathlib import Path

from tokensim.perf.constants import fitted_table
from tokensim.output.plots import predicted_vs_measured
from tokensim.validate.run import validate

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- validation:start -->", "<!-- validation:end -->"
CLAIMS_START, CLAIMS_END = "<!-- claims:start -->", "<!-- claims:end -->"


def section() -> str:
    results, s = validate()
    predicted_vs_measured(results, ROOT / "docs" / "validation.png")
    fit = fitted_table()
    lines = [START, "",
             f"`tokensim validate` on the {s.total} shipped published measurements ({s.modelled} modelled, "
             f"{s.modelled / s.total:.0%}); error = predicted / measured - 1, fitted constants from "
             f"`tokensim fit` ({fit.get('fitted_constants', '?')} constants, {fit.get('date', '?')}).", "",
             "| group | rows | median abs. error | 90th pct abs. error |", "|---|---|---|---|",
             f"| all (in-sample) | {s.modelled} | {s.median_abs_error:.1%} | {s.p90_abs_error:.1%} |"]
    if "loso_median_abs_error" in fit:
        lines.append(f"| all, leave one source out | {fit['loso_rows']} | {fit['loso_median_abs_error']:.1%} | {fit['loso_p90_abs_error']:.1%} |")
    for name, g in s.by_family.items():
        lines.append(f"| family: {name} | {g['rows']} | {g['median_abs_error']:.1%} | {g['p90_abs_error']:.1%} |")
    for name, g in s.by_metric.items():
        lines.append(f"| metric: {name} | {g['rows']} | {g['median_abs_error']:.1%} | {g['p90_abs_error']:.1%} |")
    lines += ["", f"Median signed error {s.median_signed_error:+.1%} (positive: too fast). "
              "Skipped rows and the reason for each: `tokensim validate`.", "",
              "![predicted against measured](docs/validation.png)", "",
              "Regenerate with `python scripts/validation_report.py`.", "", END]
    return "\n".join(lines)


def claims_section() -> str:
    from tokensim.scenarios.claims import all_claims

    lines = [CLAIMS_START, "",
             "The band is where measured values of comparable validated rows fall around a prediction (10th-90th "
             "percentile of their residuals, bias included), so a family whose rows run slower than predicted has a "
             "band below the point value.", "",
             "| claim | claimed | predicted (band) | verdict |", "|---|---|---|---|"]
    for r in all_claims():
        verdict = r.verdict.replace("|", "/")
        lines.append(f"| {r.id}: {r.text} | {r.claim_value:.3g} {r.unit} | {r.predicted_value:.3g} "
                     f"({r.predicted_range[0]:.3g}-{r.predicted_range[1]:.3g}) | {verdict} |")
    lines += ["", "Full reasons and the assumptions behind each scenario: `tokensim claims`.", "", CLAIMS_END]
    return "\n".join(lines)


def _replace(text: str, start: str, end: str, new: str, anchor: str) -> str:
    if start in text:
        return re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: new, text, flags=re.S)
    return text.replace(anchor, anchor + "\n" + new + "\n", 1)


def main() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    new = section()
    text = _replace(text, START, END, new, "## Validation\n")
    text = _replace(text, CLAIMS_START, CLAIMS_END, claims_section(), "### Scenarios and claims\n")
    readme.write_text(text, encoding="utf-8")
    print(new)


if __name__ == "__main__":
    main()
