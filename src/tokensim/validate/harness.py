"""What a measured run's benchmark harness did that its row does not say: speculative decoding.

1,541 of silicon_dev.csv's runs (source_file 2026-03-25.csv and 2026-04-06.csv, images written `nvcr.io#nvidia/...`)
come from SemiAnalysis InferenceX (github.com/SemiAnalysisAI/InferenceX), whose `.github/configs/nvidia-master.yaml`
names one container image per benchmark configuration. In every version of that file from 2025-10 to 2026-04 the
image `nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3` belongs only to `dsr1-fp4-b200-trt-mtp` and
`dsr1-fp8-b200-trt-mtp` (the configurations without MTP ran `...:1.2.0rc6.post2`; commit 66d6a351abec, 2026-02-07,
lines 1227-1385). Their launch scripts (benchmarks/dsr1_fp4_b200_trt_mtp.sh, dsr1_fp8_b200_trt_mtp.sh at that
commit) set `speculative_config: {decoding_type: MTP, num_nextn_predict_layers: MTP}` with MTP = 3, or 1 under
attention data parallelism. A run in that image is therefore a DeepSeek-R1 run with MTP drafts, though its row
states no speculative decoding.

Left as stated (no drafts): `...:1.1.0rc2.post2`, which both the MTP and the plain configurations ran (83 runs on
B200 and H200, whose TPOT the simulator overstates by a median 38-46 %), and which the row cannot tell apart.

The acceptance of each draft is not published for these runs (random-token prompts in the chat template,
utils/bench_serving/benchmark_serving.py). They get the shipped MTP default, constants.toml [speculative]
mtp_acceptance (0.85, 0.72, 0.60 per chained position: the first is the low end of DeepSeek-V3's published 85-90 %,
arXiv:2412.19437 section 5.4.3; the deeper ones are assumed, as that file says). InferenceX later notes that raw
random tokens lower acceptance (.claude/commands/add-model-hardware.md), so the runs' true rate may be lower: an
assumption each case records.
"""
from __future__ import annotations

from tokensim.deploy.deployment import SpecDecode

MTP_IMAGES = ("tensorrt-llm/release:1.2.0rc6.post3",)
MTP_DRAFTS = 3                       # num_nextn_predict_layers in the InferenceX MTP scripts ...
MTP_DRAFTS_ATTENTION_DP = 1          # ... and under attention data parallelism


def mtp_drafts(image: str | None, engine: str, attn_dp: int) -> int | None:
    """Draft tokens per step of a run in an InferenceX MTP image (the scripts' num_nextn_predict_layers); None for
    any other run."""
    if not image or engine != "trtllm":
        return None
    normalized = image.replace("#", "/")
    if not any(normalized.endswith(tag) for tag in MTP_IMAGES):
        return None
    return MTP_DRAFTS_ATTENTION_DP if attn_dp > 1 else MTP_DRAFTS


def harness_speculation(image: str | None, engine: str, attn_dp: int) -> tuple[SpecDecode, str] | None:
    """The speculative decoding a run's image implies, with the assumption it records (None: none implied)."""
    drafts = mtp_drafts(image, engine, attn_dp)
    if drafts is None:
        return None
    from tokensim.validate.rules import speculative_defaults

    rates = tuple(float(a) for a in speculative_defaults()["mtp_acceptance"][:drafts])
    spec = SpecDecode(method="mtp", draft_tokens=drafts, acceptance=rates)
    note = (f"speculative decoding: image {image} ran only InferenceX's MTP configurations (nextn {drafts}); "
            f"acceptance {rates} per draft, the MTP default in constants.toml, not stated by the run (rule)")
    return spec, note


def harness_limits(image: str | None, engine: str, attn_dp: int, concurrency: int, isl: int) -> tuple[int, int] | None:
    """(max_batch_size, max_num_tokens) per attention rank that the InferenceX MTP scripts launch TensorRT-LLM with,
    for a run in an MTP image; None otherwise. The scripts (benchmarks/dsr1_fp4_b200_trt_mtp.sh at commit 66d6a351abec)
    set MAX_BATCH_SIZE = CONC (CONC / 4 under attention DP, CONC itself below 4) and MAX_NUM_TOKENS =
    ((MTP + 1) MAX_BATCH_SIZE + ISL + 64), rounded up to 64: one prompt per step, with no 8,192 floor (the plain
    scripts keep one)."""
    drafts = mtp_drafts(image, engine, attn_dp)
    if drafts is None:
        return None
    batch = concurrency if attn_dp <= 1 or concurrency < 4 else concurrency // 4
    tokens = -(-((drafts + 1) * batch + isl + 64) // 64) * 64
    return batch, tokens
