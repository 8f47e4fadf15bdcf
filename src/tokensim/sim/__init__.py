"""Serving simulator: requests, schedulers, KV caches and step timers in simulated time.

    from tokensim.sim import (AffineTimer, EngineSpec, VllmScheduler, simulate, synthetic)
    import numpy as np
    spec = EngineSpec(VllmScheduler(), AffineTimer(0.006, 2e-5, 2e-8, 1e-5), kv_cache_tokens=400_000)
    work = synthetic(10_000, np.random.default_rng(0), rate_per_s=20, input_tokens=1000, output_tokens=200)
    simulate(work, spec, seed=0).summary["ttft_s"]
"""
from tokensim.sim.online import OnlineSimulation, TokenEvent
from tokensim.sim.results import SimulationResult
from tokensim.sim.schedulers import SglangScheduler, StaticBatchScheduler, TrtllmScheduler, VllmScheduler
from tokensim.sim.simulation import Disaggregated, Replicas, Simulation, simulate
from tokensim.sim.spec import EngineSpec, SpeculativeDecoding
from tokensim.sim.timer import AffineTimer, ConstantTimer, RecordingTimer, ScaledTimer, StepBatch, StepTimer
from tokensim.sim.workload import (
    ClosedLoop,
    Workload,
    drawn_lengths,
    gamma_arrivals,
    load_trace,
    load_trace_measurements,
    poisson_arrivals,
    range_lengths,
    synthetic,
)

__all__ = ["AffineTimer", "ClosedLoop", "ConstantTimer", "Disaggregated", "EngineSpec",
           "OnlineSimulation", "RecordingTimer", "Replicas", "ScaledTimer", "SglangScheduler", "Simulation",
           "SimulationResult", "SpeculativeDecoding", "StaticBatchScheduler", "StepBatch", "StepTimer",
           "TokenEvent", "TrtllmScheduler", "VllmScheduler", "Workload", "drawn_lengths", "gamma_arrivals", "load_trace",
           "load_trace_measurements", "poisson_arrivals", "range_lengths", "simulate", "synthetic"]
