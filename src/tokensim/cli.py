"""The `tokensim` command: a thin layer over the library. Bad input exits 2 with one line, never a traceback."""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import typer
from rich.console import Console
from rich.table import Table

from tokensim.cli_serving import ENGINE_VERSION_HELP, FUSIONS_HELP, P2P_HELP
from tokensim.errors import bad_value
from tokensim.output.failures import OneLineErrors
from tokensim.output.files import check_target
from tokensim.output.json_out import emit_json
from tokensim.perf.engines import parse_fusions

out = Console(width=None if sys.stdout.isatty() else 150)
note = Console(stderr=True, width=None if sys.stderr.isatty() else 150)   # what was written where, beside --json


app = typer.Typer(name="tokensim", cls=OneLineErrors, add_completion=True, no_args_is_help=True,
                  pretty_exceptions_enable=False,
                  help="Predict, explain and plan LLM token-generation speed on GPUs, wafers and LPUs.")


# ---- choices: listed by --help, offered by shell completion, refused with the list when misspelt ----

def precision_names() -> list[str]:
    """Stored precisions the library knows (specs/precision.py PRECISIONS)."""
    from tokensim.specs.precision import PRECISIONS

    return list(PRECISIONS)


def compute_names() -> list[str]:
    from tokensim.specs.precision import COMPUTE_ORDER

    return list(COMPUTE_ORDER)


def engine_names() -> list[str]:
    """Every engine name the library accepts that can be typed as one word (perf/constants.py ENGINES: profile names
    and their spellings, lower case), read when the CLI is built so that a profile added there is offered here."""
    from tokensim.perf.constants import ENGINES

    return list(dict.fromkeys(e.lower() for e in ENGINES if re.fullmatch(r"[\w.+-]+", e)))


def engine_profile_names() -> list[str]:
    """The engine profiles themselves (what --help shows; the other spellings are accepted too)."""
    try:
        from tokensim.perf.engines import engine_profiles
    except ImportError:
        return engine_names()
    return [name for name in engine_profiles() if name in engine_names()]


def choices(name: str, values: Iterable[str]) -> type[StrEnum]:
    return StrEnum(name, {v: v for v in values})        # type: ignore[return-value]


class Objective(StrEnum):
    cost = "cost"
    throughput = "throughput"
    speed = "speed"


class SchemaKind(StrEnum):
    scenario = "scenario"
    hardware = "hardware"
    session = "session"


if TYPE_CHECKING:          # for the type checker a choice is its string; typer needs the enums built below
    from tokensim.specs.hardware.spec import HardwareSpec

    Precision: TypeAlias = str
    Compute: TypeAlias = str
    Engine: TypeAlias = str
else:
    Precision = choices("Precision", precision_names())
    Compute = choices("Compute", compute_names())
    Engine = choices("Engine", engine_names())


ENGINE_METAVAR = f"<{'|'.join(engine_profile_names())}>"
ENGINE_HELP = ("serving engine profile (data/engines); other spellings are accepted too: "
               + ", ".join(n for n in engine_names() if n not in engine_profile_names()))


def plain(choice: str | None) -> str | None:
    """The string behind a choice (the library takes plain strings)."""
    return None if choice is None else str(choice)


def renamed(value: Any, old: Any, flag: str, old_flag: str, default: Any) -> Any:
    """An option's value given as `flag`, or by its old spelling `old_flag` (hidden, still accepted)."""
    if old is None:
        return value
    if value != default and value != old:
        raise bad_value(flag, value, f"one value: {old_flag} (its old spelling) says {old!r}")
    return old


def wrote(paths: Iterable[Path]) -> None:
    note.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False, soft_wrap=True)
    note.file.flush()


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tokensim")
    except PackageNotFoundError:
        return "unknown (not installed; pip install . sets it)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tokensim {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    pass


@app.command()
def models(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List the model catalog."""
    from tokensim.output.render_catalog import model_rows, print_models

    rows = model_rows()
    if json_out:
        return emit_json(rows)
    print_models(rows, out)


@app.command()
def hardware(
    action: str | None = typer.Argument(None, help="'probe': measure this machine (memory bandwidth, GEMM rates, cores)"),
    out_path: str | None = typer.Option(None, "--out", "-o", help="with probe: write a hardware file here"),
    torch_python: str | None = typer.Option(None, "--torch-python",
                                            help="with probe: measure the bf16 GEMM rate with torch in this Python "
                                                 "(e.g. an inference engine's venv/bin/python)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """List the hardware catalog; `tokensim hardware probe -o FILE` measures this machine into a hardware file."""
    from tokensim.output.render_catalog import hardware_rows, print_hardware

    if action is not None:
        if action != "probe":
            raise bad_value("action", action, "probe (or nothing, to list the catalog)")
        from tokensim.cli_serving import probe_command
        return probe_command(out, note, out_path, json_out, torch_python)

    rows = hardware_rows()
    if json_out:
        return emit_json(rows)
    print_hardware(rows, out)


@app.command()
def predict(
    model: str = typer.Option("llama-3.1-8b", "--model", "-m", help="catalog name or config.json path"),
    hardware: str = typer.Option("h100-sxm", "--hardware", "-H", help="catalog name or hardware TOML/YAML path"),
    chips: int | None = typer.Option(None, help="total chips (default: the fewest that fit)"),
    tp: int | None = typer.Option(None, help="tensor-parallel degree"),
    pp: int | None = typer.Option(None, help="pipeline stages"),
    ep: int = typer.Option(1, help="expert-parallel degree"),
    dp: int = typer.Option(1, help="data-parallel replicas"),
    attn_dp: int = typer.Option(1, help="attention data-parallel ranks inside a replica (with --ep for MoE)"),
    overlap_comm: bool = typer.Option(False, "--overlap-comm", help="hide EP all-to-all behind compute (two micro-batches)"),
    batch: int = typer.Option(1, help="concurrent sequences"),
    input_tokens: int = typer.Option(1024, "--input-tokens", help="prompt tokens per sequence"),
    output_tokens: int = typer.Option(256, "--output-tokens", help="generated tokens per sequence"),
    old_input: int | None = typer.Option(None, "--input", hidden=True),
    old_output: int | None = typer.Option(None, "--output", hidden=True),
    weights: Precision | None = typer.Option(None, case_sensitive=False,
                                             help="stored weight precision (default: the checkpoint's)"),
    expert_weights: Precision | None = typer.Option(None, case_sensitive=False, help="stored precision of routed experts only"),
    compute: Compute | None = typer.Option(None, case_sensitive=False, help="compute format (default: the weights' native one)"),
    kv: Precision = typer.Option("bf16", case_sensitive=False, help="KV-cache precision"),
    engine: Engine = typer.Option("default", case_sensitive=False, metavar=ENGINE_METAVAR, help=ENGINE_HELP),
    engine_version: str | None = typer.Option(None, "--engine-version",
                                              help=ENGINE_VERSION_HELP),
    fusions: str | None = typer.Option(None, "--fusions", help=FUSIONS_HELP),
    p2p: bool | None = typer.Option(None, "--p2p/--no-p2p", help=P2P_HELP),
    plot: str | None = typer.Option(None, "--plot", help="write the breakdown, roofline, speed-vs-batch (and, on wafers/LPUs, "
                                    "TTFT-vs-pipeline-depth) plots as PNG and SVG beside this path"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Predict tokens/s per user, TTFT, throughput and memory, with the per-op breakdown."""
    from tokensim.output.render import print_prediction
    from tokensim.prediction.predictor import predict as run_predict
    from tokensim.specs.hardware.catalog import load_hardware
    from tokensim.specs.hardware.p2p import with_peer_to_peer

    stem = check_target(plot, "--plot") if plot else None
    hardware_spec = with_peer_to_peer(load_hardware(hardware), p2p)
    kw = dict(weights=plain(weights), expert_weights=plain(expert_weights), compute=plain(compute), kv=str(kv),
              engine=str(engine), engine_version=engine_version, fusions=parse_fusions(fusions),
              input_tokens=renamed(input_tokens, old_input, "--input-tokens", "--input", 1024),
              output_tokens=renamed(output_tokens, old_output, "--output-tokens", "--output", 256))
    p = run_predict(model, hardware_spec, chips=chips, tp=tp, pp=pp, ep=ep, dp=dp, attn_dp=attn_dp,
                    overlap_comm=overlap_comm, batch=batch, **kw)
    if stem:
        wrote(_prediction_plots(p, model, hardware_spec, stem, kw))
    if json_out:
        from tokensim.perf.constants import evidence, for_hardware

        k = for_hardware(hardware_spec, str(engine))
        d = p.to_dict()
        d["constants"] = {name: {"value": getattr(k, name), "evidence": why}
                          for name, why in evidence(hardware_spec.family, hardware_spec.kind, str(engine),
                                                    hardware_spec.vendor, chip=hardware_spec.name).items()}
        return emit_json(d)
    print_prediction(p, out)


def _prediction_plots(p: Any, model: str, hw: HardwareSpec, stem: Path, kw: dict[str, Any]) -> list[Path]:
    """Every plot of `predict --plot`, written together or not at all."""
    from tokensim.output.files import atomic_outputs
    from tokensim.output.plot_data import speed_vs_batch_points, ttft_vs_depth_points
    from tokensim.output.plots import prediction_plots, sibling, speed_vs_batch, ttft_vs_depth

    d = p.deployment
    with atomic_outputs() as outputs:
        paths = prediction_plots(p, hw, stem, outputs, "--plot")
        points = speed_vs_batch_points(model, [hw], tp=d.tp, pp=d.pp, ep=d.ep, dp=d.dp, **kw)
        paths += speed_vs_batch(points, sibling(stem, "speed-vs-batch"), outputs, "--plot")
        if hw.kind in ("wafer", "lpu") and d.tp == 1:
            paths += ttft_vs_depth(ttft_vs_depth_points(model, hw, **kw), sibling(stem, "ttft-vs-depth"), outputs, "--plot")
    return paths


@app.command()
def run(
    scenario: str = typer.Argument(..., help="a scenario TOML file, or the name of a shipped one (see `tokensim claims`)"),
    plot: str | None = typer.Option(None, "--plot",
                                    help="write the breakdown and roofline plots (PNG and SVG) next to this path"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Predict a whole deployment described by a scenario file (wafer pipelines, disaggregation, speculation)."""
    from tokensim.output.render import print_prediction
    from tokensim.scenarios.scenario import find_scenario, load_scenario, run_scenario

    stem = check_target(plot, "--plot") if plot else None
    s = load_scenario(find_scenario(scenario))
    p = run_scenario(s)
    if stem:
        from tokensim.output.plots import prediction_plots
        wrote(prediction_plots(p, s.hardware, stem, field="--plot"))
    if json_out:
        d = p.to_dict()
        d["scenario"] = s.name
        return emit_json(d)
    out.print(f"[bold]{s.title}[/bold]")
    print_prediction(p, out)


@app.command()
def claims(json_out: bool = typer.Option(False, "--json", help="print a JSON list, one object per claim")) -> None:
    """Each public speed claim against tokensim's prediction, with the assumptions that decide it and a verdict."""
    from tokensim.output.progress import progress_bar
    from tokensim.output.render_claims import print_claims
    from tokensim.scenarios.claims import all_claims, claims_dir

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
    input_tokens: int = typer.Option(1024, "--input-tokens", help="prompt tokens per sequence"),
    output_tokens: int = typer.Option(256, "--output-tokens", help="generated tokens per sequence"),
    old_input: int | None = typer.Option(None, "--input", hidden=True),
    old_output: int | None = typer.Option(None, "--output", hidden=True),
    objective: Objective = typer.Option(Objective.cost, case_sensitive=False, help="what the best deployment maximizes"),
    engine: Engine = typer.Option("default", case_sensitive=False, metavar=ENGINE_METAVAR, help=ENGINE_HELP),
    engine_version: str | None = typer.Option(None, "--engine-version",
                                              help=ENGINE_VERSION_HELP),
    fusions: str | None = typer.Option(None, "--fusions", help=FUSIONS_HELP + "; each chip runs those it has kernels for"),
    p2p: bool | None = typer.Option(None, "--p2p/--no-p2p", help=P2P_HELP + " (applied to every --hardware with a "
                                    "PCIe link)"),
    csv_path: str | None = typer.Option(None, "--csv", help="write every evaluated deployment to this CSV"),
    plot: str | None = typer.Option(None, "--plot", help="write the Pareto front as PNG and SVG"),
    rate: float | None = typer.Option(None, "--rate", help="capacity planning: requests/s to serve (with --slo-ttft, "
                                      "--slo-tpot); the simulator checks the cheapest candidates near the knee"),
    slo_ttft: float = typer.Option(2.0, "--slo-ttft", help="with --rate: 99th-percentile TTFT objective, seconds"),
    slo_tpot: float = typer.Option(1 / 30, "--slo-tpot", help="with --rate: mean time per output token objective, seconds"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Search deployments (chips, TP/PP/EP/DP, batch, precision, speculation, disaggregation) and print the Pareto
    front; with --rate, the cheapest deployments that serve that rate within the TTFT and TPOT objectives."""
    from tokensim.output.plan_table import plan_json, print_plan, write_csv
    from tokensim.output.progress import progress_bar
    from tokensim.plan.search import PlanRequest, candidate_groups
    from tokensim.plan.search import plan as run_plan
    from tokensim.specs.hardware.catalog import load_hardware
    from tokensim.specs.hardware.p2p import with_peer_to_peer_where_pcie
    from tokensim.specs.model.catalog import load_model

    chips = with_peer_to_peer_where_pcie(tuple(load_hardware(h) for h in hardware), p2p)
    if rate is not None:
        from tokensim.cli_serving import capacity_command
        return capacity_command(out, model, chips, rate, slo_ttft, slo_tpot, max_chips,
                                renamed(input_tokens, old_input, "--input-tokens", "--input", 1024),
                                renamed(output_tokens, old_output, "--output-tokens", "--output", 256),
                                "vllm" if str(engine) == "default" else str(engine), json_out, parse_fusions(fusions),
                                engine_version)
    csv_target = check_target(csv_path, "--csv") if csv_path else None
    plot_target = check_target(plot, "--plot") if plot else None
    req = PlanRequest(load_model(model), chips, max_chips=max_chips,
                      min_tps_user=min_tps_user, max_ttft_s=max_ttft,
                      input_tokens=renamed(input_tokens, old_input, "--input-tokens", "--input", 1024),
                      output_tokens=renamed(output_tokens, old_output, "--output-tokens", "--output", 256),
                      objective=str(objective), engine=str(engine), engine_version=engine_version,
                      fusions=parse_fusions(fusions))
    n = sum(len(candidate_groups(req, h)) for h in req.hardware)
    with progress_bar("planning", n, enabled=not json_out) as tick:
        result = run_plan(req, progress=tick)
    if csv_target:
        wrote([write_csv(result, csv_target, "--csv")])
    if plot_target:
        from tokensim.output.plots import pareto
        wrote(pareto([dict(result.point(i), hardware=result.point(i)["deployment"]["hardware"], front=True,
                           best=(i == result.best)) for i in result.front], plot_target, field="--plot"))
    if json_out:
        return emit_json(plan_json(result))
    print_plan(result, req, out)
    if result.best is None:
        raise typer.Exit(1)


@app.command()
def compare(
    a: str = typer.Argument(..., help="scenario name/file, or model@hardware[:tp=8,batch=4,...]"),
    b: str = typer.Argument(..., help="the same for the second system"),
    plot: str | None = typer.Option(None, "--plot", help="write the waterfall as PNG and SVG"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Explain the tokens/s-per-user gap between two systems as a waterfall of named factors."""
    import math

    from tokensim.plan.compare import parse_setup, waterfall

    stem = check_target(plot, "--plot") if plot else None
    sa, sb = parse_setup(a), parse_setup(b)
    factors, speed_a, speed_b, total = waterfall(sa, sb)
    if stem:
        from tokensim.output.plots import waterfall as draw
        wrote(draw([(f.name, f.ratio) for f in factors], total, stem, field="--plot"))
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
    session: str | None = typer.Option(None, help="a JSONL or TOML list of calls; default: the built-in coding loop"),
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
        t.add_row(r.deployment, f"{r.total_s / 60:.1f} min", f"{r.model_s / 60:.1f} min ({r.model_share:.0%})",
                  f"{r.tool_s / 60:.1f} min")
    out.print(t)


@app.command()
def report(
    scenarios: list[str] = typer.Argument(..., help="scenario names or .toml files"),
    out_path: str = typer.Option("tokensim-report.html", "--out", "-o", help="HTML file to write"),
    old_out: str | None = typer.Option(None, "--output", hidden=True),
    title: str = typer.Option("tokensim report", help="page title"),
) -> None:
    """One self-contained HTML report: assumptions, prediction with range, breakdown, plots, claim verdicts."""
    from tokensim.output.report import write_report

    target = renamed(out_path, old_out, "--out", "--output", "tokensim-report.html")
    out.print(f"wrote {write_report(scenarios, target, title=title, field='--out')}", highlight=False, soft_wrap=True)


@app.command()
def validate(
    measurements: str | None = typer.Option(None, "--measurements", help="CSV with the columns of the shipped measurements.csv"),
    serving: bool = typer.Option(False, "--serving", help="also the measured serving runs under load: silicon_dev.csv "
                                 "(steady-state TPOT of every run, and a sample simulated) and the vLLM traces replayed"),
    silicon: str | None = typer.Option(None, "--silicon", help="with --serving: measured runs in aiconfigurator's "
                                       "silicon_sample layout to judge instead of the shipped silicon_dev.csv"),
    sample: int = typer.Option(120, "--sample", min=0, help="with --serving: runs to simulate (0: all of them, slow)"),
    workers: int = typer.Option(1, "--workers", min=1, help="with --serving: processes simulating the runs (the same "
                                "results with any count)"),
    plot: str | None = typer.Option(None, "--plot", help="write predicted against measured (PNG and SVG)"),
    runs: str | None = typer.Option(None, "--runs", help="with --serving: write one CSV line per simulated run "
                                    "(measured, simulated and steady-state figures, the constants that judged it)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Predict every published measurement and report the error (per row, by family, by metric, and the share of
    rows inside their 80 % range); with --serving, the serving runs under load too."""
    from tokensim.output.progress import progress_bar
    from tokensim.output.render_validation import print_validation
    from tokensim.validate.run import shipped_measurements
    from tokensim.validate.run import validate as run_validation
    from tokensim.validate.table import read_rows

    stem = check_target(plot, "--plot") if plot else None
    if runs is not None and not serving:
        raise bad_value("--runs", runs, "to be given with --serving (it lists the simulated serving runs)")
    runs_path = check_target(runs, "--runs") if runs is not None else None
    path = measurements or shipped_measurements()
    n = len(read_rows(path))
    with progress_bar("validating", n, enabled=not json_out) as tick:
        results, summary = run_validation(path, progress=tick)
    if stem:
        from tokensim.output.plots import predicted_vs_measured
        wrote(predicted_vs_measured(results, stem, field="--plot"))
    load = None
    if serving:
        from tokensim.cli_serving import validate_serving
        if silicon is not None:
            _readable(silicon, "--silicon")
        load = validate_serving(sample, progress_bar, enabled=not json_out, silicon=silicon, workers=workers)
        if runs_path is not None:
            from tokensim.validate.run_table import write_runs
            wrote([write_runs(runs_path, load["runs"])])
    if json_out:
        doc = {"rows": [r.to_dict() for r in results], "summary": summary.to_dict()}
        if load is not None:
            doc["serving"] = load
        return emit_json(doc)
    print_validation(results, summary, out)
    if load is not None:
        from tokensim.cli_serving import print_serving_validation
        print_serving_validation(load, out)


def _readable(path: str, option: str) -> None:
    """A file named on the command line exists and is a file (one line naming the option otherwise)."""
    if not Path(path).is_file():
        raise bad_value(option, path, "the path of a CSV file that exists")


def default_fitted_path() -> Path:
    """Where `tokensim fit` writes without -o: the user's data folder, never the installed package."""
    from tokensim.output.files import user_data_dir

    return user_data_dir() / "fitted.toml"


def _fit_target(out_path: str | None) -> Path:
    if out_path:
        return check_target(out_path, "--out")
    target = default_fitted_path()
    folder = next(p for p in (target.parent, *target.parent.parents) if p.exists())   # the folders below are made later
    if target.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise bad_value("--out", str(target), f"a file that can be written (the default; {str(folder)!r} is not writable): "
                        "name another with -o")
    return target


def _fitted_hint(target: Path) -> str:
    """How predictions pick up a fitted table the library does not read by itself."""
    from tokensim.perf import constants

    env = getattr(constants, "FITTED_ENV", "TOKENSIM_FITTED")
    if os.environ.get(env) == str(target):
        return f"predictions use it (${env} names it)"
    return f"predictions use it with {env}={target}"


@app.command()
def fit(
    measurements: str | None = typer.Option(None, "--measurements", help="CSV to fit on (default: the shipped one)"),
    out_path: str | None = typer.Option(None, "--out", "-o", show_default=False,
                                        help="where to write fitted.toml (default: $XDG_DATA_HOME/tokensim/fitted.toml, "
                                             "else ~/.local/share/tokensim/fitted.toml)"),
    loso: bool = typer.Option(True, help="also report out-of-sample errors (each source group, and each (system, "
                              "engine) pair of the serving runs, left out of the fit)"),
    serving: str | None = typer.Option(None, "--serving", help="serving runs in aiconfigurator's silicon_sample layout "
                                       "to fit on beside the measurements (default: the shipped silicon_dev.csv)"),
    no_serving: bool = typer.Option(False, "--no-serving", help="fit on the published measurements alone"),
    json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
    workers: int | None = typer.Option(None, "--workers", min=1, show_default=False,
                                       help="processes for the simulations and the out-of-sample refits (default: the CPUs "
                                            "this process may use); any count gives the same fit"),
    keep_constants: bool = typer.Option(False, "--keep-constants", help="no fit: write the constants in use back "
                                        "unchanged with a new report, its out-of-sample refits redone (after a change to "
                                        "the simulation or to how rows are read)"),
) -> None:
    """Fit the empirical constants and the engine profiles on the measurements and the measured serving runs; write
    fitted.toml with its report and residuals (25 to 50 minutes on 2 cores with the out-of-sample refits; where no
    progress bar can be drawn, a progress line on stderr every minute)."""
    import tempfile

    from tokensim.output.files import atomic_write
    from tokensim.output.progress import progress_bar
    from tokensim.validate.fit import PARAMS, buildable, source_groups
    from tokensim.validate.fit_report import run_fit, serving_cases
    from tokensim.validate.run import shipped_measurements

    target = _fit_target(out_path)
    path = measurements or shipped_measurements()
    if serving is not None:
        _readable(serving, "--serving")
    silicon = False if no_serving else serving
    n_groups = len(set(source_groups(buildable(path)).values())) if loso else 0
    n_pairs = len({c.pair for c in serving_cases(silicon)}) if loso and not no_serving else 0
    # over an hour on 2 cores: a line on stderr every minute where no bar can be drawn (a log, a pipe, --json)
    fitting = 0 if keep_constants else 2 * len(PARAMS)
    with progress_bar("fitting", fitting + n_groups + n_pairs, enabled=not json_out,
                      plain_every_s=60.0) as tick:
        with tempfile.TemporaryDirectory(prefix="tokensim-fit-") as scratch:   # the library writes; we move it in place
            written = Path(scratch) / "fitted.toml"
            report = run_fit(path, written, loso=loso, progress=tick, silicon_path=silicon, workers=workers,
                             keep_constants=keep_constants)
            text = written.read_text(encoding="utf-8")
    if not out_path:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise bad_value("--out", str(target), f"a file that can be written ({exc.strerror}): name another with -o") from None
    atomic_write(target, text, "--out")
    report.pop("residuals", None)
    report["written_to"] = str(target)
    if json_out:
        return emit_json(report)
    out.print(f"fitted {report['fitted_constants']} constants on {report['rows']} rows", highlight=False)
    out.print(f"wrote {target}", highlight=False, soft_wrap=True)
    out.print(_fitted_hint(target), highlight=False, soft_wrap=True)
    sample = report["in_sample"]
    out.print(f"in-sample: median |error| {sample['median_abs_error']:.1%}, p90 {sample['p90_abs_error']:.1%}")
    lo = report.get("leave_one_source_out")
    if lo and lo["rows"]:
        out.print(f"leave-one-source-out: median |error| {lo['median_abs_error']:.1%}, p90 {lo['p90_abs_error']:.1%} "
                  f"({lo['rows']} rows)")
    for k, v in report["values"].items():
        out.print(f"  {k} = {v:.4g}")


@app.command()
def schema(kind: SchemaKind = typer.Argument(..., help="which input file", case_sensitive=False)) -> None:
    """Print the JSON Schema of an input file (scenario, hardware or agent session), for editors and validators."""
    from tokensim.inputs.schema import json_schema

    emit_json(json_schema(str(kind)))


def _register_serving() -> None:
    from tokensim.cli_serving import register, register_calibrate
    register(app, out, note)
    register_calibrate(app, out, note)


_register_serving()


def main() -> None:
    """The console script (and `python -m tokensim`)."""
    app()


if __name__ == "__main__":
    main()
