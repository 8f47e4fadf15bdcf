"""The steady-state TPOT of a measured serving run: a step carries whole prompts, not a fraction of one each."""
from dataclasses import replace

import numpy as np
import pytest

from tokensim.perf.constants import for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.layers import Batch
from tokensim.perf.step import step_cost
from tokensim.specs.hardware.catalog import catalog
from tokensim.specs.model.catalog import catalog_model
from tokensim.validate.fit import shipped_silicon
from tokensim.validate.serving import build_cases, steady_tpot
from tokensim.validate.serving_rows import read_silicon

# Qwen3-235B-A22B (FP8) on 4 H100 with TensorRT-LLM, 1,024 in / 128 out, 4 clients (silicon_dev.csv)
RUN = "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h100_sxm_trtllm_agg_1024x128_c4_tp4_epnone_4"


@pytest.fixture(scope="module")
def case():
    runs, _ = read_silicon(shipped_silicon())
    cases, _ = build_cases([r for r in runs if r.id == RUN])
    assert len(cases) == 1
    return cases[0]


def _step_s(case, decode_seqs: float, prompts: float) -> float:
    dep = case.deployment
    model, hw = catalog_model(case.run.model), catalog()[case.run.system]
    ctx = make_context(model, hw, dep, for_hardware(hw, dep.engine, None))
    b = Batch(decode_seqs=decode_seqs, decode_context=dep.input_tokens + dep.output_tokens / 2.0,
              prefill_seqs=prompts, prefill_tokens=float(dep.input_tokens), prefill_position=dep.input_tokens / 2.0)
    return float(step_cost(ctx, b).latency_s)


def test_a_fraction_of_a_prompt_per_step_is_that_share_of_steps_carrying_one(case):
    # 4 clients, 128 tokens out each: 4 / 128 = 1/32 prompt per step; in steady state one step in 32 prefills a
    # whole 1,024-token prompt beside the 4 decodes, the other 31 decode only
    t_decode, t_mixed = _step_s(case, 4, 0), _step_s(case, 4, 1)
    expected = (31 / 32) * t_decode + (1 / 32) * t_mixed
    assert steady_tpot([case])[0] == pytest.approx(expected, rel=1e-9)


def test_the_mean_step_is_below_the_step_of_the_mean_batch_for_a_moe(case):
    # a MoE step's expert reads are concave in its tokens: spreading 1/32 of a prompt (32 tokens) over every step
    # touches far more experts per step than 4 decodes do, so pricing the mean batch overstates the mean step
    averaged = _step_s(case, 4, 1 / 32)
    assert steady_tpot([case])[0] < 0.8 * averaged


@pytest.mark.parametrize("clients, low, share_high", [(320, 2, 0.5), (512, 4, 0.0)])
def test_several_prompts_per_step_split_between_the_two_nearest_counts(case, clients, low, share_high):
    # 320 / 128 = 2.5 prompts per step: half the steps carry 2, half carry 3; 512 / 128 = 4: every step carries 4
    c = replace(case, concurrency=float(clients), deployment=replace(case.deployment, batch=clients))
    expected = (1 - share_high) * _step_s(c, clients, low) + share_high * _step_s(c, clients, low + 1)
    assert steady_tpot([c])[0] == pytest.approx(expected, rel=1e-9)


def test_a_disaggregated_decode_worker_sees_no_prompts(case):
    c = replace(case, prefill_in_decode=False)
    assert steady_tpot([c])[0] == pytest.approx(_step_s(case, 4, 0), rel=1e-9)
    assert np.isfinite(steady_tpot([c])).all()
