"""One deployment, four entry points, one answer: predict, a scenario file, compare's setup syntax and the
planner's vectorized evaluation all go through the same layout resolver and step function (issue 9)."""
import numpy as np
import pytest

import tokensim
from tokensim.plan.compare import parse_setup
from tokensim.plan.vector import Group, evaluate_group
from tokensim.prediction.predictor import predict_deployment
from tokensim.scenarios.scenario import load_scenario, run_scenario

CASES = [   # (model, hardware, chips, dp, batch, weights)
    ("llama-3.1-70b", "h200", 4, 2, 16, "fp8"),
    ("qwen3-235b-a22b", "b200", 8, 1, 64, "fp8"),
    ("llama-3.1-8b", "h100-sxm", 2, 2, 8, None),
]


@pytest.mark.parametrize("model,hardware,chips,dp,batch,weights", CASES)
def test_predict_scenario_compare_and_planner_agree(tmp_path, model, hardware, chips, dp, batch, weights):
    p = tokensim.predict(model, hardware, chips=chips, dp=dp, batch=batch, weights=weights,
                         input_tokens=2048, output_tokens=256)
    lines = [f'name = "same"', f'model = "{model}"', f'hardware = "{hardware}"', "[deployment]",
             f"chips = {chips}", f"dp = {dp}", f"batch = {batch}", "input_tokens = 2048", "output_tokens = 256"]
    if weights:
        lines.append(f'weights = "{weights}"')
    path = tmp_path / "same.toml"
    path.write_text("\n".join(lines) + "\n")
    scenario = run_scenario(load_scenario(path))
    setup = parse_setup(f"{model}@{hardware}:chips={chips},dp={dp},batch={batch},input_tokens=2048,output_tokens=256"
                        + (f",weights={weights}" if weights else ""))
    compared = predict_deployment(setup.model, setup.hardware, setup.deployment)
    assert scenario.deployment == p.deployment == setup.deployment           # one layout resolver
    for other in (scenario, compared):
        assert other.tokens_per_s_per_user == p.tokens_per_s_per_user       # identical, not approximately
        assert other.ttft_s == p.ttft_s
        assert other.memory_per_chip_bytes == p.memory_per_chip_bytes
    d = p.deployment
    g = Group(d.pp, d.weights, d.expert_weights, d.kv, tp=np.array([d.tp]), ep=np.array([d.ep]), dp=np.array([d.dp]),
              attn_dp=np.array([d.attn_dp]), batch=np.array([d.batch]), spec_on=np.array([False]))
    planned = evaluate_group(setup.model, setup.hardware, g, 2048, 256, None)
    assert planned["tokens_per_s_per_user"][0] == pytest.approx(p.tokens_per_s_per_user, rel=1e-12)
    assert planned["ttft_s"][0] == pytest.approx(p.ttft_s, rel=1e-12)
    assert planned["memory_per_chip_bytes"][0] == pytest.approx(p.memory_per_chip_bytes, rel=1e-12)


def test_public_api_is_exactly_this():
    """The names a notebook imports from tokensim (a change here is a change users see)."""
    assert sorted(tokensim.__all__) == ["Deployment", "Prediction", "SpecDecode", "TokensimError", "load_hardware",
                                        "load_model", "predict", "predict_deployment", "to_pandas"]


def test_results_convert_to_pandas():
    pd = pytest.importorskip("pandas")
    p = tokensim.predict("llama-3.1-8b", "h100-sxm")
    frame = p.to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 1
    assert frame["tokens_per_s_per_user"].iloc[0] == p.tokens_per_s_per_user
    ops = p.to_pandas(breakdown=True)
    assert len(ops) == len(p.breakdown) + len(p.prefill_breakdown)          # decode ops, then prefill ops


def test_fusions_and_engine_release_take_the_same_path(tmp_path):
    """A fused launch on a named release: predict, a scenario file, compare's setup and the planner give one answer,
    and it is not the unfused one (gpt-oss-120b at TP 8 saves 36 + 2 x 36 launches a step, tests/test_fusions.py)."""
    kw = dict(chips=8, batch=16, input_tokens=2048, output_tokens=256, engine="trtllm", engine_version="1.1.0")
    p = tokensim.predict("gpt-oss-120b", "b200", fusions=("allreduce_norm", "moe_gemm1"), **kw)
    plain = tokensim.predict("gpt-oss-120b", "b200", **kw)
    assert p.tokens_per_s_per_user > plain.tokens_per_s_per_user
    path = tmp_path / "fused.toml"
    path.write_text('name = "fused"\nmodel = "gpt-oss-120b"\nhardware = "b200"\n[deployment]\nchips = 8\nbatch = 16\n'
                    'input_tokens = 2048\noutput_tokens = 256\nengine = "trtllm"\nengine_version = "1.1.0"\n'
                    'fusions = ["moe_gemm1", "allreduce_norm"]\n')
    scenario = run_scenario(load_scenario(path))
    setup = parse_setup("gpt-oss-120b@b200:chips=8,batch=16,input_tokens=2048,output_tokens=256,engine=trtllm,"
                        "engine_version=1.1.0,fusions=allreduce_norm+moe_gemm1")
    compared = predict_deployment(setup.model, setup.hardware, setup.deployment)
    assert scenario.deployment == p.deployment == setup.deployment
    assert scenario.tokens_per_s_per_user == compared.tokens_per_s_per_user == p.tokens_per_s_per_user
    d = p.deployment
    g = Group(d.pp, d.weights, d.expert_weights, d.kv, tp=np.array([d.tp]), ep=np.array([d.ep]), dp=np.array([d.dp]),
              attn_dp=np.array([d.attn_dp]), batch=np.array([d.batch]), spec_on=np.array([False]))
    planned = evaluate_group(setup.model, setup.hardware, g, 2048, 256, None, "trtllm", engine_version="1.1.0",
                             fusions=d.fusions)
    assert planned["tokens_per_s_per_user"][0] == pytest.approx(p.tokens_per_s_per_user, rel=1e-12)
    assert planned["ttft_s"][0] == pytest.approx(p.ttft_s, rel=1e-12)
