"""Workloads: arrival processes, trace replay, and refusal of bad input with a clear message."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

import tokensim
from tokensim.errors import TokensimError
from tokensim.sim import (
    AffineTimer,
    EngineSpec,
    OnlineSimulation,
    VllmScheduler,
    Workload,
    gamma_arrivals,
    load_trace,
    load_trace_measurements,
    poisson_arrivals,
    simulate,
)

# the copies the package ships (data/serving/traces), so the test runs wherever the package is installed
TRACES = Path(tokensim.__file__).resolve().parent / "data" / "serving" / "traces"
TRACE_DIRS = sorted(TRACES.glob("*/requests.jsonl"))


def test_poisson_and_gamma_arrivals_have_the_asked_rate_and_variability():
    """Mean gap 1/rate; the gaps' coefficient of variation is 1 for Poisson and cv for gamma."""
    rng = np.random.default_rng(0)
    gaps = np.diff(poisson_arrivals(50.0, 200_000, rng))
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.01)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)
    gaps = np.diff(gamma_arrivals(50.0, 3.0, 200_000, rng))
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize("path", TRACE_DIRS, ids=lambda p: p.parent.name)
def test_shared_vllm_traces_parse_and_replay(path):
    """The published vLLM 0.19 traces load (times relative to the first arrival, in order) and
    replay under the engine arguments of their meta.json: every request completes."""
    work = load_trace(path)
    rows = [json.loads(line) for line in path.open()]
    assert len(work) == len(rows) == 300
    assert work.arrival_s[0] == 0.0 and np.all(np.diff(work.arrival_s) >= 0)
    assert work.arrival_s[-1] == pytest.approx(rows[-1]["arrival_time"] - rows[0]["arrival_time"])
    np.testing.assert_array_equal(work.input_tokens, [r["input_toks"] for r in rows])
    meta = json.loads((path.parent / "meta.json").read_text())
    args = meta["engine_kwargs"]
    kv = meta.get("kv_cache", {})
    blocks = kv.get("num_gpu_blocks") or 20_000
    spec = EngineSpec(VllmScheduler(max_num_batched_tokens=args["max_num_batched_tokens"],
                                    max_num_seqs=args["max_num_seqs"]),
                      AffineTimer(0.012, 4e-5, 3e-8, 2e-5), kv_cache_tokens=blocks * 16,
                      max_model_len=args["max_model_len"])
    res = simulate(work, spec)
    assert res.summary["completed"] == 300
    measured = load_trace_measurements(path)
    assert np.all(measured["ttft_s"] > 0) and np.nanmean(measured["tpot_s"]) > 0


def test_csv_trace_with_prefixes(tmp_path):
    """A CSV trace keeps its times as given and its optional prefix columns."""
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n"
                 "0.0,100,10,3,64\n0.5,200,20,3,64\n1.5,50,5,-1,0\n")
    work = load_trace(p)
    assert work.arrival_s.tolist() == [0.0, 0.5, 1.5]
    assert work.prefix_id.tolist() == [3, 3, -1]
    assert work.prefix_tokens.tolist() == [64, 64, 0]


def _csv(tmp_path, text):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text,field,value", [
    ("arrival_s,input_tokens,output_tokens\n-1.0,10,10\n", "arrival_s", "-1.0"),
    ("arrival_s,input_tokens,output_tokens\n2.0,10,10\n1.0,10,10\n", "arrival_s", "1.0"),
    ("arrival_s,input_tokens,output_tokens,colour\n0,10,10,red\n", "column", "'colour'"),
    ("arrival_s,input_tokens,output_tokens\n0,10.5,10\n", "input_tokens", "10.5"),
    ("arrival_s,input_tokens,output_tokens\n0,0,10\n", "input_tokens", "0"),
    ("arrival_s,input_tokens,output_tokens\nnan,10,10\n", "arrival_s", "nan"),
])
def test_bad_csv_traces_are_refused_naming_field_and_value(tmp_path, text, field, value):
    with pytest.raises(TokensimError) as err:
        load_trace(_csv(tmp_path, text))
    msg = str(err.value)
    assert field in msg and value in msg and "expected" in msg and "\n" not in msg


def test_bad_jsonl_traces_are_refused(tmp_path):
    """Unsorted times, unknown fields and missing fields each name the field and the value."""
    p = tmp_path / "t.jsonl"
    p.write_text('{"input_toks": 10, "output_toks": 5, "arrival_time": 3.0}\n'
                 '{"input_toks": 10, "output_toks": 5, "arrival_time": 2.0}\n')
    with pytest.raises(TokensimError, match="arrival_time = 2.0.*sorted"):
        load_trace(p)
    p.write_text('{"input_toks": 10, "output_toks": 5, "arrival_time": 1.0, "temperature": 0.7}\n')
    with pytest.raises(TokensimError, match="field = 'temperature'"):
        load_trace(p)
    p.write_text('{"input_toks": 10, "arrival_time": 1.0}\n')
    with pytest.raises(TokensimError, match="output_toks"):
        load_trace(p)


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan, math.inf])
def test_bad_rates_are_refused(rate):
    """A rate of zero, below zero, NaN or infinite is refused, naming rate_per_s."""
    with pytest.raises(TokensimError, match=r"rate_per_s = .*expected a finite request rate > 0"):
        poisson_arrivals(rate, 10, np.random.default_rng(0))


def test_requests_longer_than_the_context_are_refused():
    """Checked against a given limit when building a workload, and on online submission."""
    work = Workload(np.array([0.0, 1.0]), np.array([100, 9000]), np.array([10, 10]))
    with pytest.raises(TokensimError, match=r"input_tokens \+ output_tokens = 9010 \(request 1\)"):
        work.check_context(8192)
    spec = EngineSpec(VllmScheduler(), AffineTimer(0.01, 0, 0, 0), kv_cache_tokens=100_000, max_model_len=8192)
    online = OnlineSimulation(spec)
    with pytest.raises(TokensimError, match="9010.*at most 8192"):
        online.submit(0.0, 9000, 10)


def test_bad_workload_arrays_and_engine_settings_are_refused():
    """Impossible lengths and engine settings are refused when the object is built."""
    with pytest.raises(TokensimError, match="output_tokens = 0"):
        Workload(np.array([0.0]), np.array([10]), np.array([0]))
    with pytest.raises(TokensimError, match="prefix_tokens = 20"):
        Workload(np.array([0.0]), np.array([10]), np.array([5]), np.array([1]), np.array([20]))
    with pytest.raises(TokensimError, match="kv_cache_tokens = 8"):
        EngineSpec(VllmScheduler(), AffineTimer(0.01, 0, 0, 0), kv_cache_tokens=8)
    with pytest.raises(TokensimError, match="max_num_batched_tokens = 128"):
        VllmScheduler(max_num_batched_tokens=128, max_num_seqs=256)
    with pytest.raises(TokensimError, match="step_time_s = 0"):
        from tokensim.sim import ConstantTimer
        ConstantTimer(0)


def test_trace_measurements_of_a_client_trace_with_a_failed_request(tmp_path):
    """A `tokensim bench` trace has the client's arrival_time and no engine clock; a failed request has no token
    times. Hand values: TTFT 1.25 - 1.0 = 0.25 s; TPOT (2.25 - 1.25) / (5 - 1) = 0.25 s; the failed one is NaN."""
    path = tmp_path / "requests.jsonl"
    path.write_text(
        '{"arrival_time": 1.0, "first_token_ts": 1.25, "last_token_ts": 2.25, "output_toks": 5}\n'
        '{"arrival_time": 2.0, "first_token_ts": null, "last_token_ts": null, "output_toks": 5}\n')
    m = load_trace_measurements(path)
    assert m["ttft_s"][0] == pytest.approx(0.25) and m["tpot_s"][0] == pytest.approx(0.25)
    assert np.isnan(m["ttft_s"][1]) and np.isnan(m["queue_s"][0])


def test_trace_measurements_name_the_line_of_a_bad_record(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text('{"arrival_time": 1.0, "first_token_ts": 1.25, "last_token_ts": 2.25, "output_toks": 5}\n'
                    '{"arrival_time": 2.0}\n')
    with pytest.raises(TokensimError, match="requests.jsonl line 2"):
        load_trace_measurements(path)
