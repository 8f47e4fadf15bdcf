"""serving_dev.csv under load (validate.serving_dev): each published serving row re-run through the simulator."""
from dataclasses import replace

import pytest

from tokensim.perf.constants import default_table
from tokensim.validate.load import replay_trace, shipped_traces
from tokensim.validate.serving_dev import (
    Skip,
    _deployment,
    _metric_value,
    simulate_row,
    summary,
    validate_serving_dev,
)
from tokensim.validate.serving_rows import ServingRow

ROW = ServingRow(id="t1", engine="vllm", engine_version="0.19.0", model="llama-3.1-8b", hardware="h100-sxm", chips=1,
                 tp=1, pp=1, ep=None, attention_dp=None, weights="bf16", kv=None, dataset="synthetic",
                 mean_input_tokens=512.0, mean_output_tokens=64.0, arrival="poisson", request_rate_per_s=0.5,
                 concurrency=None, metric="ttft_s_mean", scenario="", value=0.05, source_url="https://example.org/x",
                 source_date="2026-01-01", notes="")


def test_metric_values_are_read_from_the_summary_as_defined():
    """Latency metrics are the summary's statistic; total throughput = (input + output tokens) / duration, by hand:
    (3,000 + 1,000) / 2 s = 2,000 tokens/s; output throughput is the summary's own."""
    s = {"ttft_s": {"mean": 0.1, "p50": 0.09, "p90": 0.2, "p99": 0.3}, "tpot_s": {"p50": 0.02},
         "itl_s": {"mean": 0.021}, "e2e_s": {"p50": 1.5}, "throughput_tokens_per_s": 500.0, "requests_per_s": 4.0,
         "duration_s": 2.0, "input_tokens": 3000, "output_tokens": 1000}
    assert _metric_value(s, "ttft_s_p99") == 0.3
    assert _metric_value(s, "tpot_s_p50") == 0.02
    assert _metric_value(s, "itl_s_mean_token_weighted") == 0.021
    assert _metric_value(s, "e2e_s_p50") == 1.5
    assert _metric_value(s, "throughput_output_tokens_per_s") == 500.0
    assert _metric_value(s, "throughput_tokens_per_s") == pytest.approx(2000.0)
    assert _metric_value(s, "requests_per_s") == 4.0


def test_chips_beyond_one_replica_are_replicas_and_attention_dp_ranks_share_one():
    notes: list[str] = []
    dep, replicas = _deployment(replace(ROW, model="llama-3.1-70b", chips=8, tp=2), notes)
    assert (dep.tp, dep.attn_dp, replicas) == (2, 1, 4)
    # vLLM DP2 + expert parallelism on 2 GPUs: one replica of two attention ranks whose experts are split in two
    dep, replicas = _deployment(replace(ROW, model="qwen3-30b-a3b", chips=2, tp=1, ep=2, attention_dp=2), notes)
    assert (dep.tp, dep.attn_dp, dep.ep, replicas) == (1, 2, 2, 1)


def test_unstated_facts_skip_with_their_name():
    with pytest.raises(Skip, match="mean input tokens not stated"):
        _deployment(replace(ROW, mean_input_tokens=None), [])
    r = simulate_row(replace(ROW, request_rate_per_s=None))
    assert r.predicted is None and "request rate not stated" in (r.skipped_reason or "")


def test_queueing_grows_ttft_with_the_rate():
    """The same deployment under a heavier Poisson load waits longer for its first token (and is never faster)."""
    light = simulate_row(replace(ROW, request_rate_per_s=0.5))
    heavy = simulate_row(replace(ROW, request_rate_per_s=60.0, mean_input_tokens=2048.0))
    assert light.predicted is not None and heavy.predicted is not None
    assert heavy.predicted > 3 * light.predicted


@pytest.fixture(scope="module")
def shipped():
    """With an explicit constants table (the shipped one), as `tokensim fit` output would be passed."""
    return validate_serving_dev(constants=default_table())


def test_rows_relaying_a_shipped_trace_replay_it(shipped):
    """s039 (LLMServingSim's RTX 4090 run) is the trace RTX4090_Llama-3.1-8B: its simulated TTFT mean is the trace
    replay's, to the last digit."""
    results = {r.row.id: r for r in shipped}
    folder = next(f for f in shipped_traces() if f.name == "RTX4090_Llama-3.1-8B")
    assert results["s039"].predicted == pytest.approx(replay_trace(folder).simulated["ttft_s"]["mean"], rel=1e-12)


def test_the_shipped_rows_skip_only_for_missing_facts(shipped):
    results = shipped
    s = summary(results)
    assert s["rows"] == 62 and s["modelled"] >= 34
    reasons = [r.skipped_reason for r in results if r.skipped_reason]
    assert reasons and all("not stated" in x for x in reasons), sorted(set(reasons))
    # every modelled row says how its load was laid out
    assert all(r.assumptions for r in results if r.predicted is not None)


def test_a_data_parallel_expert_parallel_trace_replays_on_the_layout_and_caps_it_states(shipped, tmp_path):
    """LLMServingSim's Qwen3-30B-A3B run (meta.json: tensor_parallel_size 1, data_parallel_size 2,
    enable_expert_parallel, max_num_seqs 128, max_num_batched_tokens 2,048) is vLLM's attention DP 2 with the experts
    split over both GPUs, ep = 1 x 2; each engine core schedules on its own, so the simulated engine, which holds both,
    gets 2 x 128 = 256 sequences and 2 x 2,048 = 4,096 tokens a step. serving_dev's rows of that run (s054-s058)
    replay it rather than a Poisson load at the stated means."""
    import json

    from tokensim.prediction.serving import read_trace_folder
    from tokensim.specs.model.catalog import load_model

    folder = next(f for f in shipped_traces() if f.name == "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507")
    tf = read_trace_folder(folder)
    dep = tf.deployment(load_model("qwen3-30b-a3b"))
    assert (dep.tp, dep.attn_dp, dep.ep, dep.chips, dep.moe_tp) == (1, 2, 2, 2, 1)
    assert tf.scheduler_overrides() == {"max_num_seqs": 256, "max_num_batched_tokens": 4096}
    results = {r.row.id: r for r in shipped}
    assert results["s054"].predicted == pytest.approx(replay_trace(folder).simulated["ttft_s"]["mean"], rel=1e-12)
    # data parallelism on a dense model would be replicas behind one client: refused in one line, not guessed
    dense = tmp_path / "RTXPRO6000_Qwen3-32B"
    dense.mkdir()
    meta = json.loads((folder / "meta.json").read_text())
    meta["model"] = "Qwen/Qwen3-32B"
    (dense / "meta.json").write_text(json.dumps(meta))
    (dense / "requests.jsonl").write_text((folder / "requests.jsonl").read_text())
    from tokensim.errors import TokensimError
    with pytest.raises(TokensimError, match="data_parallel_size 1 for a dense model"):
        read_trace_folder(dense).deployment(load_model("qwen3-32b"))


def test_a_trace_replays_with_gpu_peer_to_peer_switched():
    """RTXPRO6000_Qwen3-32B runs at TP 2 over PCIe; its card's file states no P2P (medium pcie-host, 0.25 of the line
    rate), so with P2P switched on (0.66) every prefill's all-reduces are faster and TTFT and TPOT both drop; the
    RTX 4090 trace runs on one GPU, so the switch changes nothing there."""
    folders = {f.name: f for f in shipped_traces()}
    off, on = (replay_trace(folders["RTXPRO6000_Qwen3-32B"], p2p=p) for p in (None, True))
    assert on.simulated["ttft_s"]["mean"] < off.simulated["ttft_s"]["mean"]
    assert on.simulated["tpot_s"]["mean"] < off.simulated["tpot_s"]["mean"]
    single = [replay_trace(folders["RTX4090_Llama-3.1-8B"], p2p=p).simulated for p in (None, True)]
    assert single[0] == single[1]
