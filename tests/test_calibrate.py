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
from tokensim.validate.calibrate import calibrate, profile_text

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
    family = tokensim.load_hardware(HW).family
    assert table["constants"][family]["vllm"]["host_overhead_s"] == pytest.approx(report["values"]["host_overhead_s"])
    assert "default" in table["constants"]                        # the fitted table in use is kept around them
