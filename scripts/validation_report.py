"""Regenerate the README's validation section and docs/validation.png from the shipped measurements.

Run: python scripts/validation_report.py
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from tokensim.output.plots import predicted_vs_measured
from tokensim.perf.constants import fitted_table
from tokensim.validate.run import validate

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- validation:start -->", "<!-- validation:end -->"
CLAIMS_START, CLAIMS_END = "<!-- claims:start -->", "<!-- claims:end -->"


def _stretch_note(srv: dict) -> str:
    """How far the fit stretched the ranges about their medians (`uncertainty.stretch_for`), if it did."""
    k = (srv.get("bands_stretch_ttft"), srv.get("bands_stretch_tpot"))
    if k[0] is None or k[1] is None:
        return ""
    return (f", each stretched about its median, x{k[0]:.2f} for TTFT and x{k[1]:.2f} for TPOT: pooled over other "
            "pairs, the percentiles miss the offset a new pair's runs share, and the stretch is the smallest that "
            "brings each left-out pair's runs to 80 %, chosen, for the figures here, without the pair being judged")


def _pct(d: dict | None, key: str = "median_abs_error") -> str:
    return "-" if not d or d.get(key) is None else f"{d[key]:.1%}"


def kernels_note() -> str:
    """How the traces' chips are priced, with the figures measured now: the kernel profiles' fit error, and each
    trace that crosses PCIe replayed with the other GPU peer-to-peer case."""
    from tokensim.prediction.serving import read_trace_folder
    from tokensim.specs.hardware.catalog import load_hardware
    from tokensim.specs.hardware.p2p import PCIE_MEDIA, flag_name, has_pcie_link, peer_to_peer_on
    from tokensim.validate.kernels import MIXED_MIN_DECODE_SHARE, attention_log_errors, kernel_points, log_errors
    from tokensim.validate.load import replay_trace, shipped_traces

    chips = sorted({p.chip for p in kernel_points()})
    fits = ", ".join(f"{np.median(np.abs(np.expm1(log_errors(c)))):.1%} on the {load_hardware(c).display_name}"
                     for c in chips)
    mixed = ", ".join(f"{np.median(np.abs(np.expm1(attention_log_errors(c, None, 'mixed', MIXED_MIN_DECODE_SHARE)))):.0%}"
                      for c in chips)
    text = ("The traces' chips are priced with constants set from vLLM 0.19's kernels profiled on them (LLMServingSim's "
            "profiler: one layer's projections at 1 to 2,048 tokens, and its attention with a prompt chunk, decodes, "
            "or both in one FlashAttention-2 call, `tokensim/data/kernels/`; `python -m tokensim.validate.kernels` "
            f"prints the fit and its median error: projections {fits}; attention of the steps that prefill and decode "
            f"at once, which read the decodes' KV up to once per query head (docs/model.md 1.2), {mixed}), never from "
            "the traces.")
    others = []
    for folder in shipped_traces():
        tf = read_trace_folder(folder)
        hw = load_hardware(tf.hardware) if tf.hardware else None
        if hw is None or tf.tp * tf.data_parallel < 2 or not has_pcie_link(hw):
            continue
        on = peer_to_peer_on(hw)
        e = replay_trace(folder, p2p=not on).errors()
        layout = f"TP {tf.tp}" + (f" x DP {tf.data_parallel}" if tf.data_parallel > 1 else "") + (
            " with EP" if tf.expert_parallel else "")
        others.append((on, f"{folder.name} ({layout}) {e['ttft_s']['mean']:+.0%} / {e['tpot_s']['mean']:+.0%}"))
    if others:
        on = others[0][0]
        text += (f" {len(others)} of the runs cross PCIe, whose collectives no profile times; the card's file prices "
                 f"them {'with' if on else 'without'} GPU peer-to-peer (medium {PCIE_MEDIA[on]}, a share of the line "
                 "rate from published nccl-tests runs, not fitted), a choice read from RTXPRO6000_Qwen3-32B's step "
                 "times, so that trace is no clean out-of-sample check of it. Replayed "
                 f"{'without' if on else 'with'} it (`{flag_name(not on)}`), mean TTFT / mean TPOT: "
                 + "; ".join(t for _, t in others) + " (docs/model.md 2.1).")
    return text


def clock_note() -> str:
    """How the traces are timed, and what the other clock would give: each TTFT p50 error from arrival instead."""
    from tokensim.sim import load_trace_measurements
    from tokensim.validate.load import read_trace_folder, shipped_traces, trace_simulation

    parts = []
    for folder in shipped_traces():
        m = load_trace_measurements(read_trace_folder(folder).requests)
        if not m["engine_clock"].all():
            continue
        s = trace_simulation(folder).summary["ttft_s"]
        parts.append(f"{folder.name} {s['p50'] / float(np.nanmedian(m['ttft_s'])) - 1:+.0%}")
    if not parts:
        return ""
    return ("Each trace is compared on the clock that timed it: vLLM's per-request stats start when its engine loop "
            "takes a request in, between steps (queued_ts), so the wait for the step in flight at its arrival is on "
            "no record, and the simulated TTFT is taken from the same moment (`SimulationResult.engine_clock_summary`, "
            "docs/model.md 5.1). Taken from arrival instead, the simulated TTFT p50 would be off by: "
            + ", ".join(parts) + ".")


def tail_lines(results, p90: float | None) -> list[str]:
    """The rows beyond the out-of-sample 90th percentile: what the p90 is made of (the fit's stored residuals)."""
    from tokensim.validate.uncertainty import shipped_residuals

    if p90 is None:
        return []
    oos = {r.id: float(np.expm1(r.log_ratio_out_of_sample)) for r in shipped_residuals()
           if r.log_ratio_out_of_sample is not None}
    tail = sorted((r for r in results if r.error is not None and abs(oos.get(r.row.id, 0.0)) > p90),
                  key=lambda r: -abs(oos[r.row.id]))
    if not tail:
        return []
    lines = ["", f"The {len(tail)} rows beyond the out-of-sample 90th percentile ({p90:.0%}), signed (positive: "
             "predicted too fast):", "", "| row | source's engine | model | hardware | metric | in sample | out of sample |",
             "|---|---|---|---|---|---|---|"]
    for r in tail:
        row = r.row
        lines.append(f"| {row.id} | {row.provider_or_engine[:40]} | {row.model[:32]} | {row.hardware[:24]} | {row.metric} "
                     f"| {r.error:+.0%} | {oos[row.id]:+.0%} |")
    return lines


def breakdown_lines(sim: dict) -> list[str]:
    """The by-load and by-model tables of `validate --serving`'s silicon_simulated block (breakdown.py's groups)."""
    lines: list[str] = []
    for key, label in (("by_load", "clients per attention rank"), ("by_model", "model")):
        lines += ["", f"| {label} | runs | TTFT | TPOT |", "|---|---|---|---|"]
        for name, g in sim.get(key, {}).items():
            cells = [f"{_pct(g[m])} ({g[m]['median_signed_error']:+.0%})" if g[m]["rows"] else "-"
                     for m in ("ttft", "tpot")]
            lines.append(f"| {name} | {g['runs']} | " + " | ".join(cells) + " |")
    return lines


def level_lines(sim: dict) -> list[str]:
    """The error split into each configuration's level and its change with load (breakdown.level_and_load)."""
    split = sim.get("level_and_load")
    if not split or not split["ttft"]["runs"]:
        return []
    t, p = split["ttft"], split["tpot"]
    return ["", f"Level or load: {t['configurations']} configurations (the same model, system, engine, harness, lengths, "
            f"layout and precisions) were simulated at 3 or more loads ({t['runs']} runs). Their TTFT is off by a median "
            f"{_pct(t, 'as_is_median_abs_error')} as the runs are and {_pct(t, 'load_only_median_abs_error')} once each "
            f"configuration's own median error (its level: ln(predicted / measured) shared by all its loads) is taken "
            f"out; TPOT {_pct(p, 'as_is_median_abs_error')} and {_pct(p, 'load_only_median_abs_error')} "
            f"({p['runs']} runs). What is left after the levels is how the error changes with the load within one "
            "configuration (`validate.breakdown.level_and_load`)."]


TRACE_BAR = 0.15      # issue 12: a trace's TTFT and TPOT mean, p50 and p99 within 15 % of the recorded run
STEP_ERROR_MIN = 0.03  # a mean TPOT error under this does not explain a TTFT miss through the queue


def queue_note() -> str:
    """Each trace whose TTFT misses the bar, replayed with every step scaled by its own TPOT error (measured over
    simulated mean TPOT): how much of the TTFT error a queue makes of the step's."""
    from tokensim.validate.load import replay_trace, shipped_traces

    parts = []
    for folder in shipped_traces():
        r = replay_trace(folder)
        e = r.errors()["ttft_s"]
        if all(abs(e[k]) <= TRACE_BAR for k in ("mean", "p50", "p99")):
            continue
        scale = r.measured["tpot_s"]["mean"] / r.simulated["tpot_s"]["mean"]
        if abs(1 / scale - 1) < STEP_ERROR_MIN:
            misses = [k for k in ("mean", "p50", "p99") if abs(e[k]) > TRACE_BAR]
            parts.append(f"{folder.name}'s TTFT {' and '.join(misses)} miss ({', '.join(f'{e[k]:+.0%}' for k in misses)}: "
                         f"{r.simulated['ttft_s']['p50'] * 1e3:.0f} against {r.measured['ttft_s']['p50'] * 1e3:.0f} ms at "
                         f"the median) with its mean TPOT within {abs(1 / scale - 1):.0%}, so not through the queue: the "
                         "median request waits for no other and its TTFT is its own prefill step and the step it "
                         "arrived in; what makes those longer in the simulation is not measured apart")
            continue
        scaled = replay_trace(folder, step_scale=scale).errors()
        parts.append(f"{folder.name}'s TTFT error is its queue's: its {1 / scale - 1:+.0%} mean TPOT leaves the requests "
                     f"ahead of a full batch finishing early, and replayed with every step {scale:.2f} x as long (its "
                     f"TPOT error undone), TTFT mean / p50 / p99 come out {scaled['ttft_s']['mean']:+.0%} / "
                     f"{scaled['ttft_s']['p50']:+.0%} / {scaled['ttft_s']['p99']:+.0%} (TPOT mean "
                     f"{scaled['tpot_s']['mean']:+.0%}; `validate.load.replay_trace(step_scale=)`)")
    if not parts:
        return ""
    queue = any("is its queue's" in p for p in parts)
    return "; ".join(parts) + (". Past the knee a request's TTFT is mostly its wait for running requests to end, so a "
                               "few per cent on each step become tens of per cent on TTFT." if queue else ".")


def section(sample: int = 0) -> str:
    from tokensim.cli_serving import validate_serving
    from tokensim.output.progress import progress_bar
    from tokensim.validate.fit import shipped_silicon
    from tokensim.validate.serving import build_cases
    from tokensim.validate.serving_rows import read_silicon

    results, s = validate()
    predicted_vs_measured(results, ROOT / "docs" / "validation.png")
    fit = fitted_table()
    lines = [START, "",
             f"`tokensim validate` on the {s.total} shipped published measurements ({s.modelled} modelled, "
             f"{s.modelled / s.total:.0%}); error = predicted / measured - 1 of the cost model's own figure, constants from "
             f"`tokensim fit` ({fit.get('fitted_constants', '?')} constants, {fit.get('date', '?')}). Out of sample = the "
             "row's source group left out of the fit (rows relaying one figure under two URLs are one group).", "",
             "| group | rows | median abs. error | 90th pct abs. error |", "|---|---|---|---|",
             f"| all, in sample | {s.modelled} | {s.median_abs_error:.1%} | {s.p90_abs_error:.1%} |"]
    if "loso_median_abs_error" in fit:
        lines.append(f"| all, out of sample | {fit['loso_rows']} | {fit['loso_median_abs_error']:.1%} | "
                     f"{fit['loso_p90_abs_error']:.1%} |")
    for g in fit.get("loso_by_family_metric", []):
        lines.append(f"| out of sample: {g['group']} | {g['rows']} | {g['median_abs_error']:.1%} | {g['p90_abs_error']:.1%} |")
    lines += tail_lines(results, fit.get("loso_p90_abs_error"))
    lines += ["", f"Median signed error {s.median_signed_error:+.1%} (positive: too fast). Calibrated ranges: "
              f"{s.coverage_80:.1%} of the modelled rows fall inside the 80 % range built without their own source group "
              "(`coverage_80`). Skipped rows and the reason for each: `tokensim validate`.", "",
              "![predicted against measured](docs/validation.png)", ""]
    load = validate_serving(sample, progress_bar, enabled=False, workers=os.cpu_count())
    srv = fit.get("serving", {})

    def row(label: str, block: dict | None, key: str = "leave_one_pair_out_median_abs_error") -> str:
        if not block or key not in block:
            return f"| {label} | - | - | - |"
        p90 = key.replace("median", "p90")
        runs = sum(b["rows"] for b in block.get("by_pair", [])) or srv.get("rows", "-")
        return f"| {label} | {runs} | {block[key]:.1%} | {block[p90]:.1%} |"

    light = srv.get("ttft_light", {})
    runs_read, _ = read_silicon(shipped_silicon())
    cases, skipped = build_cases(runs_read)
    multinode = sum("multi-node disaggregated" in why for _, why in skipped)
    inferencex = sum(c.run.harness == "inferencex" for c in cases)
    replicated = sum(r.agg is not None and r.agg.workers != 1 for r in runs_read)
    lines += ["### Under load", "",
              "`tokensim validate --serving`: the 3,784 measured runs of `silicon_dev.csv` (aiconfigurator's silicon sample: "
              "TTFT and time per output token at fixed concurrency, nine models on H100, H200, B200 and GB200 with "
              f"TensorRT-LLM, vLLM and SGLang; {len(cases):,} laid out; the others are disaggregated runs that state no "
              f"decode-worker count, {multinode} of them InferenceX DeepSeek runs on GB200 written as agg on 12 to 72 GPUs, "
              "which InferenceX ran only as multi-node disaggregated deployments: `harness.toml` [[multinode_disagg]]; "
              f"{replicated} agg runs whose concurrency is a whole multiple of their batch are read as that many "
              "replicas, as aiconfigurator's generator sets concurrency = agg_workers x max_batch_size: "
              "`serving_rows.silicon_run`) "
              f"and {len(load['traces'])} real vLLM runs replayed request by request. Every figure below is out of sample: "
              "each run is "
              "predicted with the constants `tokensim fit` refitted without its (system, engine) pair. Each run is simulated "
              "the way its benchmark ran: closed-loop clients whose measured requests start together on an idle engine, "
              "10 rounds (three simulated: the burst, a steady round and the drain, weighed 1 / 8 / 1), the engine's "
              "scheduler with the settings aiconfigurator's generator writes (running batch capped at "
              "the configured batch, token budget batch + isl + 1,500 per attention rank), and what each run's harness did "
              "that its row does not say (`tokensim/data/serving/harness.toml`, sources there): aiconfigurator's own SGLang "
              "0.5.1 runs without the mixed chunked prefill its generator wrote only from 2026-01-19; the 161 DeepSeek-R1 "
              "runs that ran TensorRT-LLM's MTP drafts (88 in InferenceX's MTP image; 73 in the image it shared with the "
              "plain configurations, measured on 2026-01-14, the day its perf changelog ran only the new MTP "
              "configurations) with their drafts (acceptance 0.85, 0.72, 0.60 per chained draft, the shipped MTP "
              "default) and their launch scripts' token budgets (`tokensim/validate/harness.py`); 26 SGLang runs of "
              "DeepSeek-R1 that ran its MTP configuration (in the image and on the day it shared with the plain one, at "
              "loads beyond that one's search space) are simulated without their drafts, whose acceptance on these "
              "prompts is not known (docs/model.md 5.2). InferenceX's client, which draws request "
              f"lengths uniformly in [0.8 L, L] for its {inferencex:,} runs, is not simulated, nor are its scripts' SGLang, "
              "TensorRT-LLM and vLLM launch settings (written down with their commits in `harness.toml`): modelled, they "
              "made TPOT worse after a refit (the seventh and eighth tries, on the constants of 2026-12-07: TTFT "
              "30.6 -> 28.9 %, but "
              "simulated TPOT 11.3 -> 12.7 % and steady TPOT 11.4 -> 13.1 %; TensorRT-LLM's and SGLang's TTFT improve, "
              "vLLM's gets worse; docs/model.md 5.2, "
              "`harness.SIMULATE_INFERENCEX_CLIENT`). "
              "Peer figures: aiconfigurator 0.12 "
              "on 284 of its own configurations, TTFT median 47 %, TPOT 17 %; LLMServingSim on its own traces in brackets.", "",
              "| what (leaving each (system, engine) pair out) | runs | median abs. error | 90th pct |", "|---|---|---|---|",
              row("TTFT, simulated", srv.get("simulated_ttft")),
              row("TPOT, simulated", srv.get("simulated_tpot")),
              row("TPOT, steady-state estimate", srv.get("tpot")),
              ("| TTFT at light load (<= 4 clients per attention rank), the fit's estimate (its wait and prefill step, times the "
               f"simulator's count of them) | {srv.get('light_rows', '-')} | "
               + (f"{light['leave_one_pair_out_median_abs_error']:.1%} | {light['leave_one_pair_out_p90_abs_error']:.1%} |"
                  if "leave_one_pair_out_median_abs_error" in light else "- | - |")),
              "", "By (system, engine) pair, left out (median abs. error of simulated TTFT / simulated TPOT):", "",
              "| pair | runs | TTFT | TPOT |", "|---|---|---|---|"]
    by_ttft = {b["pair"]: b for b in srv.get("simulated_ttft", {}).get("by_pair", [])}
    for b in srv.get("simulated_tpot", {}).get("by_pair", []):
        t = by_ttft.get(b["pair"])
        lines.append(f"| {b['pair']} | {b['rows']} | {t['median_abs_error']:.1%} | {b['median_abs_error']:.1%} |" if t
                     else f"| {b['pair']} | {b['rows']} | - | {b['median_abs_error']:.1%} |")
    rep = load["silicon_repeats"]
    lines += ["", f"The floor under these figures: {rep['configurations']} configurations were measured more than once "
              f"({rep['runs']} runs; {rep['identical_pairs']} pairs are one run copied between files). Where two runs of "
              f"one stated configuration differ, they differ by a median {_pct(rep['ttft'])} in TTFT (p90 "
              f"{rep['ttft']['p90_abs_error']:.0%}) and {_pct(rep['tpot'])} in TPOT (p90 {rep['tpot']['p90_abs_error']:.0%}), "
              f"over {rep['ttft']['rows']} pairs (|a / b - 1|, larger over smaller): no prediction can match both runs."]
    if "bands_coverage_80_ttft" in srv:
        lines += ["", "Ranges under load: `tokensim simulate` prints, beside its mean TTFT and TPOT, where a benchmark's "
                  "measured mean is expected to fall: the 10th-90th percentile of these out-of-sample errors over the runs "
                  "of the same hardware family and engine (else the family's runs under any engine, else the engine's runs "
                  "on any hardware, else no range: a wafer's errors are not a GPU's; `tokensim fit` stores "
                  f"them, {len(srv.get('bands', []))} groups)" + _stretch_note(srv) + ". Built without a run's own "
                  f"(system, engine) pair, that range held {srv['bands_coverage_80_ttft']:.0%} of the measured TTFT "
                  f"means and {srv['bands_coverage_80_tpot']:.0%} of the TPOT means (nominally 80 %)."]
    sim = load["silicon_simulated"]
    signed = sim["ttft_median_signed_error"]
    lines += ["", f"Where the error lies: `tokensim validate --serving --sample 0` simulates all {sim['simulated']} runs, "
              f"each with the constants fitted without its pair (median TTFT {_pct(sim['ttft'])}, signed "
              + (f"{signed:+.0%}" if signed is not None else "-")
              + f", negative: too early; TPOT {_pct(sim['tpot'])}; without `--sample` it simulates 120; `--runs runs.csv` "
              "writes each run's measured, simulated and steady-state figures with the constants that judged it), and "
              "groups them by the clients on each attention rank and by model (median abs. error, signed median in "
              "brackets):"]
    lines += breakdown_lines(sim)
    lines += level_lines(sim)
    lines += ["", "| trace | TTFT mean | TTFT p50 | TTFT p99 | TPOT mean | TPOT p50 | TPOT p99 |",
              "|---|---|---|---|---|---|---|"]
    for x in load["traces"]:
        cells = []
        for m in ("ttft_s", "tpot_s"):
            for k in ("mean", "p50", "p99"):
                e, pe = x["error"][m][k], x["peer_error"].get(m, {}).get(k)
                cells.append(f"{e:+.0%}" + ("" if pe is None else f" ({pe:+.1%})"))
        lines.append(f"| {x['trace']} | " + " | ".join(cells) + " |")
    dev = load.get("serving_dev")
    lines += ["", clock_note(), "", kernels_note()]
    sensitivity = queue_note()
    if sensitivity:
        lines += ["", sensitivity]
    if dev:
        lines += ["", f"`serving_dev.csv` (engine benchmark pages, papers' validation runs, LLMServingSim's recorded runs), "
                  f"each row simulated under its own stated load (Poisson rate, clients or an offline queue) on its layout "
                  f"with the engine's documented scheduler defaults and judged on its own metric; none of these rows is "
                  f"fitted on. {dev['modelled']} of {dev['rows']} rows modelled; the others lack a fact the simulation "
                  f"needs (mean lengths, arrival process, model variant: `tokensim validate --serving --json`). Median "
                  f"signed error {dev['median_signed_error']:+.0%}.{own_runs_note(dev)}", "",
                  "| metric | rows | median abs. error | 90th pct |", "|---|---|---|---|",
                  f"| all | {dev['modelled']} | {_pct(dev)} | {dev['p90_abs_error']:.1%} |"]
        lines += [f"| {name} | {st['rows']} | {_pct(st)} | {st['p90_abs_error']:.1%} |"
                  for name, st in dev["by_metric"].items()]
    lines += ["", "Regenerate with `python scripts/validation_report.py`.", "", END]
    return "\n".join(lines)


def own_runs_note(dev: dict) -> str:
    """How many of serving_dev's modelled rows are the traces' own summary figures (the rows that replay a shipped
    trace, `serving_dev.relayed_trace`), and the median without them: the same four runs must not read as more
    evidence than they are."""
    from tokensim.validate.serving_dev import relayed_trace

    done = [r for r in dev["results"] if r.get("error") is not None]
    others = [abs(r["error"]) for r in done if relayed_trace(r["source_url"]) is None]
    n = len(done) - len(others)
    if not n:
        return ""
    return (f" {n} of the {len(done)} modelled rows are summary figures of the four recorded runs above (LLMServingSim's "
            f"summary.txt); the other {len(others)}: median abs. error {np.median(others):.1%}.")


def claims_section() -> str:
    from tokensim.scenarios.claims import all_claims

    lines = [CLAIMS_START, "",
             "How claims are judged: the base case follows the claim's stated conditions; its calibrated 80 % range "
             "decides *consistent* or *inconsistent* (the claim above or below the range, by how much); alternatives, "
             "declared with their source, can only add *also consistent if*, and one that breaks a stated condition is "
             "reported apart. Labels are generated from what each alternative changes.", "",
             "| claim | claimed | predicted (80 % range) | verdict |", "|---|---|---|---|"]
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
