"""Planning: Pareto fronts, vectorized evaluation against predict, the compare waterfall, cost and energy."""
import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tokensim
from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.perf.energy import energy
from tokensim.plan.compare import Setup, parse_setup, waterfall
from tokensim.plan.pareto import pareto_front
from tokensim.plan.search import PlanRequest, plan
from tokensim.prediction.predictor import batch_prefill_s, predict_deployment


def brute_front(x, y):
    pts = list(zip(x, y))
    keep = []
    for i, (a, b) in enumerate(pts):
        dominated = any((c >= a and d >= b) and (c > a or d > b) for c, d in pts)
        duplicate = any((c, d) == (a, b) for c, d in pts[:i])
        if not dominated and not duplicate:
            keep.append(i)
    return keep


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=40))
def test_pareto_front_matches_brute_force(points):
    """No dominated point on the front, and no non-dominated point missing (ties kept once)."""
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    front = pareto_front(x, y)
    assert sorted({(x[i], y[i]) for i in front}) == sorted({(x[i], y[i]) for i in brute_front(x, y)})
    assert len(front) == len({(x[i], y[i]) for i in front})


@pytest.fixture(scope="module")
def small_plan():
    m = tokensim.load_model("mixtral-8x7b")
    req = PlanRequest(m, (tokensim.load_hardware("h100-sxm"),), max_chips=8, input_tokens=512, output_tokens=128,
                      batches=(1, 8, 64), disaggregation=False)
    return m, req, plan(req)


def test_vectorized_and_single_point_predictions_agree(small_plan):
    """Every sampled plan point equals `predict` for the same deployment (decode speed, TTFT, memory, power).
    The plan's aggregated serving adds prefill interference, so its raw decode numbers are compared."""
    from tokensim.plan.search import candidate_groups
    from tokensim.plan.vector import evaluate_group
    m, req, _ = small_plan
    hw = req.hardware[0]
    spec = SpecDecode("eagle", 3, (0.8, 0.72, 0.65))
    rng = np.random.default_rng(0)
    checked = 0
    for g in candidate_groups(req, hw)[::5]:
        r = evaluate_group(m, hw, g, req.input_tokens, req.output_tokens, spec, req.engine)
        for i in rng.choice(len(g.tp), size=min(4, len(g.tp)), replace=False):
            dep = Deployment(tp=int(g.tp[i]), pp=g.pp, ep=int(g.ep[i]), dp=int(g.dp[i]), attn_dp=int(g.attn_dp[i]),
                             batch=int(g.batch[i]), weights=g.weights, expert_weights=g.expert_weights, kv=g.kv,
                             input_tokens=req.input_tokens, output_tokens=req.output_tokens, overlap_comm=bool(g.ep[i] > 1),
                             spec=spec if g.spec_on[i] else None)
            if not r["fits"][i]:
                continue
            p = predict_deployment(m, hw, dep)
            assert r["tokens_per_s_per_user"][i] == pytest.approx(p.tokens_per_s_per_user, rel=1e-9)
            assert r["ttft_s"][i] == pytest.approx(p.ttft_s, rel=1e-9)
            assert r["memory_per_chip_bytes"][i] == pytest.approx(p.memory_per_chip_bytes, rel=1e-9)
            assert r["power_w"][i] == pytest.approx(p.power_w, rel=1e-9)
            checked += 1
    assert checked >= 10


def test_plan_front_is_within_the_limits(small_plan):
    _, req, r = small_plan
    assert r.evaluated > 1000 and len(r.front) > 3
    for i in r.front:
        assert r.feasible[i] and r.points["chips"][i] <= req.max_chips


def test_waterfall_factors_multiply_to_the_total_ratio():
    a = parse_setup("kimi-k2.6-gpu")
    b = parse_setup("kimi-k2.6-cs3")
    factors, speed_a, speed_b, total = waterfall(a, b)
    assert total == pytest.approx(speed_b / speed_a)
    assert math.prod(f.ratio for f in factors) == pytest.approx(total, rel=1e-12)
    assert [f.name for f in factors][:2] == ["bytes touched per token (model)", "precision"]


def test_waterfall_for_predict_style_arguments():
    a = parse_setup("llama-3.1-70b@h100-sxm:tp=4,batch=8")
    b = parse_setup("llama-3.1-70b@b200:tp=2,batch=8,weights=fp8")
    factors, _, _, total = waterfall(a, b)
    assert math.prod(f.ratio for f in factors) == pytest.approx(total, rel=1e-12)
    bandwidth = next(f for f in factors if f.name == "memory bandwidth")
    # 3.35 -> 8 TB/s: the memory-bound part of the step speeds up 2.39x, launch and sync floors do not
    assert 1.2 < bandwidth.ratio < 8.0 / 3.35


def test_waterfall_names_the_engine_and_its_fusions():
    """Two setups that differ only in the launch's fusions: every factor but one is exactly 1, and that one is the
    ratio of the two predictions (before, the swap hid inside 'sequence lengths', the last step)."""
    a = parse_setup("gpt-oss-120b@b200:tp=8,batch=8,engine=trtllm")
    b = parse_setup("gpt-oss-120b@b200:tp=8,batch=8,engine=trtllm,fusions=allreduce_norm+moe_gemm1")
    assert b.deployment.fusions == ("allreduce_norm", "moe_gemm1")
    factors, speed_a, speed_b, total = waterfall(a, b)
    fused = next(f for f in factors if f.name == "engine and kernel fusions")
    assert fused.ratio == pytest.approx(speed_b / speed_a, rel=1e-12) and fused.ratio > 1.0
    assert all(f.ratio == 1.0 for f in factors if f is not fused)
    assert "fused allreduce_norm+moe_gemm1" in fused.detail
    with pytest.raises(tokensim.TokensimError, match="compare: fusions"):
        parse_setup("gpt-oss-120b@b200:tp=8,fusions=allreduce")


def test_waterfall_leaves_out_a_fusion_the_next_chip_has_no_kernels_for():
    """A fused B200 launch against an H100: from the step that takes on B's chip family, A's moe_gemm1 has no kernels
    to run, and that step's detail says it was left out (once); the factors still multiply to the total."""
    a = parse_setup("gpt-oss-120b@b200:tp=8,engine=trtllm,fusions=moe_gemm1")
    b = parse_setup("gpt-oss-120b@h100-sxm:tp=8,engine=trtllm")
    factors, _, _, total = waterfall(a, b)
    assert math.prod(f.ratio for f in factors) == pytest.approx(total, rel=1e-12)
    noted = [f.name for f in factors if "moe_gemm1 left out" in f.detail]
    assert noted == ["latency floors and efficiencies"]


def test_plan_applies_fusions_on_each_chip_that_has_their_kernels():
    """moe_gemm1 is trtllm-gen's Blackwell kernels: a plan over B200 and H100 runs it on the B200 only, and says so
    in each row; the B200 rows equal predict with the same fusions (rows with TP 1 run no all-reduce to fuse)."""
    m = tokensim.load_model("gpt-oss-120b")
    b200, h100 = tokensim.load_hardware("b200"), tokensim.load_hardware("h100-sxm")
    req = PlanRequest(m, (b200, h100), max_chips=4, batches=(8,), speculative=False, disaggregation=False,
                      engine="trtllm", fusions=("allreduce_norm", "moe_gemm1"))
    r = plan(req)
    by_chip = {hw: set(r.points["fusions"][r.points["hardware"] == hw]) for hw in ("b200", "h100-sxm")}
    assert by_chip == {"b200": {"allreduce_norm+moe_gemm1"}, "h100-sxm": {"allreduce_norm"}}
    i = next(i for i in range(r.evaluated) if r.points["hardware"][i] == "b200" and r.points["tp"][i] == 4
             and r.points["pp"][i] == 1 and r.points["ep"][i] == 1 and r.points["dp"][i] == 1
             and r.points["weights"][i] == "checkpoint" and r.points["kv"][i] == "bf16")
    dep = Deployment(tp=4, batch=8, engine="trtllm", fusions=("allreduce_norm", "moe_gemm1"))
    fused, plain = predict_deployment(m, b200, dep), predict_deployment(m, b200, Deployment(tp=4, batch=8, engine="trtllm"))
    # aggregated serving: 8 sequences x 256 tokens over the decode steps plus one prefill of every prompt
    by_hand = 8 * 256 / (256 * fused.time_per_output_token_s + batch_prefill_s(m, b200, dep))
    assert r.points["throughput_tokens_per_s"][i] == pytest.approx(by_hand, rel=1e-12)
    assert fused.tokens_per_s_per_user > plain.tokens_per_s_per_user
    with pytest.raises(tokensim.TokensimError, match="engine_version"):
        PlanRequest(m, (b200,), engine_version="latest")


def test_usd_per_mtok_and_tokens_per_joule_by_hand():
    """8 x H200 at $3.29 per chip-hour serving 10,000 tokens/s: $ per Mtok = 8 x 3.29 / 3600 / 10,000 x 1e6 = 0.7311.
    Power at 50 % busy: 8 x (105 + 0.5 x (700 - 105)) W = 3,220 W -> 10,000 / 3,220 = 3.106 tokens per joule."""
    h200 = tokensim.load_hardware("h200")
    assert h200.price_usd_per_hour == 3.29 and h200.tdp_w == 700 and h200.idle_w == 105 and h200.system_power_w is None
    e = energy(h200, 8, 0.5, 10_000.0)
    assert e.usd_per_million_tokens == pytest.approx(8 * 3.29 / 3600 / 10_000 * 1e6)
    assert e.power_w == pytest.approx(8 * (105 + 0.5 * (700 - 105)))
    assert e.tokens_per_joule == pytest.approx(10_000 / 3220)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tokensim.cli", *args], capture_output=True, text=True, timeout=300)


def test_plan_json_fields():
    proc = _cli("plan", "--model", "llama-3.1-8b", "-H", "h100-sxm", "--max-chips", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["evaluated"] > 100 and d["best"] is not None
    for p in d["front"]:
        assert {"tokens_per_s_per_user", "throughput_tokens_per_s_per_chip", "usd_per_million_tokens", "chips", "deployment"} <= set(p)


def test_plan_that_fits_nowhere_names_the_smallest_limit():
    proc = _cli("plan", "--model", "kimi-k3", "-H", "h100-sxm", "--max-chips", "8")
    assert proc.returncode == 1
    assert "fits nowhere within 8 chips" in proc.stdout and "raise --max-chips to" in proc.stdout
    proc = _cli("plan", "--model", "llama-3.1-8b", "-H", "h100-sxm", "--max-chips", "8", "--min-tps-user", "100000", "--json")
    d = json.loads(proc.stdout)
    assert d["best"] is None and "lower --min-tps-user to" in d["note"]
