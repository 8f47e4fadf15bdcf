"""An engine stamps a request when its loop takes it in, between steps (vLLM: EngineCore._process_input_queue ->
Scheduler.add_request records QUEUED), not when the request reached it. A trace timed by the engine (queued_ts) is
compared with the simulated TTFT on that clock (`engine_ttft_s`), a client's trace with the TTFT from arrival."""
import json

import numpy as np
import pytest

from tokensim.sim import ConstantTimer, EngineSpec, VllmScheduler, Workload, load_trace_measurements, simulate


def _run(arrivals, async_scheduling=True):
    work = Workload(np.array(arrivals), np.full(len(arrivals), 100), np.full(len(arrivals), 5))
    spec = EngineSpec(VllmScheduler(async_scheduling=async_scheduling), ConstantTimer(0.010), kv_cache_tokens=10_000)
    return simulate(work, spec, seed=0)


def test_a_request_arriving_mid_step_is_stamped_at_the_steps_end_by_hand():
    """Steps of 10 ms. A reaches an idle engine at 0: taken in at once, prefilled in [0, 10) ms, first token at 10.
    B arrives at 3 ms, during that step: the loop takes it in at 10 ms, when the step ends; vLLM's async scheduling
    had already formed the step [10, 20) before B was seen, so B prefills in [20, 30). B's TTFT from arrival is
    30 - 3 = 27 ms; on the engine's clock 30 - 10 = 20 ms."""
    r = _run([0.0, 0.003])
    per = r.per_request()
    assert r.requests["seen_s"] == pytest.approx([0.0, 0.010])
    assert per["ttft_s"] == pytest.approx([0.010, 0.027])
    assert per["engine_ttft_s"] == pytest.approx([0.010, 0.020])
    engine = r.engine_clock_summary()
    assert engine["ttft_s"]["mean"] == pytest.approx(0.015) and r.summary["ttft_s"]["mean"] == pytest.approx(0.0185)
    assert engine["e2e_s"]["mean"] == pytest.approx(r.summary["e2e_s"]["mean"] - 0.0035)   # (0 + 7 ms) / 2 earlier
    assert engine["tpot_s"] == r.summary["tpot_s"]


def test_without_async_scheduling_the_stamp_is_the_same_and_the_wait_one_step_shorter():
    """Scheduling after each step's end: B, taken in at 10 ms, is prefilled in [10, 20): 20 - 10 = 10 ms on the
    engine's clock, 17 ms from arrival."""
    per = _run([0.0, 0.003], async_scheduling=False).per_request()
    assert per["engine_ttft_s"] == pytest.approx([0.010, 0.010])
    assert per["ttft_s"] == pytest.approx([0.010, 0.017])


def test_a_trace_says_which_clock_timed_it(tmp_path):
    engine, client = tmp_path / "engine.jsonl", tmp_path / "client.jsonl"
    rec = {"input_toks": 10, "output_toks": 3, "arrival_time": 100.0, "first_token_ts": 5.2, "last_token_ts": 5.4}
    engine.write_text(json.dumps({**rec, "queued_ts": 5.0, "scheduled_ts": 5.0}) + "\n")
    client.write_text(json.dumps({**rec, "first_token_ts": 100.2, "last_token_ts": 100.4}) + "\n")
    e, c = load_trace_measurements(engine), load_trace_measurements(client)
    assert e["engine_clock"].all() and not c["engine_clock"].any()
    assert e["ttft_s"] == pytest.approx([0.2]) and c["ttft_s"] == pytest.approx([0.2])


def test_simulate_reports_an_engine_timed_trace_on_its_own_clock_too(tmp_path):
    """`tokensim simulate --trace`: a trace with queued_ts gets `engine_clock` beside the TTFT from arrival (never
    later than it); a client's trace does not."""
    from typer.testing import CliRunner

    from tokensim.cli import app
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    rec = {"input_toks": 500, "output_toks": 20, "first_token_ts": 1.0, "last_token_ts": 2.0}
    docs = {}
    for name, extra in (("engine", {"queued_ts": 0.5}), ("client", {})):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({**rec, **extra, "arrival_time": 10.0 + 0.013 * i}) + "\n" for i in range(40)))
        r = runner.invoke(app, ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--trace", str(path),
                                "--json"])
        assert r.exit_code == 0, r.stderr
        docs[name] = json.loads(r.stdout)
    engine = docs["engine"]["engine_clock"]["ttft_s"]
    assert engine["mean"] <= docs["engine"]["ttft_s"]["mean"] and engine["p99"] <= docs["engine"]["ttft_s"]["p99"] + 1e-12
    assert "engine_clock" not in docs["client"]
