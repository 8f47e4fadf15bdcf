"""Serving under load: a deployment as a simulated engine (scheduler + KV cache + the cost model's step timer).

`engine_for(model, hw, dep)` builds the `tokensim.sim.EngineSpec` of one replica: the scheduler of the deployment's
engine with that engine's documented defaults (tokensim.sim.schedulers, source in each), the KV cache the memory
model leaves beside the weights (or the number a run states), and `perf.timer.CostModelTimer`, which prices each
step's exact batch with the step function every prediction uses. `trace_engine(folder)` reads a trace folder laid
out as shared/data/serving/traces (meta.json: the engine's arguments, the layout, the GPU).
"""
from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, replace
from pathlib import Path

from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError, bad_value, require
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.memory import stage_memory
from tokensim.perf.timer import CostModelTimer
from tokensim.prediction.kv_pool import MIB, kv_pool_bytes, sglang_chunk_and_graph_batch
from tokensim.sim import EngineSpec, SglangScheduler, SpeculativeDecoding, TrtllmScheduler, VllmScheduler
from tokensim.sim.workload import check_range_ratio
from tokensim.specs.hardware.catalog import find_name as find_hardware
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.hardware.p2p import with_peer_to_peer
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import ModelSpec

GIB = 2**30
REFERENCE_CONTEXT_TOKENS = 4096      # KV per token is read at this context (sliding windows cap what they hold)


def kv_capacity_tokens(model: ModelSpec, hw: HardwareSpec, dep: Deployment, constants: ConstantsTable | None = None,
                       *, engine_version: str | None = None, cuda_graph_batch: int | None = None,
                       memory_fraction: float | None = None) -> int:
    """Tokens of KV one replica holds beside its weights: the pool the engine sizes (prediction.kv_pool: vLLM,
    SGLang and TensorRT-LLM by their own rules on the memory the driver reports, other engines the usable share of
    the datasheet capacity) over KV bytes per token, in the fullest stage, times the attention-DP ranks (each holds
    its own sequences). `engine_version` (default: the deployment's) picks SGLang's reserve rule; `cuda_graph_batch`
    is the largest CUDA-graph batch the engine captures, where the launch states it (SGLang reserves memory for it);
    `memory_fraction` the engine's memory fraction as launched (--gpu-memory-utilization, --mem-fraction-static,
    free_gpu_memory_fraction), where stated."""
    ctx = make_context(model, hw, dep, for_hardware(hw, dep.engine, constants))
    capacity = ctx.k.usable_memory_fraction * hw.capacity_bytes
    tokens = math.inf
    for weights, kv in stage_memory(ctx, REFERENCE_CONTEXT_TOKENS):
        if weights >= capacity:
            raise TokensimError(f"{model.name} does not fit {dep.chips} x {hw.name} as laid out (tp {dep.tp}, pp {dep.pp}): "
                                f"{weights / 1e9:.1f} GB of weights per chip against {capacity / 1e9:.1f} GB usable")
        pool = kv_pool_bytes(dep.engine, hw, weights, usable_fraction=ctx.k.usable_memory_fraction,
                             version=engine_version or dep.engine_version, gpus=dep.tp * dep.attn_dp * dep.pp,
                             attn_dp=dep.attn_dp,
                             draft=dep.spec is not None, cuda_graph_batch=cuda_graph_batch, fraction=memory_fraction)
        if pool <= 0:
            raise TokensimError(f"{model.name} on {dep.chips} x {hw.name} (tp {dep.tp}, pp {dep.pp}): {dep.engine} "
                                f"leaves no memory for the KV cache beside {weights / 1e9:.1f} GB of weights per chip "
                                f"(its memory rule: tokensim.prediction.kv_pool)")
        if kv > 0:
            tokens = min(tokens, pool / (kv / REFERENCE_CONTEXT_TOKENS))
    return int(min(tokens, 1e9) * dep.attn_dp)


def default_scheduler(engine: str, hw: HardwareSpec, **overrides):
    """The engine's scheduler with its documented defaults for this GPU's memory (sources in tokensim.sim.schedulers)."""
    memory_gib = hw.visible_capacity_bytes / GIB
    if engine == "sglang":
        chunk, _ = sglang_chunk_and_graph_batch(hw.visible_capacity_bytes / MIB, 1)
        return SglangScheduler(**{"chunked_prefill_size": chunk, **overrides})
    if engine == "trtllm":
        return TrtllmScheduler(**overrides)
    # vLLM (and an unnamed engine, served the vLLM way): `vllm serve` uses 8192 tokens and 1024 sequences on GPUs
    # of >= 70 GiB other than the A100, else 2048 and 256 (vllm/engine/arg_utils.py, get_batch_defaults)
    big = memory_gib >= 70 and not hw.name.startswith("a100")
    base = {"max_num_batched_tokens": 8192 if big else 2048, "max_num_seqs": 1024 if big else 256}
    if hw.kind == "cpu":
        # vLLM's CPU platform turns async scheduling off whatever the flags say (vllm/platforms/cpu.py,
        # check_and_update_config: "async scheduling is not required on CPU"): a request arriving during step n is
        # seen when step n + 1 is scheduled, not n + 2
        base["async_scheduling"] = False
    return VllmScheduler(**{**base, **overrides})


def engine_for(model: ModelSpec, hw: HardwareSpec, dep: Deployment, *, constants: ConstantsTable | None = None,
               kv_cache_tokens: int | None = None, scheduler=None, max_model_len: int | None = None,
               engine_version: str | None = None, cuda_graph_batch: int | None = None,
               memory_fraction: float | None = None) -> EngineSpec:
    """One replica of `dep` as a simulated engine (`engine_version`, `cuda_graph_batch`, `memory_fraction`:
    kv_capacity_tokens)."""
    spec = None
    if dep.spec is not None:
        spec = SpeculativeDecoding(dep.spec.rates())
    tokens = kv_cache_tokens if kv_cache_tokens is not None else kv_capacity_tokens(
        model, hw, dep, constants, engine_version=engine_version, cuda_graph_batch=cuda_graph_batch,
        memory_fraction=memory_fraction)
    return EngineSpec(scheduler=scheduler or default_scheduler(dep.engine, hw),
                      timer=CostModelTimer(model, hw, replace(dep, spec=None), constants, draft=dep.spec),
                      kv_cache_tokens=int(tokens),
                      max_model_len=max_model_len or model.max_context_tokens, speculative=spec,
                      name=f"{model.name} on {dep.chips} x {hw.name} ({dep.engine})")


@dataclass(frozen=True)
class TraceFolder:
    """A recorded run: its requests and the engine settings its meta.json states."""

    requests: Path
    hardware: str | None          # None: the run does not say (a trace `tokensim bench --save` wrote)
    tp: int
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    kv_cache_tokens: int | None
    engine: str
    meta: dict
    data_parallel: int = 1        # vLLM data_parallel_size: engine cores, each with its own scheduler
    expert_parallel: bool = False  # enable_expert_parallel: the MoE layers' experts split over every rank

    def scheduler_overrides(self, ranks: int | None = None) -> dict[str, int]:
        """The scheduler caps the run set, for a simulated engine of `ranks` data-parallel engine cores (default: the
        run's own): vLLM's caps are per engine core, and the simulated engine holds every core, so they are the
        cores' sums (as for the silicon runs' attention-DP ranks, validate.load.benchmark_scheduler)."""
        n = self.data_parallel if ranks is None else ranks
        return {k: v * n for k, v in (("max_num_seqs", self.max_num_seqs),
                                      ("max_num_batched_tokens", self.max_num_batched_tokens)) if v}

    def deployment(self, model: ModelSpec) -> Deployment:
        """The layout the run states: TP inside each engine core; with data parallelism on a MoE model, vLLM's
        attention data parallelism, the experts split over every rank with enable_expert_parallel (else tensor
        parallel inside each expert)."""
        if self.data_parallel > 1 and not model.is_moe:
            raise bad_value("trace", str(self.requests.parent), "data_parallel_size 1 for a dense model (replicas "
                            "behind one client are not replayed; simulate --replicas serves a load on several)")
        ep = self.tp * self.data_parallel if self.expert_parallel and model.is_moe else 1
        return Deployment(tp=self.tp, attn_dp=self.data_parallel, ep=ep, engine=self.engine)


def read_trace_folder(folder: str | Path) -> TraceFolder:
    """meta.json + requests.jsonl of a trace folder (the layout of shared/data/serving/traces)."""
    folder = Path(folder)
    meta_path, requests = folder / "meta.json", folder / "requests.jsonl"
    if not meta_path.is_file() or not requests.is_file():
        raise bad_value("trace", str(folder), "a folder holding meta.json and requests.jsonl")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokensimError(f"{meta_path}: not readable JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise bad_value(f"{meta_path}", type(meta).__name__, "a JSON object")
    kwargs = meta.get("engine_kwargs") or {}
    device = (meta.get("hardware") or {}).get("device_name") or folder.name.split("_")[0]
    hardware = find_hardware(str(device)) or find_hardware(folder.name.split("_")[0])
    kv = (meta.get("kv_cache") or {}).get("num_kv_tokens")
    return TraceFolder(requests=requests, hardware=hardware, tp=int(kwargs.get("tensor_parallel_size") or 1),
                       max_num_seqs=kwargs.get("max_num_seqs"), max_num_batched_tokens=kwargs.get("max_num_batched_tokens"),
                       kv_cache_tokens=int(kv) if kv else None, engine="vllm" if "vllm_version" in meta else "default",
                       meta=meta, data_parallel=int(kwargs.get("data_parallel_size") or 1),
                       expert_parallel=bool(kwargs.get("enable_expert_parallel")))


def trace_engine(folder: TraceFolder, model: ModelSpec, constants: ConstantsTable | None = None,
                 dep: Deployment | None = None, p2p: bool | None = None) -> tuple[EngineSpec, HardwareSpec, Deployment]:
    """The engine a trace folder describes: its GPU, TP degree, scheduler settings and KV cache (`p2p`: GPU
    peer-to-peer on or off on the GPU's PCIe links; None: as its hardware file states)."""
    if folder.hardware is None:
        raise bad_value("trace", str(folder.requests.parent), "a meta.json naming a GPU of the catalog (hardware."
                        "device_name), or a scenario / --hardware to serve the trace's requests on")
    hw = with_peer_to_peer(load_hardware(folder.hardware), p2p)
    dep = dep or folder.deployment(model)
    overrides = folder.scheduler_overrides()
    scheduler = default_scheduler(dep.engine, hw, **overrides) if dep.engine in ("vllm", "default") else None
    return engine_for(model, hw, dep, constants=constants, kv_cache_tokens=folder.kv_cache_tokens,
                      scheduler=scheduler), hw, dep


@dataclass(frozen=True)
class LoadSpec:
    """What arrives: `requests` at `rate_per_s` (Poisson, gamma when cv != 1) or from `concurrency` closed-loop
    clients, each `input_tokens` in and `output_tokens` out (or, with `range_ratio` < 1, each drawn uniformly from
    [range_ratio x that, that], as benchmark clients' random datasets draw them: `sim.range_lengths`); or the
    requests of a trace file."""

    requests: int = 1000
    rate_per_s: float | None = None
    concurrency: int | None = None
    cv: float = 1.0
    input_tokens: int = 1024
    output_tokens: int = 256
    trace: Path | None = None
    seed: int = 0
    dataset: Path | None = None     # JSONL of input/output token counts per request, taken in order and cycled
    range_ratio: float = 1.0        # lengths drawn uniformly from [range_ratio x L, L]; 1: every request exactly L

    def __post_init__(self) -> None:
        # the one seed feeds the workload's generator and the simulator's (numpy takes only seeds >= 0)
        require(isinstance(self.seed, numbers.Integral) and self.seed >= 0, "seed", self.seed, "an integer >= 0")
        if check_range_ratio(self.range_ratio) < 1 and (self.dataset is not None or self.trace is not None):
            raise bad_value("range_ratio", self.range_ratio, "1 with a dataset or a trace (they carry each request's lengths)")


def workload_for(load: LoadSpec):
    """The simulator's workload for a LoadSpec (a Workload, or a ClosedLoop around one)."""
    import numpy as np

    from tokensim.sim import ClosedLoop, drawn_lengths, load_trace, synthetic

    if load.trace is not None:
        return load_trace(load.trace)
    if (load.rate_per_s is None) == (load.concurrency is None):
        raise bad_value("load", "rate and concurrency" if load.rate_per_s else "neither",
                        "one of --rate (requests/s) or --concurrency (clients), or a --trace")
    rng = np.random.default_rng(load.seed)
    inputs: int | np.ndarray = load.input_tokens
    outputs: int | np.ndarray = load.output_tokens
    if load.dataset is not None:
        from tokensim.endpoints.workload import load_dataset

        specs = load_dataset(load.dataset)
        order = np.arange(load.requests) % len(specs)
        inputs = np.array([s.input_tokens for s in specs], dtype=np.int64)[order]
        outputs = np.array([s.output_tokens for s in specs], dtype=np.int64)[order]
    elif load.range_ratio < 1:
        # drawn before the arrivals; a ratio of 1 draws nothing, so fixed lengths keep every earlier workload (and
        # its arrivals) as it was
        inputs, outputs = drawn_lengths(load.input_tokens, load.output_tokens, load.range_ratio, load.requests, rng)
    work = synthetic(load.requests, rng, rate_per_s=load.rate_per_s, cv=load.cv, input_tokens=inputs,
                     output_tokens=outputs)
    return ClosedLoop(load.concurrency, work) if load.concurrency is not None else work


def simulate_serving(engine: EngineSpec, load: LoadSpec, replicas: int = 1, router: str = "least_outstanding",
                     slo_ttft_s: float | None = None, slo_tpot_s: float | None = None):
    """Serve `load` on `replicas` copies of `engine` behind a router; the simulator's result."""
    from tokensim.sim import Replicas, simulate

    deployment = engine if replicas == 1 else Replicas(engine, count=replicas, router=router)
    return simulate(workload_for(load), deployment, seed=load.seed, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
