"""The `tokensim` command: a thin layer over the library. Bad input exits 2 with one line, never a traceback."""
from __future__ import annotations

import json
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from tokensim.errors import TokensimError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Predict, explain and plan LLM token-generation speed on GPUs, wafers and LPUs.")
out = Console(width=None if sys.stdout.isatty() else 150)


def emit_json(obj: object) -> None:
    """Strict JSON: non-finite numbers (an unbounded figure, a missing power) become null."""
    sys.stdout.write(json.dumps(_finite(obj), indent=2, default=_json_default, allow_nan=False) + "\n")


def _finite(o: object) -> object:
    import math

    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if hasattr(o, "to_dict"):
        return _finite(o.to_dict())
    if hasattr(o, "item") and callable(o.item):      # numpy scalars
        return _finite(o.item())
    return o


def _json_default(o: object) -> object:
    return str(o)


@app.command()
def models(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List the model catalog."""
    from tokensim.specs.model.catalog import catalog_model, entries

    rows = []
    for name, e in entries().items():
        m = catalog_model(name)
        rows.append({"name": name, "layers": m.n_layers, "total_params": m.total_params,
                     "active_params": m.active_params, "source": e.source})
    if json_out:
        return emit_json(rows)
    t = Table("name", "layers", "total", "active", "source")
    for r in rows:
        t.add_row(r["name"], str(r["layers"]), f"{r['total_params'] / 1e9:.1f}B", f"{r['active_params'] / 1e9:.2f}B", r["source"])
    out.print(t)


@app.command()
def hardware(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List the hardware catalog."""
    from tokensim.specs.hardware.catalog import catalog

    rows = []
    for h in catalog().values():
        tier = h.weight_tier
        rows.append({"name": h.name, "display_name": h.display_name, "kind": h.kind,
                     "memory_bytes": tier.capacity_bytes, "memory_tier": tier.tier,
                     "bandwidth_bytes_per_s": tier.bandwidth_bytes_per_s, "flops_per_s": dict(h.flops_per_s),
                     "price_usd_per_hour": h.price_usd_per_hour})
    if json_out:
        return emit_json(rows)
    t = Table("name", "kind", "memory", "bandwidth", "bf16 dense", "$/h")
    for r in rows:
        bf16 = r["flops_per_s"].get("bf16")
        t.add_row(r["name"], r["kind"], f"{r['memory_bytes'] / 1e9:.3g} GB {r['memory_tier']}",
                  f"{r['bandwidth_bytes_per_s'] / 1e12:.3g} TB/s", f"{bf16 / 1e12:.0f} TF" if bf16 else "-",
                  f"{r['price_usd_per_hour']:.2f}" if r["price_usd_per_hour"] else "-")
    out.print(t)


@app.command()
def predict(
    model: str = typer.Option("llama-3.1-8b", "--model", "-m", help="catalog name or config.json path"),
    hardware: str = typer.Option("h100-sxm", "--hardware", "-H", help="catalog name or hardware TOML/YAML path"),
    chips: Optional[int] = typer.Option(None, help="total chips (default: the fewest that fit)"),
    tp: Optional[int] = typer.Option(None, help="tensor-parallel degree"),
    pp: Optional[int] = typer.Option(None, help="pipeline stages"),
    ep: int = typer.Option(1, help="expert-parallel degree"),
    dp: int = typer.Option(1, help="data-parallel replicas"),
    attn_dp: int = typer.Option(1, help="attention data-parallel ranks inside a replica (with --ep for MoE)"),
    overlap_comm: bool = typer.Option(False, "--overlap-comm", help="hide EP all-to-all behind compute (two micro-batches)"),
    batch: int = typer.Option(1, help="concurrent sequences"),
    input_tokens: int = typer.Option(1024, "--input", help="prompt tokens"),
    output_tokens: int = typer.Option(256, "--output", help="generated tokens"),
    weights: Optional[str] = typer.Option(None, help="stored weight precision: bf16, fp8, int8, int4, mxfp4, nvfp4"),
    expert_weights: Optional[str] = typer.Option(None, help="stored precision of routed experts only"),
    compute: Optional[str] = typer.Option(None, help="compute format: bf16, fp8, fp4"),
    kv: str = typer.Option("bf16", help="KV-cache precision"),
    engine: str = typer.Option("default", help="engine class: default (GPU serving engines) or basic (llama.cpp-class)"),
    plot: Optional[str] = typer.Option(None, "--plot", help="write the breakdown, roofline, speed-vs-batch (and, on wafers/LPUs, "
                                       "TTFT-vs-pipeline-depth) plots as PNG and SVG beside this path"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Predict tokens/s per user, TTFT, throughput and memory, with the per-op breakdown."""
    from tokensim.prediction.predictor import predict as run_predict
    from tokensim.output.render import print_prediction

    p = run_predict(model, hardware, chips=chips, tp=tp, pp=pp, ep=ep, dp=dp, attn_dp=attn_dp, overlap_comm=overlap_comm,
                    batch=batch,
                    input_tokens=input_tokens, output_tokens=output_tokens, weights=weights,
                    expert_weights=expert_weights, compute=compute, kv=kv, engine=engine)
    if plot:
        from pathlib import Path

        from tokensim.specs.hardware.catalog import load_hardware
        from tokensim.output.plot_data import speed_vs_batch_points, ttft_vs_depth_points
        from tokensim.output.plots import prediction_plots, speed_vs_batch, ttft_vs_depth
        hw = load_hardware(hardware)
        prediction_plots(p, hw, plot)
        stem = Path(plot)
        d = p.deployment
        kw = dict(weights=weights, expert_weights=expert_weights, compute=compute, kv=kv, engine=engine,
                  input_tokens=input_tokens, output_tokens=output_tokens)
        speed_vs_batch(speed_vs_batch_points(model, [hardware], tp=d.tp, pp=d.pp, ep=d.ep, dp=d.dp, **kw),
                       stem.with_name(f"{stem.stem}-speed-vs-batch.png"))
        if hw.kind in ("wafer", "lpu") and d.tp == 1:
            ttft_vs_depth(ttft_vs_depth_points(model, hardware, **kw), stem.with_name(f"{stem.stem}-ttft-vs-depth.png"))
    if json_out:
        from tokensim.perf.constants import evidence, for_hardware
        from tokensim.specs.hardware.catalog import load_hardware as _hw
        hw_spec = _hw(hardware)
        k = for_hardware(hw_spec, engine)
        d = p.to_dict()
        d["constants"] = {name: {"value": getattr(k, name), "evidence": why}
                          for name, why in evidence(hw_spec.family, hw_spec.kind, engine, hw_spec.vendor).items()}
        return emit_json(d)
    print_prediction(p, out)


@app.command()
def run(
    scenario: str = typer.Argument(..., help="a scenario TOML file, or the name of a shipped one (see `tokensim claims`)"),
    plot: Optional[str] = typer.Option(None, "--plot", help="write the breakdown and roofline plots (PNG and SVG) next to this path"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Predict a whole deployment described by a scenario file (wafer pipelines, disaggregation, speculation)."""
    from tokensim.output.render import print_prediction
    from tokensim.scenarios.scenario import find_scenario, load_scenario, run_scenario

    s = load_scenario(find_scenario(scenario))
    p = run_scenario(s)
    if plot:
        from tokensim.output.plots import prediction_plots
        prediction_plots(p, s.hardware, plot)
    if json_out:
        d = p.to_dict()
        d["scenario"] = s.name
        return emit_json(d)
    out.print(f"[bold]{s.title}[/bold]")
    print_prediction(p, out)


@app.command()
def claims(json_out: bool = typer.Option(False, "--json", help="print a JSON list, one object per claim")) -> None:
    """Each public speed claim against tokensim's prediction, with the assumptions that decide it and a verdict."""
    from tokensim.scenarios.claims import all_claims, claims_dir
    from tokensim.output.progress import progress_bar
    from tokensim.output.render_claims import print_claims

    n = len(list(claims_dir().glob("*.toml")))
    with progress_bar("claims", n, enabled=not json_out) as tick:
        results = all_claims(progress=tick)
    if json_out:
        return emit_json([r.to_dict() for r in results])
    print_claims(results, out)


@app.command()
def plan(
    model: str = typer.Option(..., "--model", "-m", help="catalog name or config.json path"),
    hardware: list[str] = typer.Option(..., "--hardware", "-H", help="one or more hardware names (repeat the option)"),
    max_chips: int = typer.Option(64, help="the most chips a deployment may use"),
    min_tps_user: float = typer.Option(0.0, help="tokens/s per user every deployment must reach"),
    max_ttft: float = typer.Option(float("inf"), help="TTFT limit in seconds"),
    input_tokens: int = typer.Option(1024, "--input", help="prompt tokens"),
    output_tokens: int = typer.Option(256, "--output", help="generated tokens"),
    objective: str = typer.Option("cost", help="cost, throughput or speed"),
    engine: str = typer.Option("default", help="engine class: default (GPU serving engines) or basic (llama.cpp-class)"),
    csv_path: Optional[str] = typer.Option(None, "--csv", help="write every evaluated deployment to this CSV"),
    plot: Optional[str] = typer.Option(None, "--plot", help="write the Pareto front as PNG and SVG"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Search deployments (chips, TP/PP/EP/DP, batch, precision, speculation, disaggregation) and print the Pareto front."""
    from tokensim.specs.hardware.catalog import load_hardware
    from tokensim.specs.model.catalog import load_model
    from tokensim.output.plan_table import print_plan, plan_json, write_csv
    from tokensim.plan.search import PlanRequest, candidate_groups
    from tokensim.plan.search import plan as run_plan
    from tokensim.output.progress import progress_bar

    if objective not in ("cost", "throughput", "speed"):
        raise TokensimError(f"objective = {objective!r}: expected cost, throughput or speed")
    req = PlanRequest(load_model(model), tuple(load_hardware(h) for h in hardware), max_chips=max_chips,
                      min_tps_user=min_tps_user, max_ttft_s=max_ttft, input_tokens=input_tokens,
                      output_tokens=output_tokens, objective=objective, engine=engine)
    n = sum(len(candidate_groups(req, h)) for h in req.hardware)
    with progress_bar("planning", n, enabled=not json_out) as tick:
        result = run_plan(req, progress=tick)
    if csv_path:
        write_csv(result, csv_path)
    if plot:
        from tokensim.output.plots import pareto
        pareto([dict(result.point(i), hardware=result.point(i)["deployment"]["hardware"], front=True,
                     best=(i == result.best)) for i in result.front], plot)
    if json_out:
        return emit_json(plan_json(result))
    print_plan(result, req, out)
    if result.best is None:
        raise typer.Exit(1)


@app.command()
def compare(
    a: str = typer.Argument(..., help="scenario name/file, or model@hardware[:tp=8,batch=4,...]"),
    b: str = typer.Argument(..., help="the same for the second system"),
    plot: Optional[str] = typer.Option(None, "--plot", help="write the waterfall as PNG and SVG"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Explain the tokens/s-per-user gap between two systems as a waterfall of named factors."""
    import math

    from tokensim.plan.compare import parse_setup, waterfall

    sa, sb = parse_setup(a), parse_setup(b)
    factors, speed_a, speed_b, total = waterfall(sa, sb)
    if plot:
        from tokensim.output.plots import waterfall as draw
        draw([(f.name, f.ratio) for f in factors], total, plot)
    if json_out:
        return emit_json({"a": sa.label, "b": sb.label, "tokens_per_s_per_user_a": speed_a, "tokens_per_s_per_user_b": speed_b,
                          "ratio": total, "factors": [{"name": f.name, "ratio": f.ratio, "detail": f.detail} for f in factors],
                          "product_of_factors": math.prod(f.ratio for f in factors)})
    t = Table(title=f"{sb.label} against {sa.label}: {speed_b:.1f} / {speed_a:.1f} tokens/s per user = {total:.2f}x",
              title_justify="left")
    for col in ("factor (swapped in this order)", "x", "cumulative", "what changed"):
        t.add_column(col)
    cum = 1.0
    for f in factors:
        cum *= f.ratio
        t.add_row(f.name, f"{f.ratio:.3f}", f"{cum:.3f}", f.detail)
    out.print(t)


@app.command()
def agent(
    scenarios: list[str] = typer.Argument(..., help="scenario names or files, one per deployment to compare"),
    session: Optional[str] = typer.Option(None, help="a JSONL or TOML list of calls; default: the built-in coding loop"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """End-to-end time of an agent session on several deployments, and the share spent waiting on the model."""
    from tokensim.scenarios.agent import coding_loop, load_session, session_time
    from tokensim.scenarios.scenario import find_scenario, load_scenario, run_scenario

    sess = load_session(session) if session else coding_loop()
    rows = []
    for name in scenarios:
        s = load_scenario(find_scenario(name))
        rows.append(session_time(sess, run_scenario(s), s.name))
    if json_out:
        return emit_json({"session": sess.name, "calls": len(sess.calls), "deployments": [r.to_dict() for r in rows]})
    t = Table(title=f"agent session: {sess.name}", title_justify="left")
    for col in ("deployment", "wall time", "waiting on the model", "tools"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.deployment, f"{r.total_s / 60:.1f} min", f"{r.model_s / 60:.1f} min ({r.model_share:.0%})", f"{r.tool_s / 60:.1f} min")
    out.print(t)


@app.command()
def report(
    scenarios: list[str] = typer.Argument(..., help="scenario names or .toml files"),
    output: str = typer.Option("tokensim-report.html", "--output", "-o", help="HTML file to write"),
    title: str = typer.Option("tokensim report", help="page title"),
) -> None:
    """One self-contained HTML report: assumptions, prediction with range, breakdown, plots, claim verdicts."""
    from tokensim.output.report import write_report

    out.print(f"wrote {write_report(scenarios, output, title=title)}")


@app.command()
def validate(
    measurements: Optional[str] = typer.Option(None, "--measurements", help="CSV with the columns of the shipped measurements.csv"),
    plot: Optional[str] = typer.Option(None, "--plot", help="write predicted against measured (PNG and SVG)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Predict every published measurement and report the error (per row, by family, by metric)."""
    from tokensim.output.progress import progress_bar
    from tokensim.output.render_validation import print_validation
    from tokensim.validate.run import shipped_measurements, validate as run_validation
    from tokensim.validate.table import read_rows

    path = measurements or shipped_measurements()
    n = len(read_rows(path))
    with progress_bar("validating", n, enabled=not json_out) as tick:
        results, summary = run_validation(path, progress=tick)
    if plot:
        from tokensim.output.plots import predicted_vs_measured
        predicted_vs_measured(results, plot)
    if json_out:
        return emit_json({"rows": [r.to_dict() for r in results], "summary": summary.to_dict()})
    print_validation(results, summary, out)


@app.command()
def fit(
    measurements: Optional[str] = typer.Option(None, "--measurements", help="CSV to fit on (default: the shipped one)"),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="where to write fitted.toml (default: the package's)"),
    loso: bool = typer.Option(True, help="also report leave-one-source-out error"),
    json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Fit the empirical constants on the measurements and write fitted.toml with date and residuals."""
    from pathlib import Path

    from tokensim.output.progress import progress_bar
    from tokensim.validate.fit import PARAMS, buildable, run_fit
    from tokensim.validate.run import shipped_measurements

    path = measurements or shipped_measurements()
    target = Path(output) if output else Path(str(shipped_measurements())).with_name("fitted.toml")
    n_sources = len({c.row.source_key for c in buildable(path)}) if loso else 0
    with progress_bar("fitting", 2 * len(PARAMS) + n_sources, enabled=not json_out) as tick:
        report = run_fit(path, target, loso=loso, progress=tick)
    report.pop("residuals")
    if json_out:
        return emit_json(report)
    out.print(f"fitted {report['fitted_constants']} constants on {report['rows']} rows -> {target}")
    out.print(f"in-sample: median |error| {report['in_sample']['median_abs_error']:.1%}, p90 {report['in_sample']['p90_abs_error']:.1%}")
    lo = report.get("leave_one_source_out")
    if lo and lo["rows"]:
        out.print(f"leave-one-source-out: median |error| {lo['median_abs_error']:.1%}, p90 {lo['p90_abs_error']:.1%} ({lo['rows']} rows)")
    for k, v in report["values"].items():
        out.print(f"  {k} = {v:.4g}")


def main() -> None:
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except TokensimError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.stderr.write("aborted\n")
        sys.exit(1)
    except Exception as exc:  # usage errors of the click bundled with typer: one message, exit 2
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            sys.stderr.write(f"error: {exc.format_message()} (see tokensim --help)\n")
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
