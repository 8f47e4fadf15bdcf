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
from tokensim.validate.harness import INFERENCEX, harness_limits, harness_speculation, sglang_launch, sglang_mtp
from tokensim.validate.load import shipped_silicon_cases
from tokensim.validate.rules import speculative_defaults

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


def test_exactly_the_shipped_mtp_runs_carry_drafts():
    """The MTP image's 88 runs, and the 73 runs of the shared image 1.1.0rc2.post2 measured on 2026-01-14, the day
    InferenceX's perf changelog ran only its new -mtp configurations (bf3456727); that image's runs of other days
    (2025-12-15, before any MTP configuration; 2026-01-28, a sweep of both kinds) stay without drafts."""
    cases = shipped_silicon_cases()
    mtp = [c for c in cases if c.deployment.spec is not None]
    in_image = [c for c in cases if c.run.image and c.run.image.endswith("release:1.2.0rc6.post3")]
    shared = [c for c in cases if c.run.image and c.run.image.replace("#", "/").endswith("release:1.1.0rc2.post2")]
    that_day = [c for c in shared if c.run.measured == "2026-01-14"]
    assert (len(in_image), len(that_day)) == (88, 73)
    assert {c.run.id for c in mtp} == {c.run.id for c in in_image + that_day}
    assert {c.run.measured for c in shared} - {"2026-01-14"} == {"2025-12-15", "2026-01-28"}
    assert all(c.run.model == "deepseek-r1" for c in mtp) and {c.run.system for c in that_day} == {"b200", "h200"}
    assert all(c.deployment.spec.draft_tokens == (1 if c.deployment.attn_dp > 1 else 3) for c in mtp)
    assert all(any("speculative decoding" in a for a in c.assumptions) for c in mtp)


def test_the_first_mtp_scripts_batch_under_attention_dp_is_the_clients_over_the_ranks():
    """bf3456727's scripts: MAX_BATCH_SIZE = CONC / TP under attention DP (TP 8 ranks: 256 clients -> 32 per rank),
    MTP 1, MAX_NUM_TOKENS = ((1 + 1) x 32 + 1,024 + 64 + 63) // 64 x 64 = 1,152; the later image's scripts divide
    by 4 (256 -> 64; ((1 + 1) x 64 + 1,024 + 127) // 64 x 64 = 1,216). A plain run of the shared image gets none."""
    shared = "nvcr.io#nvidia/tensorrt-llm/release:1.1.0rc2.post2"
    assert harness_limits(shared, "trtllm", 8, 256, 1024, "2026-01-14") == (32, 1152)
    assert harness_limits(MTP_IMAGE, "trtllm", 8, 256, 1024) == (64, 1216)
    assert harness_limits(shared, "trtllm", 8, 256, 1024, "2025-12-15") is None
    assert harness_speculation(shared, "trtllm", 1, "2026-01-28") is None


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


SGLANG_IMAGE = "lmsysorg/sglang:v0.5.9-cu130"


def test_sglang_runs_beyond_the_plain_configurations_search_space_are_its_mtp_runs():
    """dsr1-fp8-b200-sglang and -mtp shared image v0.5.9-cu130 on 2026-03-25 (InferenceX 12ba0ae07). The plain one
    ran TP 8 up to 64 clients at 1k/1k and 1k/8k and 4 at 8k/1k (nvidia-master.yaml): 128 clients at 1k/1k or 8 at
    8k/1k can only be MTP runs, 64 at 1k/1k or 4 at 8k/1k stand as stated, as do other days, images and TP 4."""
    def mtp(tp, isl, osl, clients, image=SGLANG_IMAGE, day="2026-03-25", weights="fp8"):
        return sglang_mtp(INFERENCEX, image, "deepseek-r1", "b200", weights, day, tp, isl, osl, clients)

    assert mtp(8, 1024, 1024, 128) is not None and mtp(8, 8192, 1024, 8) is not None
    assert mtp(8, 1024, 8192, 512)["draft_tokens"] == 2     # --speculative-num-steps 2
    assert mtp(8, 1024, 1024, 64) is None and mtp(8, 8192, 1024, 4) is None
    assert mtp(8, 1024, 1024, 128, day="2026-03-18") is None
    assert mtp(8, 1024, 1024, 128, image="lmsysorg/sglang:v0.5.8.post1-cu130-amd64") is None
    assert mtp(4, 8192, 1024, 32) is None and mtp(8, 1024, 1024, 128, weights="nvfp4") is None
    # its script's caps, not the plain script's 128 running requests
    caps = sglang_launch(INFERENCEX, "deepseek-r1", "b200", "fp8", "0.5.9", 8, 1024, 1024, 512, inferencex_client=True,
                         image=SGLANG_IMAGE, measured="2026-03-25")[0]
    assert (caps["max_running_requests"], caps["chunked_prefill_size"], caps["scheduler_recv_interval"]) == (512, 16384,
                                                                                                            30)
    # the shipped rows: 13 runs beyond the plain search space, each in both of InferenceX's exports, read as MTP runs
    # and simulated without their drafts (acceptance unknown: docs/model.md 5.2)
    cases = [c for c in shipped_silicon_cases() if any("dsr1-fp8-b200-sglang-mtp" in a for a in c.assumptions)]
    assert len(cases) == 26 and {c.run.measured for c in cases} == {"2026-03-25"}
    assert all(c.deployment.spec is None and c.run.concurrency > 4 for c in cases)
