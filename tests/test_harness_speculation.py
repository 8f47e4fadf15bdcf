"""Runs whose harness ran speculative decoding (InferenceX's MTP image) are simulated with their drafts, and a
speculative step is priced as a verify step plus its draft passes in the simulator and the steady estimate alike."""
from dataclasses import replace

import numpy as np
import pytest

import tokensim
from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.perf.constants import for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.layers import Batch
from tokensim.perf.step import step_cost
from tokensim.perf.timer import CostModelTimer
from tokensim.prediction.predictor import draft_step_s, predict_deployment
from tokensim.sim.timer import StepBatch
from tokensim.validate.harness import harness_limits, harness_speculation
from tokensim.validate.rules import speculative_defaults
from tokensim.validate.load import shipped_silicon_cases

MTP_IMAGE = "nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3"
PLAIN_IMAGE = "nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post2"
EMPTY = np.zeros(0, dtype=np.int64)


def test_the_mtp_image_implies_three_drafts_or_one_under_attention_dp():
    spec, note = harness_speculation(MTP_IMAGE, "trtllm", 1)
    rates = tuple(speculative_defaults()["mtp_acceptance"])
    assert spec == SpecDecode("mtp", 3, rates[:3]) and "MTP" in note
    assert harness_speculation(MTP_IMAGE, "trtllm", 8)[0] == SpecDecode("mtp", 1, rates[:1])
    assert harness_speculation(MTP_IMAGE.replace("#", "/"), "trtllm", 1)[0] is not None
    assert harness_speculation(PLAIN_IMAGE, "trtllm", 1) is None
    assert harness_speculation(None, "trtllm", 1) is None
    assert harness_speculation(MTP_IMAGE, "vllm", 1) is None


def test_the_mtp_scripts_token_budget_by_hand():
    # TP8, 4 clients: batch 4, ((3 + 1) 4 + 1024 + 64) = 1104 -> 1152 (18 x 64)
    assert harness_limits(MTP_IMAGE, "trtllm", 1, 4, 1024) == (4, 1152)
    # attention DP 8, 256 clients: batch 256 / 4 = 64, ((1 + 1) 64 + 1024 + 64) = 1216 = 19 x 64
    assert harness_limits(MTP_IMAGE, "trtllm", 8, 256, 1024) == (64, 1216)
    assert harness_limits(MTP_IMAGE, "trtllm", 8, 2, 1024)[0] == 2         # below 4 clients: CONC itself
    assert harness_limits(PLAIN_IMAGE, "trtllm", 1, 4, 1024) is None


def test_exactly_the_shipped_runs_in_the_mtp_image_carry_drafts():
    cases = shipped_silicon_cases()
    mtp = [c for c in cases if c.deployment.spec is not None]
    in_image = [c for c in cases if c.run.image and c.run.image.endswith("release:1.2.0rc6.post3")]
    assert len(mtp) == 88 and {c.run.id for c in mtp} == {c.run.id for c in in_image}    # README says 88
    assert all(c.run.model == "deepseek-r1" and c.run.system == "b200" for c in mtp)
    assert all(c.deployment.spec.draft_tokens == (1 if c.deployment.attn_dp > 1 else 3) for c in mtp)
    assert all(any("speculative decoding" in a for a in c.assumptions) for c in mtp)


def test_a_verify_step_in_the_simulator_adds_its_draft_passes():
    """The timer's verify step of B sequences (q = 1 + k) is the step of B x q tokens plus k draft passes, each the
    model's last layer and LM head for B tokens: the same draft the prediction charges."""
    model, hw = tokensim.load_model("deepseek-v3"), tokensim.load_hardware("b200")
    spec = SpecDecode("mtp", 3, (0.85,))
    dep = Deployment(tp=8, batch=16, input_tokens=1024, output_tokens=1024, weights="fp8")
    timer = CostModelTimer(model, hw, dep, draft=spec, exact=True)
    plain = CostModelTimer(model, hw, dep, exact=True)
    ctx = np.full(16, 1500)
    batch = StepBatch(ctx, EMPTY, EMPTY, query_tokens_per_decode=4)
    c = make_context(model, hw, dep, for_hardware(hw, dep.engine, None))
    draft = draft_step_s(c, spec, 16.0, context=1500.0)
    assert draft > 0
    assert timer.step_s(batch) == pytest.approx(plain.step_s(batch) + 3 * draft, rel=1e-12)
    # a step with no decodes runs no draft
    pre = StepBatch(EMPTY, np.array([1024]), np.array([0]), query_tokens_per_decode=4)
    assert timer.step_s(pre) == pytest.approx(plain.step_s(pre), rel=1e-12)


def test_the_steady_estimate_of_a_speculative_run_is_the_predicted_cycle_over_its_tokens():
    """A decode-only step with drafts, over 1 + a + a^2 + a^3 tokens, is what predict gives for the same deployment
    (pp 1: the cycle is the verify step plus the drafts)."""
    from tokensim.validate.serving import _step_s, tokens_per_step

    model, hw = tokensim.load_model("deepseek-v3"), tokensim.load_hardware("b200")
    spec = SpecDecode("mtp", 3, (0.85,))
    dep = Deployment(tp=8, batch=16, input_tokens=1024, output_tokens=1024, weights="fp8", spec=spec)
    c = make_context(model, hw, dep, for_hardware(hw, dep.engine, None))
    step = float(_step_s(c, np.array([16.0]), np.zeros(1), dep)[0])
    verify = step_cost(c, Batch(decode_seqs=16.0, query_per_decode=4.0, decode_context=1024 + 512)).latency_s
    assert step == pytest.approx(verify + 3 * draft_step_s(c, spec, 16.0), rel=1e-12)
    assert tokens_per_step(dep) == pytest.approx(1 + 0.85 + 0.85**2 + 0.85**3)
    p = predict_deployment(model, hw, dep)
    assert step / tokens_per_step(dep) == pytest.approx(p.time_per_output_token_s, rel=1e-9)
    assert tokens_per_step(replace(dep, spec=None)) == 1.0
