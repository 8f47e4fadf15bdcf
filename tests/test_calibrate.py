"""`tokensim calibrate` on traces made by the simulator with known constants: it must find constants that reproduce
them, in sample and on the trace it was not fitted on."""
import json

import numpy as np
import pytest

import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.perf.constants import default_table
from tokensim.prediction.serving import engine_for
from tokensim.sim import simulate, synthetic
from tokensim.validate.calibrate import calibrate, profile_text, read_trace, simulated_stats

MODEL, HW = "llama-3.1-8b", "h100-sxm"
TRUE = {"host_overhead_s": 0.004, "hbm_bandwidth_fraction": 0.45}      # a slow engine: 4 ms per step, 45 % of HBM


def _trace(folder, rate: float, seed: int):
    m, hw = tokensim.load_model(MODEL), tokensim.load_hardware(HW)
    table = default_table().with_overlay({hw.family: {"vllm": TRUE}})
    spec = engine_for(m, hw, Deployment(engine="vllm"), constants=table, kv_cache_tokens=200_000)
    work = synthetic(80, np.random.default_rng(seed), rate_per_s=rate, input_tokens=600, output_tokens=60)
    req = simulate(work, spec, seed=seed).requests
    folder.mkdir()
    with (folder / "requests.jsonl").open("w") as f:
        for i in range(len(req["arrival_s"])):
            f.write(json.dumps({"request_id": f"r{i}", "input_toks": int(req["input_tokens"][i]),
                                "output_toks": int(req["output_tokens"][i]), "arrival_time": float(req["arrival_s"][i]),
                                "first_token_ts": float(req["first_token_s"][i]),
                                "last_token_ts": float(req["last_token_s"][i])}) + "\n")
    return folder


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("cal")
    traces = [_trace(root / "low", 2.0, 1), _trace(root / "high", 8.0, 2)]
    return calibrate(traces, tokensim.load_model(MODEL), tokensim.load_hardware(HW), Deployment(engine="vllm"),
                     kv_cache_tokens=200_000)


def test_the_defaults_miss_and_the_calibrated_constants_reproduce_the_traces(report):
    assert max(abs(r["tpot_error"]) for r in report["before"]) > 0.3        # the shipped constants are far off
    for r in report["after"]:
        assert abs(r["ttft_error"]) < 0.08 and abs(r["tpot_error"]) < 0.08, r


def test_each_trace_is_predicted_from_a_fit_on_the_other(report):
    assert len(report["held_out"]) == 2
    for r in report["held_out"]:
        assert abs(r["tpot_error"]) < 0.12 and abs(r["ttft_error"]) < 0.25, r


def test_the_profile_is_a_fitted_table_with_the_calibrated_constants(report):
    import tomllib

    table = tomllib.loads(profile_text(report))
    chip = tokensim.load_hardware(HW).name                      # the most specific level: a chip's own
    assert table["constants"][chip]["vllm"]["host_overhead_s"] == pytest.approx(report["values"]["host_overhead_s"])
    assert "default" in table["constants"]                        # the fitted table in use is kept around them


def test_a_trace_replayed_with_the_constants_that_made_it_gives_back_its_mean_and_p90(tmp_path):
    """read_trace's p90 is the 90th percentile of (first token - arrival) and of (last - first) / (tokens - 1), and
    simulated_stats with the table that made the trace returns the same TPOT mean and p90, and the same TTFT mean and
    p90 plus the request path (request_overhead_s: the trace was made engine-side, the replay adds the client's path)."""
    folder = _trace(tmp_path / "t", 6.0, 3)
    rows = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    ttft = np.array([r["first_token_ts"] - r["arrival_time"] for r in rows])
    tpot = np.array([(r["last_token_ts"] - r["first_token_ts"]) / (r["output_toks"] - 1) for r in rows])
    t = read_trace(folder)
    assert t.ttft_p90_s == pytest.approx(np.quantile(ttft, 0.9), rel=1e-9)
    assert t.tpot_p90_s == pytest.approx(np.quantile(tpot, 0.9), rel=1e-9)
    hw = tokensim.load_hardware(HW)
    path_s = 0.03
    table = default_table().with_overlay({hw.family: {"vllm": {**TRUE, "request_overhead_s": path_s}}})
    s = simulated_stats(t, tokensim.load_model(MODEL), hw, Deployment(engine="vllm"), table, 200_000)
    assert s["ttft_s"]["mean"] == pytest.approx(t.ttft_s + path_s, rel=1e-6)
    assert s["ttft_s"]["p90"] == pytest.approx(t.ttft_p90_s + path_s, rel=1e-6)
    assert s["tpot_s"]["mean"] == pytest.approx(t.tpot_s, rel=1e-6)
    assert s["tpot_s"]["p90"] == pytest.approx(t.tpot_p90_s, rel=1e-6)


def test_an_engine_timed_trace_is_replayed_on_the_engines_clock_without_a_request_path(tmp_path):
    """A vLLM trace times each request from when the engine took it in (queued_ts, at the end of the step it arrived
    during): simulated_stats, with the table that made it, gives back its TTFT on that clock and adds no request path
    (a path of 30 ms changes nothing), and a calibration on such traces alone leaves the path out."""
    m, hw = tokensim.load_model(MODEL), tokensim.load_hardware(HW)
    table = default_table().with_overlay({hw.family: {"vllm": TRUE}})
    spec = engine_for(m, hw, Deployment(engine="vllm"), constants=table, kv_cache_tokens=200_000)
    work = synthetic(60, np.random.default_rng(4), rate_per_s=6.0, input_tokens=600, output_tokens=60)
    req = simulate(work, spec, seed=4).requests
    folder = tmp_path / "engine"
    folder.mkdir()
    with (folder / "requests.jsonl").open("w") as f:
        for i in range(len(req["arrival_s"])):
            f.write(json.dumps({"input_toks": int(req["input_tokens"][i]), "output_toks": int(req["output_tokens"][i]),
                                "arrival_time": 1e9 + float(req["arrival_s"][i]), "queued_ts": float(req["seen_s"][i]),
                                "scheduled_ts": float(req["first_scheduled_s"][i]),
                                "first_token_ts": float(req["first_token_s"][i]),
                                "last_token_ts": float(req["last_token_s"][i])}) + "\n")
    t = read_trace(folder)
    assert t.engine_clock
    assert t.ttft_s == pytest.approx(np.mean(req["first_token_s"] - req["seen_s"]), rel=1e-9)
    for path_s in (0.0, 0.03):
        with_path = table.with_overlay({hw.family: {"vllm": {"request_overhead_s": path_s}}})
        s = simulated_stats(t, m, hw, Deployment(engine="vllm"), with_path, 200_000)
        assert s["ttft_s"]["mean"] == pytest.approx(t.ttft_s, rel=1e-6)
        assert s["tpot_s"]["mean"] == pytest.approx(t.tpot_s, rel=1e-6)
    from tokensim.validate.calibrate import fit_traces
    values = fit_traces([t], m, hw, Deployment(engine="vllm"), default_table(), 200_000, sweeps=1, steps=2)
    assert "request_overhead_s" not in values and "host_overhead_s" in values
