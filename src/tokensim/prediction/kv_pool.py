"""How much memory a serving engine gives its KV cache on one GPU, by the engine's own rule.

Engines size the pool from the memory the driver reports (an "80 GB" H100 shows 81,559 MiB = 85.5e9 bytes:
`HardwareSpec.visible_capacity_bytes`), not from the datasheet's round figure, and each has its own rule:

- vLLM: `gpu_memory_utilization` (default 0.9, vllm/config/cache.py) of the visible memory, less the weights
  (vllm/v1/worker/gpu_worker.py, determine_available_memory: requested memory - non-KV memory). The activation peak
  of the profiling run and the CUDA graphs (~1-2 GB) are not counted here.
- TensorRT-LLM: `KvCacheConfig.free_gpu_memory_fraction` (default 0.9, tensorrt_llm/llmapi/llm_args.py) of what is
  free once the weights are loaded. aiconfigurator's generator templates (backend_templates/trtllm/
  extra_engine_args.*.yaml.j2, every release) write 0.80 instead.
- SGLang: `mem_fraction_static` of the visible memory, less the weights (python/sglang/srt/model_executor/
  model_runner.py: rest = available - total * (1 - mem_fraction_static)), with the fraction derived from a reserve
  that grew with releases (python/sglang/srt/server_args.py, `_handle_gpu_memory_settings`); `sglang_reserved_mib`.

A launch that states its fraction (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TensorRT-LLM
free_gpu_memory_fraction) passes it as `fraction`; it replaces the engine's default (for SGLang, the reserve rule).
- Any other engine (llama.cpp, the wafer and LPU stacks, an unnamed one): the profile's usable_memory_fraction of the
  datasheet capacity, less the weights, as the memory model plans it.
"""
from __future__ import annotations

import re

from tokensim.specs.hardware.spec import HardwareSpec

MIB = 2**20
GIB = 2**30
VLLM_GPU_MEMORY_UTILIZATION = 0.9        # vllm/config/cache.py, CacheConfig.gpu_memory_utilization
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9    # tensorrt_llm/llmapi/llm_args.py, KvCacheConfig.free_gpu_memory_fraction
# aiconfigurator's generator, backend_templates/trtllm/extra_engine_args.*.yaml.j2 (commit 095f58a51c4c):
# "free_gpu_memory_fraction: {{ kv_cache_config.free_gpu_memory_fraction | default(0.80) }}"
GENERATOR_TRTLLM_FREE_FRACTION = 0.80
# SGLang switched to the reserve-by-buffers rule in PR #10975 (merged 2025-09-27), first released in v0.5.3
SGLANG_NEW_RESERVE_FROM = (0, 5, 3)


def release_tuple(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a release string like '0.5.1.post1' or 'v0.5.8-cu130'; None when it names no release
    (an image tag like 'nightly-dev', an empty field)."""
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", (version or "").strip())
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else None


def sglang_chunk_and_graph_batch(gpu_mib: float, tp: int) -> tuple[int, int]:
    """SGLang's default chunked_prefill_size and cuda_graph_max_bs for a GPU of `gpu_mib` MiB at `tp` GPUs
    (server_args.py since v0.5.3: < 35 GiB: 2048 and 24 (80 at tp >= 4); < 60 GiB: 4096 and 32 / 160; < 160 GiB:
    8192 and 256 / 512; larger: 16384 and 512)."""
    gib = gpu_mib / 1024
    if gib < 35:
        return 2048, 24 if tp < 4 else 80
    if gib < 60:
        return 4096, 32 if tp < 4 else 160
    if gib < 160:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def sglang_reserved_mib(gpu_mib: float, version: str | None, *, gpus: int, attn_dp: int = 1, draft: bool = False,
                        cuda_graph_batch: int | None = None, chunk_tokens: int | None = None) -> float:
    """MiB SGLang keeps out of its static pool (weights + KV) on a GPU of `gpu_mib` MiB, for a worker of `gpus` GPUs
    (tp x pp) with `attn_dp` attention-DP ranks, as server_args.py computes it.

    Before v0.5.3 (a fixed reserve by memory size and tp x pp): < 35 GiB: (2.8 + gpus / 10) GiB; < 90 GiB: (9.5 +
    gpus / 2) GiB; < 160 GiB: (12 + gpus / 2) GiB; larger: 32 GiB; + 4 GiB with DP attention; + 2 GiB with a draft
    model. From v0.5.3 on (and for a version that names no release): 512 MiB + 1.5 x max(chunk, 2048) + 2 x cuda-graph
    batch + gpus / 8 GiB; with DP attention + 3 x graph batch x dp (+ 1.5 x more above a graph batch of 300); at least
    10 GiB on GPUs above 60 GiB; + 2 GiB with a draft model."""
    release = release_tuple(version)
    gib = gpu_mib / 1024
    if release is not None and release < SGLANG_NEW_RESERVE_FROM:
        if gib < 35:
            reserved = (2.8 + gpus / 10) * 1024
        elif gib < 90:
            reserved = (9.5 + gpus / 2) * 1024
        elif gib < 160:
            reserved = (12 + gpus / 2) * 1024
        else:
            reserved = 32 * 1024
        if attn_dp > 1:
            reserved += 4 * 1024
        return reserved + (2 * 1024 if draft else 0)
    chunk, graph = sglang_chunk_and_graph_batch(gpu_mib, gpus)
    chunk = chunk_tokens or chunk
    graph = cuda_graph_batch or graph
    reserved = 512 + max(chunk, 2048) * 1.5 + graph * 2 + gpus / 8 * 1024
    if attn_dp > 1:
        reserved += graph * attn_dp * 3
        if graph > 300:
            reserved += graph * attn_dp * 1.5
    if gib > 60:
        reserved = max(reserved, 10 * 1024)
    return reserved + (2 * 1024 if draft else 0)


def kv_pool_bytes(engine: str, hw: HardwareSpec, weights_bytes: float, *, usable_fraction: float,
                  version: str | None = None, gpus: int = 1, attn_dp: int = 1, draft: bool = False,
                  cuda_graph_batch: int | None = None, fraction: float | None = None) -> float:
    """Bytes of KV cache one GPU holds beside `weights_bytes` of weights, by `engine`'s rule (module docstring);
    negative when the rule leaves no room. `fraction`: the engine's memory fraction as launched, where stated."""
    if engine == "vllm":
        return (fraction or VLLM_GPU_MEMORY_UTILIZATION) * hw.visible_capacity_bytes - weights_bytes
    if engine == "trtllm":
        return (fraction or TRTLLM_FREE_GPU_MEMORY_FRACTION) * (hw.visible_capacity_bytes - weights_bytes)
    if engine == "sglang" and fraction:
        return fraction * hw.visible_capacity_bytes - weights_bytes
    if engine == "sglang":
        gpu_mib = hw.visible_capacity_bytes / MIB
        reserved = sglang_reserved_mib(gpu_mib, version, gpus=gpus, attn_dp=attn_dp, draft=draft,
                                       cuda_graph_batch=cuda_graph_batch)
        fraction = round((gpu_mib - reserved) / gpu_mib, 3)
        return fraction * hw.visible_capacity_bytes - weights_bytes
    return usable_fraction * hw.capacity_bytes - weights_bytes
