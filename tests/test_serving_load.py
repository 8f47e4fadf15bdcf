"""Serving runs under load: the request-path rule and the simulated closed loop (issues 11 and 12)."""
from dataclasses import replace

import numpy as np
import pytest

from tokensim.validate.load import LIGHT_LOAD_CLIENTS, request_path_s, shipped_silicon_cases, simulate_case


@pytest.fixture(scope="module")
def vllm_cases():
    return [c for c in shipped_silicon_cases() if c.deployment.engine == "vllm" and c.run.mode == "agg"][:200]


def test_request_path_reads_only_lightly_loaded_runs(vllm_cases):
    """Runs with more than LIGHT_LOAD_CLIENTS clients queue: whatever their TTFT, they do not move the request path."""
    light = [c for c in vllm_cases if c.concurrency <= LIGHT_LOAD_CLIENTS]
    heavy = [c for c in vllm_cases if c.concurrency > LIGHT_LOAD_CLIENTS]
    assert light and heavy
    base = request_path_s(light)["vllm"]
    slowed = [replace(c, run=replace(c.run, ttft_s=c.run.ttft_s * 50)) for c in heavy]
    assert request_path_s(light + slowed)["vllm"] == base
    assert 0.0 <= base < 1.0


def test_simulated_closed_loop_tpot_matches_its_step_times():
    """One client, 256 prompt tokens: the simulated TPOT of a run is the time of a decode step of one sequence
    (no other requests share the steps), and its TTFT the request path plus the prefill step."""
    from tokensim.perf.timer import CostModelTimer
    from tokensim.sim.timer import StepBatch
    from tokensim.specs.hardware.catalog import catalog
    from tokensim.specs.model.catalog import catalog_model

    c = next(c for c in shipped_silicon_cases() if c.concurrency == 1 and c.run.mode == "agg")
    r = simulate_case(c, requests_per_client=2, warmup_rounds=1, request_path=0.05)
    timer = CostModelTimer(catalog_model(c.run.model), catalog()[c.run.system], c.deployment)
    empty = np.zeros(0, dtype=np.int64)
    prefill = timer.step_s(StepBatch(empty, np.array([c.run.isl]), np.array([0])))
    first_decode = timer.step_s(StepBatch(np.array([c.run.isl]), empty, empty))
    last_decode = timer.step_s(StepBatch(np.array([c.run.isl + c.run.osl - 2]), empty, empty))
    assert r.ttft_s == pytest.approx(0.05 + prefill, rel=0.02)
    assert first_decode * 0.99 <= r.tpot_s <= last_decode * 1.01
