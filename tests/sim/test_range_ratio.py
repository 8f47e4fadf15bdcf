"""Request lengths drawn as benchmark clients draw them (`--range-ratio`): uniform integers in [int(r L), L], the
random dataset of vLLM's, SGLang's and InferenceX's benchmark_serving (sample_random_requests:
np.random.randint(int(L * r), L + 1)); in the simulator, the bench and the harness of the measured runs alike."""
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tokensim.cli import app
from tokensim.endpoints.bench import BenchConfig, _workload
from tokensim.errors import TokensimError
from tokensim.prediction.serving import LoadSpec, workload_for
from tokensim.sim import AffineTimer, EngineSpec, VllmScheduler, range_lengths, simulate, synthetic

try:
    runner = CliRunner(mix_stderr=False)     # click < 8.2 mixes stderr into stdout unless told not to
except TypeError:
    runner = CliRunner()


def test_draws_are_uniform_integers_between_int_r_l_and_l():
    """L = 1024, r = 0.8: int(819.2) = 819, so the draws lie in [819, 1024] and their mean is (819 + 1024) / 2 =
    921.5; the standard deviation of a uniform over 206 integers is sqrt((206^2 - 1) / 12) = 59.5, so over 20,000
    draws the mean lies within 3 standard errors, 3 x 59.5 / sqrt(20,000) = 1.3 tokens."""
    draws = range_lengths(1024, 0.8, 20_000, np.random.default_rng(7))
    assert draws.dtype == np.int64
    assert draws.min() == 819 and draws.max() == 1024
    assert abs(draws.mean() - 921.5) < 1.3
    again = range_lengths(1024, 0.8, 20_000, np.random.default_rng(7))
    assert np.array_equal(draws, again)                                   # seeded: the same every time


def test_a_ratio_of_one_is_every_request_exactly_l_and_draws_nothing():
    """Fixed lengths must leave every earlier workload as it was: no number is taken from the generator."""
    rng = np.random.default_rng(3)
    assert range_lengths(512, 1.0, 5, rng).tolist() == [512] * 5
    assert rng.random() == np.random.default_rng(3).random()


@pytest.mark.parametrize("ratio", [0, -0.5, 1.5, float("nan"), float("inf")])
def test_bad_ratios_are_refused_naming_the_field(ratio):
    with pytest.raises(TokensimError, match="range_ratio"):
        range_lengths(1024, ratio, 3, np.random.default_rng(0))
    with pytest.raises(TokensimError, match="range_ratio"):
        LoadSpec(10, rate_per_s=1.0, range_ratio=ratio)


def test_load_spec_draws_inputs_then_outputs_from_its_seed_before_the_arrivals():
    """A ratio below 1 draws the lengths first (inputs, then outputs) from the load's seeded generator, then the
    arrivals; a ratio of 1 is the fixed-length workload, arrivals included, byte for byte."""
    fixed = workload_for(LoadSpec(200, rate_per_s=5.0, input_tokens=1000, output_tokens=100, seed=4))
    before = synthetic(200, np.random.default_rng(4), rate_per_s=5.0, input_tokens=1000, output_tokens=100)
    assert np.array_equal(fixed.arrival_s, before.arrival_s) and set(fixed.input_tokens.tolist()) == {1000}
    drawn = workload_for(LoadSpec(200, rate_per_s=5.0, input_tokens=1000, output_tokens=100, seed=4, range_ratio=0.5))
    rng = np.random.default_rng(4)
    assert np.array_equal(drawn.input_tokens, range_lengths(1000, 0.5, 200, rng))
    assert np.array_equal(drawn.output_tokens, range_lengths(100, 0.5, 200, rng))
    assert drawn.input_tokens.min() >= 500 and drawn.output_tokens.min() >= 50
    with pytest.raises(TokensimError, match="range_ratio"):
        LoadSpec(10, rate_per_s=1.0, range_ratio=0.8, dataset="lengths.jsonl")


def test_drawn_lengths_break_the_lockstep_of_equal_requests():
    """Four closed-loop clients, 1,000 tokens in and 50 out, on a step of 5 ms + 10 us per token (no async scheduling,
    a budget of 8,192 tokens). Equal requests stay in lockstep: all four prompts share every prefill step, 5 ms +
    10 us x 4,000 = 45 ms, so every TTFT is 45 ms, round after round. Drawn in [0.8 L, L], the outputs (40-50 tokens)
    end on different steps and clients return one by one. A returning prompt arrives as the step after its last
    token starts (the engine does not wait for the client), sits out that step of at most three decodes, 5 ms +
    10 us x 3 = 5.03 ms, and is prefilled in the next beside them, 5 ms + 10 us x (1,000 + 3) = 15.03 ms at most:
    20.06 ms. Most returning prompts meet no other (two in one step share a 25 ms step), so the median TTFT after the
    first round is at most 20.06 ms, less than half the lockstep's 45 ms. This is what separates a benchmark_serving
    run from a fixed-length one (docs/model.md 5.2)."""
    timer = AffineTimer(0.005, 1e-5, 0.0, 0.0)
    spec = EngineSpec(VllmScheduler(max_num_batched_tokens=8192, async_scheduling=False), timer, kv_cache_tokens=10**6)

    def ttfts(ratio: float) -> np.ndarray:
        load = LoadSpec(80, concurrency=4, input_tokens=1000, output_tokens=50, seed=1, range_ratio=ratio)
        req = simulate(workload_for(load), spec, seed=1).requests
        return req["first_token_s"] - req["arrival_s"]

    lockstep = ttfts(1.0)
    assert lockstep == pytest.approx(np.full(80, 0.045), abs=1e-9)
    drawn = ttfts(0.8)
    alone = (0.005 + 1e-5 * 3) + (0.005 + 1e-5 * 1003)
    assert np.median(drawn[4:]) <= alone + 1e-9 < 0.5 * 0.045
    assert drawn[4:].mean() < 0.5 * lockstep[4:].mean()


def test_cli_simulate_records_the_ratio_and_refuses_bad_ones(tmp_path):
    r = runner.invoke(app, ["simulate", "--concurrency", "4", "--requests", "400", "--input-tokens", "1024",
                            "--output-tokens", "16", "--range-ratio", "0.8", "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["load"]["range_ratio"] == 0.8 and doc["completed"] == 400
    # 400 draws in [819, 1024]: mean 921.5 within 3 standard errors (3 x 59.5 / 20 = 8.9 tokens)
    assert abs(doc["input_tokens"] / 400 - 921.5) < 8.9
    fixed = json.loads(runner.invoke(app, ["simulate", "--concurrency", "4", "--requests", "40", "--json"]).stdout)
    assert "range_ratio" not in fixed["load"]
    data = tmp_path / "lengths.jsonl"
    data.write_text('{"input_tokens": 100, "output_tokens": 10}\n')
    for extra in (["--range-ratio", "0"], ["--range-ratio", "1.5"], ["--range-ratio", "0.8", "--dataset", str(data)]):
        r = runner.invoke(app, ["simulate", "--rate", "1", "--requests", "4", *extra])
        assert r.exit_code == 2 and "--range-ratio" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_bench_sends_the_lengths_the_simulator_draws():
    """`tokensim bench --range-ratio` and its `--compare` simulation must serve the same requests: the bench draws
    with the simulator's rule (the seed's generator, inputs then outputs)."""
    config = BenchConfig("http://127.0.0.1:1", "m", num_requests=50, concurrency=4, input_tokens=2048,
                         output_tokens=128, range_ratio=0.8, seed=2)
    sent = _workload(config)
    work = workload_for(LoadSpec(50, concurrency=4, input_tokens=2048, output_tokens=128, seed=2, range_ratio=0.8))
    assert [s.input_tokens for s in sent] == work.requests.input_tokens.tolist()
    assert [s.output_tokens for s in sent] == work.requests.output_tokens.tolist()
    assert len({s.input_tokens for s in sent}) > 1
    with pytest.raises(TokensimError, match="range_ratio"):
        BenchConfig("http://127.0.0.1:1", "m", concurrency=1, dataset_path="d.jsonl", range_ratio=0.8)
