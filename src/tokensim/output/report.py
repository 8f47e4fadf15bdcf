"""`build_report` / `write_report`: one self-contained HTML page for one or more scenario files.

Per scenario: its title, the model / hardware / deployment assumptions, the prediction with its 10-90 %
range, the per-op breakdown (table and plot), the decode roofline and, for a scenario that states
claims, each claim's verdict. Images are inline PNGs, styles inline, no scripts; nothing is fetched.
Every string read from a user's file is escaped (report_html.esc).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from tokensim.errors import TokensimError, bad_value
from tokensim.output import plots
from tokensim.output.files import atomic_write, check_target
from tokensim.output.report_html import (
    bullets,
    duration,
    esc,
    figure_img,
    key_values,
    metric,
    num,
    page,
    si,
    speed,
    table,
    verdict_class,
)
from tokensim.prediction.predictor import Prediction
from tokensim.scenarios.claims import ClaimResult, evaluate_file
from tokensim.scenarios.scenario import Scenario, find_scenario, load_scenario, run_scenario
from tokensim.specs.hardware.loader import read_mapping

GB = 1e9


@dataclass(frozen=True)
class Section:
    """One scenario, predicted: what a report section shows."""

    path: Path
    scenario: Scenario
    prediction: Prediction
    claims: tuple[ClaimResult, ...]


def evaluate(name_or_path: str) -> Section:
    """Load, predict and (where the file states claims) judge one scenario."""
    path = find_scenario(str(name_or_path))
    if path.suffix != ".toml" or not path.is_file():
        raise bad_value("scenario", str(name_or_path), "a .toml scenario file or the name of a shipped scenario")
    s = load_scenario(path)
    p = run_scenario(s)
    raw = read_mapping(path)
    claims: tuple[ClaimResult, ...] = ()
    if raw.get("claims") or raw.get("claim"):
        try:
            claims = tuple(evaluate_file(path))
        except TokensimError:
            raise
        except KeyError as exc:            # claims.evaluate_file reads required claim fields with []
            raise bad_value(f"{path.name}: claims.{exc.args[0]}", None, "a value (field missing)") from None
        except (TypeError, ValueError) as exc:
            raise TokensimError(f"{path.name}: a claim is malformed ({exc})") from None
    return Section(path, s, p, claims)


def _assumptions(s: Scenario, p: Prediction) -> str:
    m, hw, d = s.model, s.hardware, s.deployment
    tier = hw.weight_tier
    model = [("model", m.name), ("source", m.source or "-"), ("layers", m.n_layers),
             ("parameters", f"{m.total_params / 1e9:.1f}B total, {m.active_params / 1e9:.2f}B active per token"
                            + (" (MoE)" if m.is_moe else ""))]
    hardware = [("hardware", f"{hw.display_name} ({hw.name}, {hw.family})"),
                ("weight memory per chip", f"{tier.capacity_bytes / GB:.3g} GB {tier.tier.upper()} at "
                                           f"{si(tier.bandwidth_bytes_per_s, 'B/s')}"),
                ("dense peak per chip", ", ".join(f"{fmt} {si(v, 'FLOP/s')}" for fmt, v in hw.flops_per_s))]
    spec = d.spec
    deployment = [("chips", f"{p.chips} ({p.hardware})"),
                  ("layout", f"tp {d.tp} x attn_dp {d.attn_dp} x pp {d.pp} x dp {d.dp}, ep {d.ep}"),
                  ("batch and lengths", f"batch {d.batch}; {d.input_tokens} tokens in / {d.output_tokens} out"),
                  ("precisions", f"weights {d.weights or 'checkpoint'}"
                                 + (f", experts {d.expert_weights}" if d.expert_weights else "")
                                 + f", compute {d.compute or 'native'}, KV {d.kv}"),
                  ("engine", d.engine),
                  ("speculative decoding", f"{spec.method}, k={spec.draft_tokens}, "
                                           f"{spec.expected_tokens_per_step:.2f} tokens per step" if spec else "none")]
    notes = list(p.assumptions) + ([p.range_note] if p.range_note else [])
    return ('<h3>Assumptions</h3><div class="cards">' + key_values(model) + key_values(hardware)
            + key_values(deployment) + "</div>" + bullets(notes))


def _headline(p: Prediction) -> str:
    lo, hi = p.tokens_per_s_per_user_range
    t_lo, t_hi = p.ttft_s_range
    return ('<div class="headline">'
            + metric("tokens/s per user", speed(p.tokens_per_s_per_user_estimate),
                     f"80 % range: {speed(lo)} - {speed(hi)}; cost model {speed(p.tokens_per_s_per_user)}")
            + metric("time to first token", duration(p.ttft_s_estimate),
                     f"80 % range: {duration(t_lo)} - {duration(t_hi)}; cost model {duration(p.ttft_s)}")
            + metric("time per output token", duration(p.time_per_output_token_s))
            + metric("throughput", f"{p.throughput_tokens_per_s:.1f} tok/s",
                     f"{p.throughput_tokens_per_s_per_chip:.1f} per chip")
            + metric("memory per chip", f"{p.memory_per_chip_bytes / GB:.1f} GB",
                     f"of {p.capacity_per_chip_bytes / GB:.1f} GB usable; max batch {p.max_batch}")
            + "</div>")


def _breakdown_table(ops) -> str:
    total = sum(op.time_s for op in ops) or 1.0
    rows = [[op.name, op.count, duration(op.time_s), f"{op.time_s / total:.0%}", si(op.bytes, "B") if op.bytes else "-",
             si(op.flops, "FLOP") if op.flops else "-", op.bound] for op in ops]
    return table(["op", "x", "time", "share", "bytes", "FLOPs", "bound"], rows, numeric={1, 2, 3, 4, 5})


def _claims(results: tuple[ClaimResult, ...]) -> str:
    if not results:
        return ""
    rows = []
    for r in results:
        lo, hi = r.predicted_range
        rows.append([esc(r.id), esc(r.text), esc(f"{num(r.claim_value)} {r.unit}"),
                     esc(f"{num(r.predicted_value)} ({num(lo)} - {num(hi)})"), esc(f"{r.ratio:.2f}"),
                     f'<span class="{verdict_class(r.verdict_kind)}">{esc(r.verdict)}</span>', esc(r.source)])
    out = ["<h3>Claims</h3>",
           table(["id", "claim", "claimed", "predicted (10-90 %)", "claim / predicted", "verdict", "source"], rows,
                 numeric={2, 3, 4}, cells_html=True)]
    for r in results:
        if r.alternatives:
            alt_rows = [[a["label"] + (f" (breaks: {', '.join(a['breaks'])})" if a["breaks"] else ""),
                         num(a["predicted_value"]), f"{num(a['range'][0])} - {num(a['range'][1])}", a["source"]]
                        for a in r.alternatives]
            out.append(f"<p class=\"muted\">{esc(r.id)}: alternatives, each declared with its source</p>"
                       + table(["alternative", "predicted", "10-90 %", "source"], alt_rows, numeric={1, 2}))
    return "".join(out)


def section_html(sec: Section, anchor: str) -> str:
    s, p = sec.scenario, sec.prediction
    parts = [f'<h2 id="{esc(anchor)}">{esc(s.title or s.name)}</h2>',
             f'<p class="muted">scenario <code>{esc(s.name)}</code> from <code>{esc(sec.path.name)}</code></p>',
             _headline(p), _assumptions(s, p),
             "<h3>Where the time goes</h3>",
             "<p class=\"muted\">decode step: one token through every stage; bytes and FLOPs per chip of each stage, "
             "summed over the stages a token passes</p>",
             _breakdown_table(p.breakdown)]
    if p.prefill_breakdown:
        parts.append("<details><summary>prefill breakdown (TTFT)</summary>" + _breakdown_table(p.prefill_breakdown)
                     + "</details>")
    parts.append(figure_img(plots.breakdown_figure(p), f"per-op time breakdown of {p.model} on {p.hardware}"))
    if any(o.flops > 0 and o.bytes > 0 for o in p.breakdown):
        parts.append(figure_img(plots.roofline_figure(p, s.hardware),
                                f"decode-step roofline of {p.model} on {s.hardware.name}"))
    parts.append(_claims(sec.claims))
    return "\n".join(parts)


def build_report(scenario_paths: list[str], title: str = "tokensim report") -> str:
    """The report as one HTML string; `scenario_paths` are .toml paths or names of shipped scenarios."""
    if isinstance(scenario_paths, (str, os.PathLike)) or not scenario_paths:
        raise bad_value("scenarios", scenario_paths, "a list of at least one scenario file or shipped scenario name")
    sections = [evaluate(name) for name in scenario_paths]
    anchors = [f"scenario-{i + 1}" for i in range(len(sections))]
    nav = "".join(f'<li><a href="#{a}">{esc(sec.scenario.title or sec.scenario.name)}</a></li>'
                  for a, sec in zip(anchors, sections, strict=True))
    body = (f"<h1>{esc(title)}</h1><p class=\"muted\">predicted by tokensim on {date.today().isoformat()}; "
            "figures are calibrated estimates with their 80 % range, from the out-of-sample errors of validated rows in the "
            "same regime (hardware family, engine, metric, batch)</p>"
            f"<nav><ol>{nav}</ol></nav>"
            + "".join(section_html(sec, a) for sec, a in zip(sections, anchors, strict=True)))
    return page(title, body)


def write_report(scenario_paths: list[str], out_path: str | os.PathLike[str], title: str = "tokensim report",
                 field: str = "out_path") -> Path:
    """Build the report, then write it atomically (a temporary file in the same folder, renamed over out_path).
    A path that cannot be written is refused before anything is predicted; `field` names it in that message."""
    out = check_target(out_path, field)
    return atomic_write(out, build_report(scenario_paths, title), field)


__all__ = ["Section", "build_report", "evaluate", "section_html", "write_report"]
