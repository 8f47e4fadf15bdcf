"""The KV pool each engine sizes on one GPU (tokensim.prediction.kv_pool), checked against hand calculations of the
engines' own rules (sources in the module: vllm/config/cache.py, tensorrt_llm/llmapi/llm_args.py, SGLang's
server_args.py before and after PR #10975)."""
from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError
from tokensim.perf.memory import kv_bytes_per_token
from tokensim.prediction.kv_pool import kv_pool_bytes, sglang_reserved_mib
from tokensim.prediction.serving import default_scheduler, kv_capacity_tokens
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.hardware.loader import hardware_from_dict
from tokensim.specs.model.catalog import load_model

MIB = 2**20
H100_MIB = 81_559                 # nvidia-smi on an H100 SXM (h100-sxm.toml, visible_source)
W = 60e9                          # weights per GPU in the hand calculations


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


def test_the_h100_is_seen_as_the_driver_reports_it(h100):
    assert h100.capacity_bytes == 80e9                                   # the datasheet's round figure
    assert h100.visible_capacity_bytes == pytest.approx(H100_MIB * MIB)  # 85.52e9


def test_vllm_takes_its_utilisation_of_visible_memory_less_the_weights(h100):
    # 0.9 x 81,559 MiB - 60 GB = 76.97e9 - 60e9 = 16.97e9 bytes
    assert kv_pool_bytes("vllm", h100, W, usable_fraction=0.5) == pytest.approx(0.9 * H100_MIB * MIB - W)
    assert kv_pool_bytes("vllm", h100, W, usable_fraction=0.5) == pytest.approx(16.97e9, rel=1e-3)


def test_trtllm_takes_its_fraction_of_what_the_weights_leave_free(h100):
    # 0.9 x (85.52e9 - 60e9) = 22.97e9; aiconfigurator's template fraction 0.80 gives 20.42e9
    assert kv_pool_bytes("trtllm", h100, W, usable_fraction=0.5) == pytest.approx(0.9 * (H100_MIB * MIB - W))
    assert kv_pool_bytes("trtllm", h100, W, usable_fraction=0.5, fraction=0.8) == pytest.approx(20.42e9, rel=1e-3)


def test_a_stated_fraction_replaces_the_engine_default(h100):
    # vLLM --gpu-memory-utilization 0.8: 0.8 x 85.52e9 - 60e9 = 8.42e9; SGLang --mem-fraction-static 0.8 likewise
    for engine in ("vllm", "sglang"):
        assert kv_pool_bytes(engine, h100, W, usable_fraction=0.5, fraction=0.8) == pytest.approx(8.42e9, rel=1e-3)


def test_sglang_reserve_since_0_5_3_on_an_h100():
    # 79.6 GiB: chunk 8192, cuda-graph batch 256 at tp 1: 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 = 13,440 MiB
    assert sglang_reserved_mib(H100_MIB, "0.5.9", gpus=1) == pytest.approx(13_440)
    # tp 8 captures graphs to 512: 512 + 12,288 + 1,024 + 1,024 = 14,848 MiB
    assert sglang_reserved_mib(H100_MIB, "0.5.9", gpus=8) == pytest.approx(14_848)
    # a stated graph batch of 16 at tp 1: 512 + 12,288 + 32 + 128 = 12,960 MiB
    assert sglang_reserved_mib(H100_MIB, "0.5.9", gpus=1, cuda_graph_batch=16) == pytest.approx(12_960)


def test_sglang_reserve_before_0_5_3_on_an_h100():
    # < 90 GiB: (9.5 + tp x pp / 2) GiB: 10 GiB at tp 1, 13.5 GiB at tp 8; + 4 GiB with DP attention, + 2 with a draft
    assert sglang_reserved_mib(H100_MIB, "0.5.1.post1", gpus=1) == pytest.approx(10_240)
    assert sglang_reserved_mib(H100_MIB, "0.5.1.post1", gpus=8) == pytest.approx(13_824)
    assert sglang_reserved_mib(H100_MIB, "0.5.1.post1", gpus=8, attn_dp=8, draft=True) == pytest.approx(
        13_824 + 4_096 + 2_048)


def test_sglang_reserve_with_dp_attention_on_a_large_gpu():
    # 183,359 MiB (a B200, > 160 GiB): chunk 16,384, graph batch 128 per rank, 4 GPUs, 4 DP ranks:
    # 512 + 24,576 + 256 + 512 = 25,856; + 128 x 4 x 3 = 1,536 -> 27,392 MiB
    assert sglang_reserved_mib(183_359, "0.5.8", gpus=4, attn_dp=4, cuda_graph_batch=128) == pytest.approx(27_392)
    # graph batch 400 > 300: 512 + 24,576 + 800 + 512 + 400 x 4 x 3 + 400 x 4 x 1.5 = 33,600 MiB
    assert sglang_reserved_mib(183_359, "0.5.8", gpus=4, attn_dp=4, cuda_graph_batch=400) == pytest.approx(33_600)


def test_sglang_on_small_gpus_keeps_the_10_gib_floor_only_above_60_gib():
    # 46,068 MiB (an L40S, 35-60 GiB): chunk 4096, graph 32: 512 + 6,144 + 64 + 128 = 6,848 MiB (no floor)
    assert sglang_reserved_mib(46_068, None, gpus=1) == pytest.approx(6_848)


def test_a_name_that_is_no_release_takes_the_current_rule():
    new = sglang_reserved_mib(H100_MIB, "0.5.9", gpus=1)
    for version in (None, "", "nightly-dev", "glm5-hopper"):
        assert sglang_reserved_mib(H100_MIB, version, gpus=1) == new
    assert sglang_reserved_mib(H100_MIB, "v0.5.2-cu126", gpus=1) == pytest.approx(10_240)     # a tag that names one


def test_sglang_pool_is_its_rounded_static_fraction_less_the_weights(h100):
    # fraction round((81,559 - 13,440) / 81,559, 3) = round(0.83521, 3) = 0.835 of 85.52e9, less 60e9 = 11.41e9
    pool = kv_pool_bytes("sglang", h100, W, usable_fraction=0.5, version="0.5.9")
    assert pool == pytest.approx(0.835 * H100_MIB * MIB - W)


def test_engines_without_a_rule_keep_the_memory_models_share(h100):
    assert kv_pool_bytes("default", h100, W, usable_fraction=0.9) == pytest.approx(0.9 * 80e9 - W)
    assert kv_pool_bytes("llamacpp", h100, W, usable_fraction=0.85) == pytest.approx(0.85 * 80e9 - W)


def test_kv_tokens_follow_the_engine_rule(h100):
    # Qwen3-32B at bf16 on one H100: the same weights, three rules; the KV per token is the model's
    model = load_model("qwen3-32b")
    per_token = kv_bytes_per_token(model, "bf16")
    vllm = kv_capacity_tokens(model, h100, Deployment(engine="vllm"))
    trt = kv_capacity_tokens(model, h100, Deployment(engine="trtllm"))
    sgl = kv_capacity_tokens(model, h100, Deployment(engine="sglang"), engine_version="0.5.9")
    # the pools differ by the rules alone: trt - vllm = 0.9 (V - W) - (0.9 V - W) = 0.1 W; vllm - sgl = (0.9 -
    # 0.835) x V, with V the visible 81,559 MiB and W the weights
    weights = 0.9 * H100_MIB * MIB - vllm * per_token
    assert (trt - vllm) * per_token == pytest.approx(0.1 * weights, rel=2e-3)
    assert (vllm - sgl) * per_token == pytest.approx(0.065 * H100_MIB * MIB, rel=2e-3)
    assert 60e9 < weights < 70e9                  # Qwen3-32B holds 32.8e9 parameters at 2 bytes


def test_an_engine_rule_that_leaves_no_room_is_a_clear_error(h100):
    # Qwen3-32B at bf16 (~65.5 GB) fits 0.9 x 80 GB = 72 GB as the memory model plans it; SGLang capturing CUDA graphs
    # to a batch of 4,000 reserves 512 + 12,288 + 8,000 + 128 = 20,928 MiB, a static fraction of 0.743 (63.5 GB)
    model = load_model("qwen3-32b")
    assert kv_capacity_tokens(model, h100, Deployment(engine="sglang"), engine_version="0.5.9") > 0
    with pytest.raises(TokensimError, match="sglang leaves no memory for the KV cache"):
        kv_capacity_tokens(model, h100, Deployment(engine="sglang"), engine_version="0.5.9", cuda_graph_batch=4000)


def test_sglang_default_chunk_follows_the_gpu_memory():
    # server_args.py since 0.5.3: 2048 below 35 GiB, 4096 below 60, 8192 below 160, else 16,384
    assert default_scheduler("sglang", load_hardware("l4")).chunked_prefill_size == 2048
    assert default_scheduler("sglang", load_hardware("l40s")).chunked_prefill_size == 4096
    assert default_scheduler("sglang", load_hardware("h100-sxm")).chunked_prefill_size == 8192
    assert default_scheduler("sglang", load_hardware("b200")).chunked_prefill_size == 16384


def _raw_h100() -> dict:
    path = Path(str(resources.files("tokensim") / "data" / "hardware" / "h100-sxm.toml"))
    return tomllib.loads(path.read_text(encoding="utf-8"))


def test_a_visible_capacity_needs_a_source():
    raw = _raw_h100()
    raw["memory"][0]["visible_source"] = ""
    with pytest.raises(TokensimError, match="visible_source"):
        hardware_from_dict(raw, origin="h100-edited.toml")


def test_a_visible_capacity_far_from_the_datasheet_is_refused():
    raw = _raw_h100()
    raw["memory"][0]["visible_capacity_bytes"] = 8e11          # ten times the 80 GB stated
    with pytest.raises(TokensimError, match="visible_capacity_bytes"):
        hardware_from_dict(raw, origin="h100-edited.toml")


def test_silicon_runs_launch_each_engine_as_the_generator_writes_it():
    # TensorRT-LLM at the templates' free_gpu_memory_fraction 0.80; SGLang at its release's reserve with CUDA graphs
    # to the per-rank batch; a Dynamo image tag (tensorrtllm-runtime:0.8.1.post1) is not the engine's release
    from tokensim.specs.hardware.catalog import catalog
    from tokensim.specs.model.catalog import catalog_model
    from tokensim.validate.load import engine_release, shipped_silicon_cases, worker_engine

    cases = shipped_silicon_cases()
    trt = next(c for c in cases if c.deployment.engine == "trtllm" and c.run.system == "h100-sxm")
    model, hw = catalog_model(trt.run.model), catalog()[trt.run.system]
    expected = kv_capacity_tokens(model, hw, trt.deployment, memory_fraction=0.80)
    assert worker_engine(trt, model, hw).kv_cache_tokens == expected
    assert expected < kv_capacity_tokens(model, hw, trt.deployment)          # 0.80 < the engine's own 0.9
    tagged = [c for c in cases if c.run.engine_version == "0.8.1.post1" and "ai-dynamo" in (c.run.image or "")]
    assert tagged and all(engine_release(c.run) is None for c in tagged)
    old = next(c for c in cases if c.run.engine_version == "0.5.1.post1")
    assert engine_release(old.run) == "0.5.1.post1"
