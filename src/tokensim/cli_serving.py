"""The serving commands of `tokensim`: simulate a deployment under load, benchmark a real endpoint, emulate a
deployment behind an OpenAI-compatible endpoint, probe this machine. Registered on the app by cli.py."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tokensim.errors import TokensimError, bad_value
from tokensim.perf.engines import parse_fusions

if TYPE_CHECKING:
    from tokensim.specs.hardware.spec import HardwareSpec

STAT_KEYS = ("mean", "p50", "p90", "p99")
P2P_HELP = ("GPU peer-to-peer on (--p2p) or off (--no-p2p) on the chip's PCIe links, a property of the box (bare metal "
            "with the IOMMU off has it, most VMs and GeForce drivers do not); default: as the hardware file states")
ENGINE_VERSION_HELP = "the engine's release, e.g. 0.6.1: its kernels' traits (data/engines)"
FUSIONS_HELP = ("kernel fusions the engine launch runs, comma-separated: allreduce_norm (all-reduce + residual + RMSNorm "
                "in one kernel), moe_gemm1 (trtllm-gen MoE, Blackwell); default: none beyond what the fitted kernel "
                "gap absorbs (docs/model.md 1.4)")


def _rates(text: str | None) -> list[float]:
    if text is None:
        return []
    out = []
    for part in text.split(","):
        try:
            rate = float(part)
        except ValueError:
            raise bad_value("--rate", text, "requests per second, or a comma-separated list of them") from None
        if not (math.isfinite(rate) and rate > 0):
            raise bad_value("--rate", part.strip(), "a finite number of requests per second > 0")
        out.append(rate)
    return out


# simulate's deployment parameters (a scenario or a trace folder's meta.json states them instead)
LAYOUT_PARAMS = ("model", "hardware", "chips", "tp", "pp", "ep", "attn_dp", "weights", "kv", "engine", "engine_version",
                 "fusions")


def _refuse_ignored_flags(ctx: typer.Context, scenario: str | None, trace_folder) -> None:
    """simulate: a deployment flag given beside a scenario, or beside a trace folder whose meta.json states the
    deployment, is an error naming the flag and its value (the deployment would not read it), not silently dropped.
    A flag counts as given when it is on the command line, whatever its value."""
    folder_states = trace_folder is not None and trace_folder.hardware is not None
    if not scenario and not folder_states:
        return
    flags = {p.name: p.opts[0] for p in ctx.command.params}         # "attn_dp" -> "--attn-dp", as the user wrote it
    for name in LAYOUT_PARAMS:
        if name == "model" and not scenario:
            continue                    # a trace folder needs --model: meta.json names it only in words
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "COMMANDLINE":     # typer bundles its own click: match by name
            flag = flags[name]
            where = ("the scenario states the deployment: edit its [deployment] or [model]/[hardware]" if scenario else
                     "the trace folder's meta.json states the layout, engine and GPU, and the rest is the engine's "
                     "default")
            raise bad_value(flag, ctx.params[name], f"no {flag} beside {'a scenario' if scenario else 'a trace folder'} "
                                                    f"({where})")


def _engine_from_args(scenario: str | None, model: str, hardware: str, tp: int | None, pp: int | None, chips: int | None,
                      ep: int, attn_dp: int, weights: str | None, kv: str, engine: str, trace_folder=None,
                      p2p: bool | None = None, engine_version: str | None = None,
                      fusions: tuple[str, ...] | None = None):
    """An EngineSpec from a scenario, a trace folder's meta.json, or predict-style flags, with its name, its
    hardware family and its engine (what the ranges under load are looked up by); `p2p` switches GPU peer-to-peer on
    or off on the chip's PCIe links (None: as its hardware file, or the scenario, states)."""
    from tokensim.prediction.predictor import predict
    from tokensim.prediction.serving import engine_for, trace_engine
    from tokensim.specs.hardware.catalog import load_hardware
    from tokensim.specs.hardware.p2p import with_peer_to_peer
    from tokensim.specs.model.catalog import load_model

    if scenario:
        from tokensim.scenarios.scenario import find_scenario, load_scenario, scenario_constants
        s = load_scenario(find_scenario(scenario))
        hw = with_peer_to_peer(s.hardware, p2p)
        return (engine_for(s.model, hw, s.deployment, constants=scenario_constants(s)), s.model.name, hw.family,
                s.deployment.engine)
    if trace_folder is not None and trace_folder.hardware is not None:
        spec, hw, dep = trace_engine(trace_folder, load_model(model), p2p=p2p)
        return spec, model, hw.family, dep.engine
    hw = with_peer_to_peer(load_hardware(hardware), p2p)
    p = predict(model, hw, chips=chips, tp=tp, pp=pp, ep=ep, attn_dp=attn_dp, weights=weights, kv=kv,
                engine=engine, engine_version=engine_version, fusions=fusions)   # predict's layout resolver and fit check
    return engine_for(load_model(model), hw, p.deployment), model, hw.family, p.deployment.engine


def _caps(spec, text: str | None) -> list[tuple[tuple[str, int], ...]]:
    """The scheduler settings of each --max-running value (one empty set when it is not given)."""
    if text is None:
        return [()]
    from tokensim.sim.sweep import RUNNING_CAP_SETTING
    kind = type(spec.scheduler).__name__
    setting = RUNNING_CAP_SETTING.get(type(spec.scheduler))
    out: list[tuple[tuple[str, int], ...]] = []
    for part in text.split(","):
        cap = int(part) if part.strip().isdigit() else 0
        if setting is None or cap < 1:
            raise bad_value("--max-running", part.strip(), f"a scheduler with a cap on running requests, not {kind}"
                            if setting is None else "a whole number of requests >= 1, or a comma-separated list of them")
        try:
            dataclasses.replace(spec.scheduler, **{setting: cap})
        except TokensimError as exc:
            raise bad_value("--max-running", cap, f"a cap {kind} accepts ({exc})") from None
        out.append(((setting, cap),))
    return out


def _engine_timed(path) -> bool:
    """A trace whose records carry its engine's queued_ts (vLLM's per-request stats), not only a client's times."""
    from tokensim.sim import load_trace_measurements
    try:
        return bool(load_trace_measurements(path)["engine_clock"].all())
    except TokensimError:
        return False                    # a CSV trace, or records without token times: arrivals only


def _row(label: str, s: dict) -> list[str]:
    def ms(d: dict, k: str) -> str:
        v = d.get(k)
        return "-" if v is None else f"{v * 1e3:.1f}"
    return [label, str(s["completed"]), ms(s["ttft_s"], "mean"), ms(s["ttft_s"], "p50"), ms(s["ttft_s"], "p99"),
            ms(s["tpot_s"], "mean"), ms(s["tpot_s"], "p50"), ms(s["tpot_s"], "p99"),
            f"{s['throughput_tokens_per_s'] or 0:.0f}", f"{s['goodput_requests_per_s'] or 0:.2f}"]


RANGE_LABELS = (("TTFT", "ttft_s_mean"), ("TPOT", "tpot_s_mean"))     # measured_range's keys, as printed


def range_note(measured: dict) -> str:
    """One line: the 80 % ranges of the measured means, what they rest on and how often they held out of sample."""
    from tokensim.output.units import fmt_time
    parts = [f"{label} {fmt_time(d['low'])} - {fmt_time(d['high'])}" for label, key in RANGE_LABELS
             if (d := measured.get(key))]
    first = next(iter(measured.values()))
    held = [f"{label} {d['coverage_pair_left_out']:.0%}" for label, key in RANGE_LABELS
            if (d := measured.get(key)) and d.get("coverage_pair_left_out") is not None]
    tail = f"; built without a run's (system, engine) pair, it held {', '.join(held)} of the runs" if held else ""
    return f"80 % range of a benchmark's measured mean: {', '.join(parts)} ({first['basis']}{tail})"


def _table(title: str, rows: list[list[str]]):
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    for col in ("load", "done", "TTFT mean ms", "p50", "p99", "TPOT mean ms", "p50", "p99", "tokens/s", "goodput req/s"):
        t.add_column(col)
    for r in rows:
        t.add_row(*r)
    return t


def register(app: typer.Typer, out, note) -> None:
    from tokensim.output.files import check_target
    from tokensim.output.json_out import emit_json
    from tokensim.sim.workload import check_range_ratio

    @app.command()
    def simulate(
        ctx: typer.Context,
        scenario: str | None = typer.Argument(None, help="a scenario name or file (else --model/--hardware and layout flags)"),
        model: str = typer.Option("llama-3.1-8b", "--model", "-m", help="catalog name or config.json path"),
        hardware: str = typer.Option("h100-sxm", "--hardware", "-H", help="catalog name or hardware file"),
        chips: int | None = typer.Option(None, help="chips of one replica (default: the fewest that fit)"),
        tp: int | None = typer.Option(None, help="tensor-parallel degree"),
        pp: int | None = typer.Option(None, help="pipeline stages"),
        ep: int = typer.Option(1, help="expert-parallel degree"),
        attn_dp: int = typer.Option(1, help="attention data-parallel ranks"),
        weights: str | None = typer.Option(None, help="stored weight precision"),
        kv: str = typer.Option("bf16", help="KV-cache precision"),
        engine: str = typer.Option("vllm", help="serving engine whose scheduler is simulated: vllm, sglang, trtllm"),
        engine_version: str | None = typer.Option(None, "--engine-version",
                                                  help=ENGINE_VERSION_HELP + " and memory rules"),
        fusions: str | None = typer.Option(None, "--fusions", help=FUSIONS_HELP),
        p2p: bool | None = typer.Option(None, "--p2p/--no-p2p", help=P2P_HELP),
        replicas: int = typer.Option(1, min=1, help="replicas behind a least-outstanding-requests router"),
        rate: str | None = typer.Option(None, "--rate", help="requests/s (Poisson); a comma-separated list sweeps them"),
        concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="closed-loop clients"),
        trace: str | None = typer.Option(None, "--trace", help="a trace file (.jsonl/.csv) or a trace folder with meta.json"),
        input_tokens: int = typer.Option(1024, "--input-tokens", min=1, help="prompt tokens per request"),
        output_tokens: int = typer.Option(256, "--output-tokens", min=1, help="generated tokens per request"),
        range_ratio: float = typer.Option(1.0, "--range-ratio",
                                          help="draw each request's input and output tokens uniformly from [R x L, L], "
                                               "as the random datasets of vLLM's, SGLang's and InferenceX's benchmark "
                                               "clients do (--random-range-ratio); 1: every request exactly L"),
        requests: int = typer.Option(1000, "--requests", min=1, max=10_000_000, help="requests to simulate"),
        dataset: str | None = typer.Option(None, "--dataset",
                                           help="JSONL of input_tokens/output_tokens per request (replaces --input-tokens "
                                                "and --output-tokens; taken in order, cycled to --requests)"),
        seed: int = typer.Option(0, "--seed", min=0, help="seed of the one random generator (>= 0)"),
        slo_ttft: float | None = typer.Option(None, "--slo-ttft", help="TTFT objective in seconds (goodput)"),
        slo_tpot: float | None = typer.Option(None, "--slo-tpot", help="TPOT objective in seconds (goodput)"),
        max_running: str | None = typer.Option(None, "--max-running",
                                               help="the scheduler's cap on running requests (vLLM max_num_seqs, SGLang "
                                                    "max_running_requests, TRT-LLM max_batch_size); a list sweeps them"),
        plot: str | None = typer.Option(None, "--plot",
                                        help="latency against rate (a sweep), or CDFs and batch/KV/queue over time"),
        workers: int = typer.Option(1, "--workers", min=1,
                                    help="processes that run a sweep's simulations (with --ray local: its CPUs)"),
        ray_address: str | None = typer.Option(None, "--ray",
                                               help="run a sweep on Ray: 'local' or a cluster address "
                                                    "(pip install 'tokensim\\[ray]')"),
        json_out: bool = typer.Option(False, "--json", help="print JSON"),
    ) -> None:
        """Serve requests on a deployment in the serving simulator: queueing, batching, KV cache, the cost model's
        time for every step. Prints TTFT, TPOT, throughput and goodput."""
        from tokensim.prediction.serving import LoadSpec, read_trace_folder
        from tokensim.sim.sweep import SweepPoint, run_sweep, simulate_point
        from tokensim.validate.uncertainty import measured_range, shipped_serving_bands

        stem = check_target(plot, "--plot") if plot else None
        for name, v in (("--slo-ttft", slo_ttft), ("--slo-tpot", slo_tpot)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise bad_value(name, v, "a finite number of seconds > 0")
        rates = _rates(rate)
        folder = None
        trace_file = None
        if trace:
            path = Path(trace)
            if path.is_dir():
                folder = read_trace_folder(path)
                trace_file = folder.requests
            elif path.is_file():
                trace_file = path
            else:
                raise bad_value("--trace", trace, "a trace file or a trace folder")
        if sum(x is not None and x != [] for x in (rates or None, concurrency, trace_file)) != 1:
            raise bad_value("load", f"--rate {rate}, --concurrency {concurrency}, --trace {trace}",
                            "exactly one of --rate, --concurrency or --trace")
        if check_range_ratio(range_ratio, "--range-ratio") < 1 and (dataset is not None or trace_file is not None):
            raise bad_value("--range-ratio", range_ratio, "1 with --dataset or --trace (they carry each request's lengths)")
        data = None
        if dataset is not None:
            if trace_file is not None:
                raise bad_value("--dataset", dataset, "no --dataset with --trace (a trace carries its own lengths)")
            from tokensim.endpoints.workload import load_dataset
            load_dataset(dataset)           # a bad file is one line here, not in a worker
            data = Path(dataset)
        _refuse_ignored_flags(ctx, scenario, folder)
        spec, name, family, engine_name = _engine_from_args(scenario, model, hardware, tp, pp, chips, ep, attn_dp,
                                                            weights, kv, engine, folder, p2p, engine_version,
                                                            parse_fusions(fusions))
        if data is None and trace_file is None and spec.max_model_len is not None \
                and input_tokens + output_tokens > spec.max_model_len:
            # every request of a fixed-length load would be refused: say so instead of simulating nothing
            raise bad_value("--input-tokens", input_tokens,
                            f"input + output tokens ({input_tokens} + {output_tokens}) within the model's context of "
                            f"{spec.max_model_len} tokens")
        loads = ([LoadSpec(requests, rate_per_s=r, input_tokens=input_tokens, output_tokens=output_tokens, seed=seed,
                           dataset=data, range_ratio=range_ratio) for r in rates] or
                 [LoadSpec(requests, concurrency=concurrency, input_tokens=input_tokens, output_tokens=output_tokens,
                           trace=trace_file, seed=seed, dataset=data, range_ratio=range_ratio)])
        caps = _caps(spec, max_running)
        if stem and len(caps) > 1:
            raise bad_value("--plot", plot, "a sweep of --rate alone (one --max-running value)")
        points = [SweepPoint(spec, ld, replicas, slo_ttft, slo_tpot, settings) for settings in caps for ld in loads]
        runs: list[tuple[Any, Any]] = []
        if len(points) == 1:                # the single-run plots need the full result: requests and series
            result = simulate_point(points[0])
            runs = [(points[0].load, result)]
            summaries = [{k: v for k, v in result.summary.items() if k != "series"}]
            if trace_file is not None and _engine_timed(trace_file):
                # the trace's own clock: its engine timed each request from when its loop took it in, between steps
                engine_clock = result.engine_clock_summary()
                summaries[0]["engine_clock"] = {k: engine_clock[k] for k in ("ttft_s", "e2e_s")}
        else:
            from types import SimpleNamespace

            from tokensim.output.progress import progress_bar
            with progress_bar("simulating", len(points), enabled=not json_out) as tick:
                cpus = None if ray_address and workers == 1 else workers      # a local Ray instance: all CPUs unless told
                summaries = run_sweep(points, workers=cpus, ray_address=ray_address, progress=tick)
            runs = [(p.load, SimpleNamespace(summary=s)) for p, s in zip(points, summaries, strict=True)]
        if stem:
            from tokensim.output.serving_plots import serving_plots
            wrote_paths = serving_plots(runs, stem)
            note.print(f"wrote {', '.join(str(p) for p in wrote_paths)}", highlight=False)
        for p, s in zip(points, summaries, strict=True):
            ld = p.load
            s["load"] = {"rate_per_s": ld.rate_per_s, "concurrency": ld.concurrency, "trace": str(ld.trace) if ld.trace else None,
                         "input_tokens": None if ld.dataset else ld.input_tokens,
                         "output_tokens": None if ld.dataset else ld.output_tokens}
            if ld.range_ratio < 1:
                s["load"]["range_ratio"] = ld.range_ratio
            if ld.dataset:
                s["load"]["dataset"] = str(ld.dataset)
            if p.scheduler:
                s["scheduler"] = dict(p.scheduler)
            s["measured_range"] = measured_range(s, family, engine_name)
        if json_out:
            return emit_json(summaries[0] if len(summaries) == 1 else {"engine": spec.name, "sweep": summaries})
        rows = []
        for s in summaries:
            ld = s["load"]
            label = (f"{ld['rate_per_s']:g} req/s" if ld["rate_per_s"] else f"{ld['concurrency']} clients"
                     if ld["concurrency"] else f"trace {Path(ld['trace']).parent.name or ld['trace']}")
            rows.append(_row(label + "".join(f", {k} {v}" for k, v in s.get("scheduler", {}).items()), s))
        out.print(_table(f"{spec.name}, {replicas} replica(s)", rows))
        for row, s in zip(rows, summaries, strict=True):
            if s.get("engine_clock"):
                from tokensim.output.units import fmt_time
                t = s["engine_clock"]["ttft_s"]
                out.print(f"{row[0]}: on the trace's own clock (its engine's queued_ts, stamped between steps): TTFT "
                          f"mean {fmt_time(t['mean'])}, p50 {fmt_time(t['p50'])}, p99 {fmt_time(t['p99'])}",
                          highlight=False)
            if s.get("measured_range"):
                out.print(f"{row[0]}: {range_note(s['measured_range'])}", highlight=False)
            elif shipped_serving_bands():
                out.print(f"{row[0]}: no measured serving run shares this chip family ({family}) or engine "
                          f"({engine_name}), so the simulator's error here is untested: no range", highlight=False)
            refused = s["rejected"]
            if refused["total"]:
                why = ", ".join(f"{k} {v}" for k, v in refused["reasons"].items() if v)
                note.print(f"{row[0]}: {refused['total']} of {s['requests']} requests rejected ({why})", highlight=False)

    @app.command()
    def bench(
        url: str = typer.Argument(..., help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000"),
        model: str = typer.Option(..., "--model", "-m", help="the model name the server serves"),
        rate: float | None = typer.Option(None, "--rate", help="requests/s (Poisson)"),
        concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="closed-loop clients"),
        requests: int = typer.Option(100, "--requests", min=1, max=1_000_000, help="requests to send"),
        input_tokens: int | None = typer.Option(None, "--input-tokens", min=1, help="prompt tokens per request"),
        output_tokens: int | None = typer.Option(None, "--output-tokens", min=1, help="generated tokens per request"),
        dataset: str | None = typer.Option(None, "--dataset", help="JSONL of input/output token counts per request"),
        range_ratio: float = typer.Option(1.0, "--range-ratio",
                                          help="draw each request's input and output tokens uniformly from [R x L, L] "
                                               "(benchmark_serving's --random-range-ratio); 1: every request exactly L"),
        endpoint: str = typer.Option("completions", "--endpoint", help="completions or chat"),
        max_duration: float = typer.Option(600.0, "--max-duration", help="stop sending after this many seconds"),
        save: str | None = typer.Option(None, "--save", help="write the run as a trace folder (replay with simulate --trace)"),
        compare: str | None = typer.Option(None, "--compare", help="a scenario to simulate under the same load, side by side"),
        json_out: bool = typer.Option(False, "--json", help="print JSON"),
    ) -> None:
        """Measure a real OpenAI-compatible endpoint: TTFT, inter-token latency, TPOT and end-to-end at the client."""
        from tokensim.endpoints import BenchConfig, run_bench

        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise bad_value("--rate", rate, "a finite number of requests per second > 0")
        if endpoint not in ("completions", "chat"):
            raise bad_value("--endpoint", endpoint, "completions or chat")
        if check_range_ratio(range_ratio, "--range-ratio") < 1 and dataset is not None:
            raise bad_value("--range-ratio", range_ratio, "1 with --dataset (it carries each request's lengths)")
        if dataset is None and (input_tokens is None or output_tokens is None):
            input_tokens, output_tokens = input_tokens or 256, output_tokens or 64
        config = BenchConfig(base_url=url, model=model, num_requests=requests, request_rate_per_s=rate,
                             concurrency=concurrency, input_tokens=input_tokens, output_tokens=output_tokens,
                             dataset_path=dataset, range_ratio=range_ratio, endpoint=endpoint, max_duration_s=max_duration)
        result = run_bench(config)
        if save:
            note.print(f"wrote {result.save_trace(save)}", highlight=False)
        simulated = None
        if compare:
            from tokensim.prediction.serving import LoadSpec, simulate_serving
            spec = _engine_from_args(compare, model, "", None, None, None, 1, 1, None, "bf16", "vllm")[0]
            simulated = simulate_serving(spec, LoadSpec(requests, rate_per_s=rate,
                                                        concurrency=concurrency if rate is None else None,
                                                        input_tokens=input_tokens or 256, output_tokens=output_tokens or 64,
                                                        range_ratio=range_ratio))
        if json_out:
            doc: dict[str, Any] = dict(result.summary)
            if simulated is not None:
                doc = {"measured": doc, "simulated": {k: v for k, v in simulated.summary.items() if k != "series"}}
            emit_json(doc)
        else:
            rows = [_row("measured", result.summary)]
            if simulated is not None:
                rows.append(_row(f"simulated ({compare})", simulated.summary))
            out.print(_table(f"{url} ({model})", rows))
        if result.incomplete:
            raise TokensimError(f"the run is incomplete: {result.summary.get('error')} (partial results above"
                                + (f", saved to {save}" if save else "") + ")")

    @app.command()
    def serve(
        emulate: str = typer.Option(..., "--emulate", help="a scenario (name or file) whose deployment the endpoint emulates"),
        host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (loopback by default)"),
        port: int = typer.Option(8000, "--port", min=0, max=65535, help="port (0: any free one)"),
        model_name: str | None = typer.Option(None, "--served-model-name",
                                              help="the model name clients send (default: the scenario's)"),
        max_pending: int = typer.Option(1024, "--max-pending", min=1, help="requests queued before 429"),
    ) -> None:
        """An OpenAI-compatible endpoint whose tokens arrive with the simulated timing of a scenario's deployment:
        concurrent clients see the queueing the modelled system would show. Text is filler; usage counts are exact."""
        from tokensim.endpoints import run_emulator
        from tokensim.sim import OnlineSimulation

        spec, name = _engine_from_args(emulate, "", "", None, None, None, 1, 1, None, "bf16", "vllm")[:2]
        source = OnlineSimulation(spec)
        run_emulator(source, host, port, model_name=model_name or name, max_pending_requests=max_pending,
                     on_ready=lambda u: note.print(f"emulating {spec.name} at {u} (Ctrl-C stops)", highlight=False))


def probe_command(out, note, path: str | None, json_out: bool, torch_python: str | None = None) -> None:
    """`tokensim hardware probe`: measure this machine and write a hardware file."""
    from tokensim.endpoints import probe_hardware, write_hardware_file
    from tokensim.output.files import check_target
    from tokensim.output.json_out import emit_json

    target = check_target(path, "--out") if path else None
    result = probe_hardware(torch_python=torch_python)
    if target:
        note.print(f"wrote {write_hardware_file(target, result)}", highlight=False)
    if json_out:
        return emit_json(result.to_dict() if hasattr(result, "to_dict") else result.__dict__)
    out.print(result)


def _simulate_pair(task) -> list:
    """One (system, engine) pair's sampled runs simulated with that pair's held-out constants (a process-pool task)."""
    from tokensim.validate.load import simulate_cases

    cases, table = task
    return simulate_cases(cases, table)


def validate_serving(sample: int, progress_bar, enabled: bool = True, silicon: str | None = None,
                     workers: int | None = 1) -> dict:
    """Measured serving runs (silicon_dev.csv, or `silicon`: a CSV in its layout): steady-state TPOT of every run and
    light-load TTFT, a sample through the simulator for TTFT and TPOT; and the shipped vLLM traces replayed request by
    request. On the shipped runs every figure is out of sample: each run is judged with the constants `tokensim fit`
    refitted without its (system, engine) pair; another file's runs are judged with the fitted constants."""
    import numpy as np

    from tokensim.perf.constants import default_table
    from tokensim.validate.breakdown import simulated_breakdown
    from tokensim.validate.fit_report import pair_name, pair_tables, pool_map, serving_cases
    from tokensim.validate.load import error_stats, replay_trace, sample_cases, shipped_traces
    from tokensim.validate.repeats import repeat_spread
    from tokensim.validate.run_table import run_rows
    from tokensim.validate.serving import steady_tpot
    from tokensim.validate.serving_dev import summary as dev_summary
    from tokensim.validate.serving_dev import validate_serving_dev

    cases = serving_cases(silicon)
    tables = pair_tables() if silicon is None else {}
    table_of = {c.pair: tables.get(pair_name(*c.pair), default_table()) for c in cases}
    predicted = np.full(len(cases), np.nan)
    for pair, table in table_of.items():
        idx = [i for i, c in enumerate(cases) if c.pair == pair]
        predicted[idx] = steady_tpot([cases[i] for i in idx], table)
    steady = predicted / np.array([c.run.tpot_s for c in cases]) - 1
    by_pair: dict[str, list[float]] = {}
    for e, c in zip(steady, cases, strict=True):
        by_pair.setdefault(pair_name(*c.pair), []).append(float(e))
    chosen = sample_cases(cases, sample)
    # one task per (system, engine) pair: its constants travel once; pairs run in parallel given `workers`
    pairs = sorted({c.pair for c in chosen})
    tasks = [([c for c in chosen if c.pair == p], table_of[p]) for p in pairs]
    with progress_bar(f"simulating {len(chosen)} serving runs, pair by pair", len(tasks), enabled=enabled) as tick:
        simulated = [r for batch in pool_map(_simulate_pair, tasks, tick, workers) for r in batch]
    constants_of = {c.pair: (f"fitted without {pair_name(*c.pair)}" if pair_name(*c.pair) in tables
                             else "the shipped fitted constants") for c in cases}
    runs = run_rows(simulated, {c.run.id: float(v) for c, v in zip(cases, predicted, strict=True)}, constants_of)
    traces = []
    for folder in shipped_traces():
        r = replay_trace(folder)
        traces.append({"trace": r.name, "requests": r.requests, "measured": r.measured, "simulated": r.simulated,
                       "error": r.errors(), "peer_error": r.errors("peer")})
    return {
        "source": silicon or "silicon_dev.csv (shipped)",
        "out_of_sample": "each run judged with constants fitted without its (system, engine) pair" if tables
                         else "constants fitted on other runs",
        "silicon_steady_tpot": {**error_stats(steady),
                                "by_system_engine": {k: error_stats(v) for k, v in sorted(by_pair.items())}},
        "silicon_simulated": {"sample": len(chosen), "simulated": len(simulated),
                              "ttft": error_stats(r.ttft_error for r in simulated),
                              "tpot": error_stats(r.tpot_error for r in simulated),
                              "ttft_median_signed_error": (float(np.median([r.ttft_error for r in simulated]))
                                                           if simulated else None),
                              **simulated_breakdown(simulated)},
        "silicon_repeats": repeat_spread(cases),
        "runs": runs,
        "traces": traces,
        "serving_dev": (dev_summary(validate_serving_dev()) if silicon is None else None),
        "peer": "aiconfigurator 0.12 on 284 of its own silicon-sample configurations: TTFT median 47 %, TPOT 17 % "
                "(shared/data/serving/README.md)",
    }


def print_serving_validation(load: dict, out) -> None:
    from rich.table import Table

    def pct(d: dict, key: str = "median_abs_error") -> str:
        return "-" if d.get(key) is None else f"{d[key]:.1%}"

    def signed(d: dict) -> str:
        return "-" if d.get("median_signed_error") is None else f"{d['median_signed_error']:+.0%}"

    t = Table(title=f"serving runs under load ({load['source']}; {load['out_of_sample']})", title_justify="left")
    for col in ("what", "rows", "median abs. error", "p90"):
        t.add_column(col)
    st = load["silicon_steady_tpot"]
    t.add_row("TPOT, steady-state estimate, every run", str(st["rows"]), pct(st), pct(st, "p90_abs_error"))
    sim = load["silicon_simulated"]
    t.add_row(f"TTFT, simulated as aiperf measures (sample of {sim['sample']})", str(sim["ttft"]["rows"]), pct(sim["ttft"]),
              pct(sim["ttft"], "p90_abs_error"))
    t.add_row(f"TPOT, simulated (sample of {sim['sample']})", str(sim["tpot"]["rows"]), pct(sim["tpot"]),
              pct(sim["tpot"], "p90_abs_error"))
    rep = load.get("silicon_repeats")
    if rep and rep["ttft"]["rows"]:
        for metric in ("ttft", "tpot"):
            t.add_row(f"{metric.upper()}, one configuration measured twice: |a / b - 1| (the floor under any model)",
                      str(rep[metric]["rows"]), pct(rep[metric]), pct(rep[metric], "p90_abs_error"))
    out.print(t)
    for key, label in (("by_load", "clients per attention rank"), ("by_model", "model")):
        groups = sim.get(key) or {}
        if not groups:
            continue
        tb = Table(title=f"simulated sample by {label}: median abs. error (signed: negative too early / too fast)",
                   title_justify="left")
        for col in (label, "runs", "TTFT", "TTFT signed", "TPOT", "TPOT signed"):
            tb.add_column(col)
        for name, g in groups.items():
            tb.add_row(name, str(g["runs"]), pct(g["ttft"]), signed(g["ttft"]), pct(g["tpot"]), signed(g["tpot"]))
        out.print(tb)
    split = sim.get("level_and_load")
    if split and split["ttft"]["runs"]:
        tl = Table(title="simulated sample, configurations at 3 or more loads: median abs. error as the runs are, and "
                         "with each configuration's own median error (its level) taken out", title_justify="left")
        for col in ("metric", "configurations", "runs", "as they are", "load only"):
            tl.add_column(col)
        for metric in ("ttft", "tpot"):
            st = split[metric]
            tl.add_row(metric.upper(), str(st["configurations"]), str(st["runs"]), pct(st, "as_is_median_abs_error"),
                       pct(st, "load_only_median_abs_error"))
        out.print(tl)
    tr = Table(title="vLLM traces replayed request by request: error against the recorded run (LLMServingSim's own in brackets)",
               title_justify="left")
    for col in ("trace", "TTFT mean", "p50", "p99", "TPOT mean", "p50", "p99"):
        tr.add_column(col)
    for x in load["traces"]:
        cells = []
        for m in ("ttft_s", "tpot_s"):
            for k in ("mean", "p50", "p99"):
                e, pe = x["error"].get(m, {}).get(k), x["peer_error"].get(m, {}).get(k)
                cells.append(("-" if e is None else f"{e:+.0%}") + ("" if pe is None else f" ({pe:+.1%})"))
        tr.add_row(x["trace"], *cells)
    out.print(tr)
    dev = load.get("serving_dev")
    if dev:
        td = Table(title=f"serving_dev.csv simulated under its stated load: {dev['modelled']} of {dev['rows']} rows "
                         f"(never fitted on; skipped rows name the fact they lack: --json)", title_justify="left")
        for col in ("metric", "rows", "median abs. error", "p90"):
            td.add_column(col)
        td.add_row("all", str(dev["modelled"]), pct(dev), pct(dev, "p90_abs_error"))
        for name, st in dev["by_metric"].items():
            td.add_row(name, str(st["rows"]), pct(st), pct(st, "p90_abs_error"))
        out.print(td)
    out.print(f"peer: {load['peer']}")


def register_calibrate(app: typer.Typer, out, note) -> None:
    from tokensim.output.files import atomic_write, check_target
    from tokensim.output.json_out import emit_json

    @app.command()
    def calibrate(
        traces: list[str] = typer.Argument(..., help="trace folders (tokensim bench --save) or requests.jsonl files"),
        model: str = typer.Option(..., "--model", "-m", help="catalog name or config.json path"),
        hardware: str = typer.Option(..., "--hardware", "-H", help="catalog name or hardware file (e.g. from hardware probe)"),
        tp: int = typer.Option(1, help="tensor-parallel degree of the measured deployment"),
        engine: str = typer.Option("vllm", help="the measured engine"),
        kv_cache_tokens: int | None = typer.Option(None, "--kv-cache-tokens", min=1,
                                                   help="KV cache of the measured engine, in tokens "
                                                        "(default: the memory model's)"),
        out_path: str | None = typer.Option(None, "--out", "-o", help="write the calibrated profile (a fitted table) here"),
        json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
    ) -> None:
        """Fit the engine constants of a deployment (per-step and per-sequence host time, bandwidth and prefill
        efficiency) to measured traces; report the error before and after, and leaving each trace out."""
        from tokensim.deploy.deployment import Deployment
        from tokensim.output.progress import progress_bar
        from tokensim.specs.hardware.catalog import load_hardware
        from tokensim.specs.model.catalog import load_model
        from tokensim.validate.calibrate import CALIBRATED, profile_text
        from tokensim.validate.calibrate import calibrate as run_calibrate

        target = check_target(out_path, "--out") if out_path else None
        m, hw = load_model(model), load_hardware(hardware)
        dep = Deployment(tp=tp, engine=engine)
        with progress_bar("calibrating", 4 * len(CALIBRATED), enabled=not json_out) as tick:
            report = run_calibrate(traces, m, hw, dep, kv_cache_tokens, progress=tick)
        if target:
            atomic_write(target, profile_text(report))
            note.print(f"wrote {target} (use it with TOKENSIM_FITTED={target})", highlight=False)
        if json_out:
            return emit_json(report)
        from rich.table import Table
        t = Table(title=f"calibration of {engine} on {hw.name} ({hw.family})", title_justify="left")
        for col in ("trace", "TTFT error before", "after", "held out", "TPOT error before", "after", "held out"):
            t.add_column(col)
        held = {r["trace"]: r for r in report["held_out"]}
        for b, a in zip(report["before"], report["after"], strict=True):
            h = held.get(b["trace"])
            t.add_row(b["trace"], f"{b['ttft_error']:+.0%}", f"{a['ttft_error']:+.0%}",
                      f"{h['ttft_error']:+.0%}" if h else "-", f"{b['tpot_error']:+.0%}", f"{a['tpot_error']:+.0%}",
                      f"{h['tpot_error']:+.0%}" if h else "-")
        out.print(t)
        for name, value in report["values"].items():
            out.print(f"  {name} = {value:.4g}")


def capacity_command(out, model: str, hardware: tuple[HardwareSpec, ...], rate: float, slo_ttft: float, slo_tpot: float,
                     max_chips: int, input_tokens: int, output_tokens: int, engine: str, json_out: bool,
                     fusions: tuple[str, ...] | None = None, engine_version: str | None = None) -> None:
    """`tokensim plan --rate`: the cheapest deployments that serve `rate` within the objectives."""
    from rich.table import Table

    from tokensim.output.json_out import emit_json
    from tokensim.output.progress import progress_bar
    from tokensim.plan.capacity import CapacityRequest, capacity_plan
    from tokensim.specs.model.catalog import load_model

    req = CapacityRequest(load_model(model), hardware, rate_per_s=rate,
                          slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot, input_tokens=input_tokens,
                          output_tokens=output_tokens, engine=engine, max_chips_per_replica=max_chips, fusions=fusions,
                          engine_version=engine_version)
    with progress_bar("simulating candidates", req.candidates, enabled=not json_out) as tick:
        best, checked = capacity_plan(req, progress=tick)
    if json_out:
        return emit_json({"best": best.to_dict() if best else None, "checked": [c.to_dict() for c in checked]})
    t = Table(title=f"{model} at {rate:g} requests/s ({input_tokens} in / {output_tokens} out): TTFT p99 <= {slo_ttft:g} s, "
                    f"TPOT <= {slo_tpot * 1e3:.1f} ms", title_justify="left")
    for col in ("hardware", "replica", "replicas", "chips", "$/h", "TTFT p99", "TPOT mean", "meets"):
        t.add_column(col)
    for c in checked:
        d = c.deployment
        fused = f", fused {'+'.join(d.fusions)}" if d.fusions else ""
        t.add_row(c.hardware, f"tp {d.tp} pp {d.pp} ep {d.ep}, batch {d.batch}, {d.weights or 'checkpoint'}/{d.kv}{fused}",
                  str(c.replicas), str(c.chips), f"{c.usd_per_hour:.2f}" if c.usd_per_hour is not None else "-",
                  f"{c.simulated['ttft_p99_s']:.3g} s" if c.simulated.get("ttft_p99_s") is not None else "-",
                  f"{c.simulated['tpot_mean_s'] * 1e3:.1f} ms" if c.simulated.get("tpot_mean_s") is not None else "-",
                  "yes" if c.simulated.get("meets") else "no")
    out.print(t)
    if best is None:
        raise TokensimError("none of the cheapest candidates meets the objectives in the simulator, even with "
                            "extra replicas: loosen an objective, lower the rate or allow more chips per replica")
    out.print(f"cheapest that holds: {best.replicas} x ({best.deployment.tp * best.deployment.pp} x {best.hardware}), "
              f"{best.chips} chips" + (f", ${best.usd_per_hour:.2f}/h" if best.usd_per_hour is not None else ""))
