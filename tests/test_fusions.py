"""Kernel fusions (perf.engines.FUSIONS): launches a decode step saves where an engine fuses kernels, counted by hand."""
import pytest

import tokensim
from tokensim.deploy.deployment import Deployment
from tokensim.perf.constants import for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.layers import Batch
from tokensim.perf.step import step_cost


def launch_total_s(model: str, chip: str, **dep) -> tuple[float, float]:
    """(fixed time of every op but the host's in one decode step of 4 sequences, the kernel gap)."""
    m, hw = tokensim.load_model(model), tokensim.load_hardware(chip)
    d = Deployment(**dep)
    k = for_hardware(hw, d.engine)
    cost = step_cost(make_context(m, hw, d, k), Batch.decode(4, 2000))
    return sum(op.t_fixed_s for op, _ in cost.ops if op.name != "host"), k.kernel_gap_s


def test_a_fused_allreduce_saves_two_norm_launches_per_dense_layer():
    """Llama-3.1-70B at TP 8: each of its 80 layers runs two all-reduces, and each takes over the RMSNorm after it
    (post-attention, and the next layer's input norm): 2 x 80 = 160 launches fewer."""
    plain, gap = launch_total_s("llama-3.1-70b", "b200", tp=8, weights="fp8", fusions=())
    fused, _ = launch_total_s("llama-3.1-70b", "b200", tp=8, weights="fp8", fusions=("allreduce_norm",))
    assert plain - fused == pytest.approx(2 * 80 * gap, rel=1e-9)


def test_routed_experts_alone_count_no_norm_for_the_allreduce_to_take():
    """gpt-oss-120b (36 layers, routed experts only): the MoE block counts no norm of its own, so only the next
    layer's input norm goes, 36 launches; the trtllm-gen MoE takes 2 more a layer (permute and SwiGLU into GEMM 1)."""
    plain, gap = launch_total_s("gpt-oss-120b", "b200", tp=8, fusions=())
    fused, _ = launch_total_s("gpt-oss-120b", "b200", tp=8, fusions=("allreduce_norm",))
    both, _ = launch_total_s("gpt-oss-120b", "b200", tp=8, fusions=("allreduce_norm", "moe_gemm1"))
    assert plain - fused == pytest.approx(36 * gap, rel=1e-9)
    assert fused - both == pytest.approx(2 * 36 * gap, rel=1e-9)


def test_without_tensor_parallelism_there_is_no_allreduce_to_fuse_into():
    plain, _ = launch_total_s("llama-3.1-70b", "b200", tp=1, weights="fp8", fusions=())
    fused, _ = launch_total_s("llama-3.1-70b", "b200", tp=1, weights="fp8", fusions=("allreduce_norm",))
    assert fused == pytest.approx(plain, rel=1e-12)


def test_no_engine_fuses_unless_the_deployment_says_so():
    """The kernel counts are vLLM's and SGLang's and the fitted kernel gap absorbs what an engine fuses, so a
    TensorRT-LLM deployment stating nothing launches as many kernels as a vLLM one (validate/harness.py
    APPLY_LAUNCH_FUSIONS says what a refit with TensorRT-LLM's fusion did)."""
    trt, _ = launch_total_s("llama-3.1-70b", "h200", tp=8, weights="fp8", engine="trtllm")
    plain, _ = launch_total_s("llama-3.1-70b", "h200", tp=8, weights="fp8", engine="trtllm", fusions=())
    assert trt == pytest.approx(plain, rel=1e-12)


def test_the_moe_gemm1_fusion_exists_only_on_chips_with_trtllm_gen_kernels():
    with pytest.raises(tokensim.TokensimError, match="fusions = 'moe_gemm1'"):
        launch_total_s("gpt-oss-120b", "h200", tp=8, fusions=("moe_gemm1",))


@pytest.mark.parametrize("value", [("allreduce",), ["allreduce_norm"], ("moe_gemm1", 3)])
def test_a_fusion_outside_the_known_ones_is_refused_with_its_field(value):
    with pytest.raises(tokensim.TokensimError, match="fusions"):
        Deployment(fusions=value)


def test_inferencex_launch_scripts_give_each_run_its_fusions():
    """harness.toml [[fusions]], from the scripts' histories: gpt-oss on B200 under vLLM passes fuse_allreduce_rms and
    VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1; DeepSeek-R1 FP4 on B200 under TensorRT-LLM runs MOE_BACKEND=TRTLLM, but
    CUTLASS under attention DP from 6eecc0e66 (2026-02-03) and, before it, at 8k/1k above 32 clients; FP8 ran DEEPGEMM
    until ec7bafaae (2026-01-29); aiconfigurator's runs and other harnesses get the engine's default (None)."""
    from tokensim.validate.harness import AICONFIGURATOR, INFERENCEX, launch_fusions

    def fused(engine, model, weights, measured, tp, attn_dp, isl, osl, clients, harness=INFERENCEX):
        found = launch_fusions(harness, engine, model, "b200", weights, measured, tp, attn_dp, isl, osl, clients)
        return None if found is None else found[0]

    assert fused("vllm", "gpt-oss-120b", "nvfp4", "2025-11-02", 8, 1, 1024, 1024, 4) == ("allreduce_norm", "moe_gemm1")
    assert fused("trtllm", "deepseek-r1", "nvfp4", "2026-02-05", 1, 8, 1024, 1024, 256) == ("allreduce_norm",)
    assert fused("trtllm", "deepseek-r1", "nvfp4", "2026-02-05", 8, 1, 1024, 1024, 16) == ("allreduce_norm", "moe_gemm1")
    assert fused("trtllm", "deepseek-r1", "nvfp4", "2025-12-01", 8, 1, 8192, 1024, 64) == ("allreduce_norm",)
    assert fused("trtllm", "deepseek-r1", "nvfp4", "2025-12-01", 8, 1, 8192, 1024, 32) == ("allreduce_norm", "moe_gemm1")
    assert fused("trtllm", "deepseek-r1", "fp8", "2026-01-20", 8, 1, 1024, 1024, 32) == ("allreduce_norm",)
    assert fused("trtllm", "deepseek-r1", "fp8", "2026-02-20", 8, 1, 1024, 1024, 32) == ("allreduce_norm", "moe_gemm1")
    assert fused("sglang", "glm-5", "nvfp4", "2026-03-29", 8, 1, 1024, 1024, 32) == ()
    assert fused("vllm", "minimax-m2.5", "fp8", "2026-03-20", 4, 1, 1024, 1024, 32) is None
    assert fused("vllm", "gpt-oss-120b", "nvfp4", "2025-11-02", 8, 1, 1024, 1024, 4, harness=AICONFIGURATOR) is None
    assert launch_fusions(INFERENCEX, "vllm", "gpt-oss-120b", "b200", "nvfp4", "2025-11-02", 8, 1, 1024, 1024, 4,
                          apply=False) is None


def test_validation_runs_the_shipped_counts_without_launch_fusions():
    from tokensim.validate.harness import APPLY_LAUNCH_FUSIONS
    from tokensim.validate.load import shipped_silicon_cases

    assert APPLY_LAUNCH_FUSIONS is False
    assert all(c.deployment.fusions is None for c in shipped_silicon_cases())


def test_every_fusions_entry_cites_its_script_and_names_known_fusions():
    from tokensim.perf.engines import FUSIONS
    from tokensim.validate.harness import _harness_data

    entries = _harness_data()["fusions"]
    assert entries
    for e in entries:
        assert set(e["fusions"]) <= set(FUSIONS), e["config"]
        assert e["source"].startswith("https://github.com/SemiAnalysisAI/InferenceX/blob/"), e["config"]
        assert e["engine"] in ("vllm", "sglang", "trtllm") and e["scripts"], e["config"]


def test_the_cli_and_scenario_files_take_fusions():
    from tokensim.inputs.scenario_file import DeploymentTable
    from tokensim.perf.engines import parse_fusions

    assert parse_fusions(None) is None
    assert parse_fusions("none") == ()
    assert parse_fusions("moe_gemm1, allreduce_norm") == ("moe_gemm1", "allreduce_norm")
    with pytest.raises(tokensim.TokensimError, match="--fusions"):
        parse_fusions("allreduce")
    with pytest.raises(tokensim.TokensimError, match="none alone"):
        parse_fusions("none,allreduce_norm")
    assert Deployment(fusions=()) == Deployment()          # no fusion, however it is said
    assert DeploymentTable(fusions=["allreduce_norm"]).deployment_fields()["fusions"] == ("allreduce_norm",)
    assert "fusions" not in DeploymentTable().deployment_fields()
