"""`tokensim fit`: the empirical constants and the engine profiles, fitted jointly and reproducibly.

Objective (validate/objective.py): the published measurements, the measured serving runs' time per output token
and their time to first token at light load, each kind's mean of min(|ln(predicted / measured)|, ln 4), summed.
Method: coordinate descent with a golden-section search per constant in log space, inside physical bounds, from
the priors in constants.toml and the engine profiles (never from a previous fit); frontier rows pinned at the
operating point the current constants choose and re-pinned between sweeps; each constant searched on the rows it
moves (`objective.affected`). Out of sample (`held_out`): the rows of one source group or one (system, engine)
pair are left out and every constant that moves them is refitted without them (warm start, one sweep); a constant
with no training rows left takes its prior, never a value fitted on the held-out rows. Every evaluation gets its
own ConstantsTable: nothing shared changes while a fit runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from tokensim.perf.constants import ConstantsTable, default_table
from tokensim.validate.evaluate import freeze
from tokensim.validate.objective import FitData, KeptLoss, affected
from tokensim.validate.rules import Case, Skip, build_case
from tokensim.validate.table import read_rows


@dataclass(frozen=True)
class Param:
    family: str
    engine: str
    name: str
    lo: float
    hi: float
    why: str


SERVING_ENGINES = ("vllm", "sglang", "trtllm")


def engine_params(engines=SERVING_ENGINES) -> tuple[Param, ...]:
    """What each serving engine's profile fits: its kernels' achieved shares of the datasheet peaks, its grouped
    expert GEMMs, its host time per step, per running sequence and per layer of an eager (prefill) step, and its
    request path. Bounds are physical."""
    out: list[Param] = []
    for e in engines:
        out += [
            Param("default", e, "hbm_bandwidth_fraction", 0.30, 0.95, "achieved share of HBM bandwidth streaming weights"),
            Param("default", e, "gemm_flops_fraction", 0.15, 0.90, "achieved share of dense FLOP/s, large decode GEMMs"),
            Param("default", e, "prefill_flops_fraction", 0.10, 0.90, "achieved share of dense FLOP/s over prompt tokens"),
            Param("default", e, "grouped_gemm_fraction", 0.05, 1.0, "MoE grouped expert GEMMs against dense ones"),
            Param("default", e, "host_overhead_s", 1e-5, 5e-3, "host time per step (scheduling, sampling, graph replay)"),
            Param("default", e, "host_overhead_per_seq_s", 1e-8, 2e-4, "host time per running sequence per step"),
            Param("default", e, "eager_layer_overhead_s", 1e-6, 2e-3, "host time per layer of a step outside CUDA graphs"),
            Param("default", e, "request_overhead_s", 1e-3, 0.5, "request path in served TTFT"),
        ]
    return tuple(out)


GENERAL = (
    Param("default", "default", "hbm_bandwidth_fraction", 0.25, 0.95, "achieved HBM bandwidth of GPU serving engines"),
    Param("default", "default", "attention_bandwidth_fraction", 0.20, 0.95, "achieved HBM bandwidth reading the KV cache"),
    Param("default", "default", "gemm_flops_fraction", 0.15, 0.90, "achieved dense FLOP/s in decode GEMMs"),
    Param("default", "default", "prefill_flops_fraction", 0.10, 0.90, "achieved dense FLOP/s over a prefill"),
    Param("default", "default", "gemm_half_inner", 16, 2048, "inner dimension at which a GEMM reaches half its rate"),
    Param("default", "default", "grouped_gemm_fraction", 0.05, 1.0, "MoE grouped expert GEMMs against dense ones"),
    Param("default", "default", "narrow_format_serial_share", 0.005, 0.8, "GEMM time an fp8/fp4 format does not speed up"),
    Param("default", "default", "attention_prefill_rate_ratio", 0.2, 1.0, "prefill attention's FLOP rate over the GEMMs'"),
    Param("default", "default", "expert_load_cv", 0.1, 1.0, "routing skew across experts (coefficient of variation)"),
    Param("default", "default", "kernel_gap_s", 0.2e-6, 10e-6, "idle time per kernel launch"),
    Param("default", "default", "eager_layer_overhead_s", 1e-6, 1e-3, "host time per layer of a step outside CUDA graphs"),
    Param("default", "default", "host_overhead_s", 1e-5, 3e-3, "host time per decode step"),
    Param("default", "default", "host_overhead_per_seq_s", 1e-8, 1e-4, "host time per running sequence per step"),
    Param("default", "default", "request_overhead_s", 1e-3, 0.5, "request handling in served TTFT"),
    Param("default", "default", "collective_latency_s", 2e-6, 5e-5, "one small all-reduce, end to end"),
    Param("default", "default", "all_to_all_latency_s", 5e-6, 2e-4, "one expert-parallel dispatch or combine, end to end"),
    Param("nvidia-blackwell", "default", "sustained_clock_fraction", 0.25, 1.0, "Blackwell tensor throughput sustained "
          "under its power limit over the datasheet peak"),
    Param("nvidia-blackwell", "default", "prefill_clock_fraction", 0.4, 1.0, "Blackwell tensor throughput over prompt "
          "tokens as a share of its sustained clock's"),
    Param("default", "llamacpp", "hbm_bandwidth_fraction", 0.20, 0.95, "achieved HBM bandwidth, llama.cpp-class engines"),
    Param("amd", "default", "hbm_bandwidth_fraction", 0.25, 0.95, "achieved HBM bandwidth on AMD Instinct (ROCm engines)"),
    Param("amd", "default", "gemm_flops_fraction", 0.10, 0.90, "achieved dense FLOP/s on AMD Instinct (ROCm GEMMs reached "
          "38-47 % of MI300X peak in SemiAnalysis' Dec-2024 microbenchmarks, less on serving shapes)"),
    Param("cerebras-wafer", "default", "layer_latency_s", 1e-6, 60e-6, "wafer per-layer dataflow floor, fixed part"),
    Param("cerebras-wafer", "default", "layer_latency_s_per_byte", 1e-17, 1e-13,
          "wafer per-layer time per byte of the layer's weights"),
    Param("groq-lpu", "default", "layer_latency_s", 1e-6, 60e-6, "LPU per-layer floor"),
    Param("sambanova-rdu", "default", "layer_latency_s", 1e-6, 60e-6, "RDU per-layer dataflow floor"),
)
PARAMS = GENERAL + engine_params()
FITTED_LEVELS = frozenset((p.family, p.engine, p.name) for p in PARAMS)
GOLDEN = (math.sqrt(5) - 1) / 2
LOSS_TOLERANCE = 1e-9      # a move that lowers the loss by less than this is no move


def overlay(values: dict[Param, float]) -> dict:
    out: dict = {}
    for p, v in values.items():
        out.setdefault(p.family, {}).setdefault(p.engine, {})[p.name] = v
    return out


def table_for(values: dict[Param, float]) -> ConstantsTable:
    """constants.toml and the engine profiles with `values` over them (the fitted table in use left out, so a fit
    is reproducible)."""
    return default_table().without_fitted().with_overlay(overlay(values))


def golden_log(f, lo: float, hi: float, steps: int) -> float:
    """Golden-section search for the minimum of f on [lo, hi] in log space (positive parameters), `steps` narrowings."""
    a, b = math.log(lo), math.log(hi)
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(math.exp(d))
    return math.exp((a + b) / 2)


def start_values(params=PARAMS) -> dict[Param, float]:
    """The values in constants.toml and the engine profiles (never a previous fit), so that a fit is reproducible."""
    return current_values(params, default_table().without_fitted())


def current_values(params=PARAMS, table: ConstantsTable | None = None) -> dict[Param, float]:
    """The values in use: constants.toml and the engine profiles under the fitted overlay (`default_table`), each
    clipped to its bounds as a fit would keep it. What `tokensim fit --keep-constants` reports on."""
    table = table or default_table()
    return {p: min(max(_base_value(p, table), p.lo), p.hi) for p in params}


def _base_value(p: Param, table: ConstantsTable) -> float:
    kind = {"cerebras-wafer": "wafer", "groq-lpu": "lpu", "sambanova-rdu": "rdu"}.get(p.family, "gpu")
    vendor = p.family if p.family == "amd" else ""
    family = p.family if p.family not in ("default", "amd") else ""
    return getattr(table.constants_for(family, kind if family else "", p.engine, vendor), p.name)


def pinned(data: FitData, table: ConstantsTable, simulate: bool = False, workers: int | None = 1) -> FitData:
    """The data with frontier rows pinned at the operating point `table` chooses; with `simulate`, every serving run
    simulated at `table` (`simulated`, in `workers` processes) for its TPOT ratio and light-load step count."""
    data = replace(data, published=tuple(freeze(c, table) for c in data.published))
    if not (simulate and data.tpot):
        return data
    ratio, steps = simulated(data, table, workers)
    return replace(data, tpot_ratio=ratio, light_steps=steps)


SIMULATION_CHUNKS_PER_WORKER = 32   # tasks per process: runs differ in cost 100-fold, so small shares finish evenly


def _simulate_runs(args) -> list[tuple[float, float] | None]:
    """(TTFT, TPOT) of each serving run simulated at the table (None where it cannot be laid out)."""
    cases, table = args
    from tokensim.errors import TokensimError
    from tokensim.validate.load import simulate_case

    out: list[tuple[float, float] | None] = []
    for c in cases:
        try:
            r = simulate_case(c, table)
            out.append((r.ttft_s, r.tpot_s))
        except TokensimError:
            out.append(None)
    return out


def simulate_runs(cases, table: ConstantsTable, workers: int | None = 1) -> list[tuple[float, float] | None]:
    """`_simulate_runs` over `cases`, spread over `workers` processes (None: the CPUs this process may use) in
    interleaved shares; each run is simulated alone from its own seed, so the result is the same for any number of
    workers."""
    from tokensim.validate.pool import available_cpus, interleaved, pool_map

    cases = list(cases)
    workers = workers or available_cpus()
    if workers <= 1 or len(cases) < 2:
        return _simulate_runs((cases, table))
    shares = interleaved(len(cases), workers * SIMULATION_CHUNKS_PER_WORKER)
    out: list[tuple[float, float] | None] = [None] * len(cases)
    done = pool_map(_simulate_runs, [([cases[i] for i in share], table) for share in shares], None, workers)
    for share, results in zip(shares, done, strict=True):
        for i, r in zip(share, results, strict=True):
            out[i] = r
    return out


def simulated(data: FitData, table: ConstantsTable,
              workers: int | None = 1) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each serving run simulated as its benchmark measured it (`validate.load.simulate_case`, in `workers`
    processes): its simulated TPOT over the steady-state estimate, and for each light-load run its simulated TTFT
    beyond the request path over `light_ttft`'s one wait and one prefill step (how many the closed loop really takes:
    cohorts of chunked prompts span two steps). Ratios are clipped to [1/4, 4]; 1 where a run cannot be simulated."""
    from tokensim.perf.constants import for_hardware
    from tokensim.specs.hardware.catalog import catalog
    from tokensim.validate.serving import light_ttft, steady_tpot

    sims = {id(c): r for c, r in zip(data.tpot, simulate_runs(data.tpot, table, workers), strict=True)
            if r is not None}
    steady = steady_tpot(list(data.tpot), table)
    ratio = tuple(_clip(sims[id(c)][1] / s) if id(c) in sims else 1.0 for c, s in zip(data.tpot, steady, strict=True))
    steps = []
    for c in data.ttft_light:
        path = for_hardware(catalog()[c.run.system], c.deployment.engine, table).request_overhead_s
        core = light_ttft([c], table)[0] - path
        steps.append(_clip((sims[id(c)][0] - path) / core) if id(c) in sims and core > 0 else 1.0)
    return ratio, tuple(steps)


def _clip(x: float) -> float:
    return float(min(max(x, 0.25), 4.0))


def fit(data: FitData, start: dict[Param, float], sweeps: int = 2, steps: int = 9, only=None,
        progress=None, simulate: bool = True, bracket: float | None = None,
        workers: int | None = 1) -> dict[Param, float]:
    """Coordinate descent over PARAMS (or `only` of them, the others held at `start`); a constant that moves no row of
    `data` takes its prior (constants.toml, the engine profile), not `start`. With `simulate`, each sweep first
    measures the light-load runs' step counts on the simulator at the current constants (`pinned`), so that the
    fitted TTFT is the simulator's; without, `data.light_steps` is kept. `bracket`: search each constant within that
    factor of its start (inside its bounds) instead of over its whole range (a refit from a fitted start). `workers`:
    processes for the simulations and for each evaluation of the loss (None: the CPUs this process may use)."""
    from tokensim.validate.pool import available_cpus
    from tokensim.validate.split_loss import SplitLoss

    values = dict(start)
    priors = start_values()
    todo = [p for p in PARAMS if only is None or p in only]
    processes = workers or available_cpus()
    for _ in range(sweeps):
        current = pinned(data, table_for(values), simulate=simulate, workers=workers)
        # one evaluator per sweep: each evaluation's rows priced by `processes` processes (validate/split_loss.py) or
        # in this one with the serving sums kept; the same loss to the bit either way
        evaluator = (SplitLoss(current, FITTED_LEVELS, processes) if processes > 1
                     else KeptLoss(current, FITTED_LEVELS))
        with evaluator:
            for p in todo:
                if len(affected(p, current, FITTED_LEVELS)):
                    lo, hi = p.lo, p.hi
                    if bracket:
                        lo, hi = max(p.lo, values[p] / bracket), min(p.hi, values[p] * bracket)

                    def f(v, p=p, evaluator=evaluator):
                        return evaluator.loss(p, table_for({**values, p: v}))
                    found = golden_log(f, lo, hi, steps)
                    if f(found) < f(values[p]) - LOSS_TOLERANCE:   # a constant the rows do not pin stays where it is
                        values[p] = found
                else:
                    values[p] = priors[p]
                if progress:
                    progress()
    return values


HELD_OUT_BRACKET = 3.0      # a held-out refit searches each constant within 3x of its fitted value (inside its bounds)
# golden-section narrowings per constant in a held-out refit: 8 leave a bracket of 3^2 x 0.618^8, a factor 1.05 (5 left
# 1.22), so that an out-of-sample figure moves by what leaving the rows out does, not by where the search stopped
HELD_OUT_STEPS = 8


def held_out(data: FitData, fitted: dict[Param, float], leave_published, leave_serving,
             steps: int = HELD_OUT_STEPS) -> tuple[dict[Param, float], FitData]:
    """Constants fitted without the rows the two predicates pick (warm start from `fitted`, one sweep over every
    constant that moves them), and those rows."""
    test = data.subset(leave_published, leave_serving)
    train = data.subset(lambda c: not leave_published(c), lambda c: not leave_serving(c))
    moved = [p for p in PARAMS if len(affected(p, test, FITTED_LEVELS))]
    return fit(train, fitted, sweeps=1, steps=steps, only=moved, simulate=False, bracket=HELD_OUT_BRACKET), test


def buildable(path) -> list[Case]:
    cases = []
    for row in read_rows(path):
        try:
            cases.append(build_case(row))
        except Skip:
            continue
    return cases


def shipped_silicon() -> Path:
    """The measured serving runs shipped with the package (aiconfigurator's silicon sample, data/serving)."""
    from importlib import resources
    return Path(str(resources.files("tokensim") / "data" / "serving" / "silicon_dev.csv"))


SAME_FIGURE = 0.05    # rows of one provider, model, hardware and metric within 5 % report one measurement


def source_groups(cases: list[Case]) -> dict[str, str]:
    """Row id -> the group of rows that share an origin, for leave-one-source-out: one source document, and rows
    elsewhere that relay the same figure (same provider, model, hardware, metric and stated conditions, values
    within SAME_FIGURE: an Artificial Analysis number quoted by the vendor and again by a competitor is one
    measurement)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for c in cases:
        find("src:" + c.row.source_key)
    for i, a in enumerate(cases):
        for b in cases[i + 1:]:
            same = (a.model, a.hardware, a.row.metric, a.row.provider_or_engine, a.row.batch, a.row.input_tokens,
                    a.row.output_tokens) == (b.model, b.hardware, b.row.metric, b.row.provider_or_engine, b.row.batch,
                                             b.row.input_tokens, b.row.output_tokens)
            if same and abs(math.log(a.row.value / b.row.value)) <= SAME_FIGURE:
                parent[find("src:" + a.row.source_key)] = find("src:" + b.row.source_key)
    return {c.row.id: find("src:" + c.row.source_key) for c in cases}
