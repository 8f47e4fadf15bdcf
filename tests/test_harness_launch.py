"""What the benchmark harnesses behind silicon_dev.csv did that its rows do not say: InferenceX's client draws the
request lengths, InferenceX's SGLang scripts set their own flags, aiconfigurator's generator wrote no mixed chunked
prefill before 2026-01-19. Expected values are the scripts' own (data/serving/harness.toml cites each one)."""
import numpy as np
import pytest

from tokensim.validate.harness import (
    AICONFIGURATOR,
    INFERENCEX,
    client_lengths,
    harness_of,
    mean_lengths,
    sglang_launch,
    trtllm_launch,
    vllm_launch,
)
from tokensim.validate.load import benchmark_scheduler, shipped_silicon_cases


def test_the_harness_is_read_from_the_source_column():
    assert harness_of("source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=4") == INFERENCEX
    assert harness_of("db-dump/2026-04-27; config_id=691; workflow_run_id=799") == INFERENCEX
    assert harness_of("source_file=/Users/someone/proj/silicon.csv") == AICONFIGURATOR
    assert harness_of("a vendor blog post") is None


def test_inferencex_lengths_are_uniform_integers_between_0_8_l_and_l():
    """benchmark_serving.py: np.random.randint(int(0.8 L), L + 1): for L = 1024 the draws lie in [819, 1024] and
    their mean is (819 + 1024) / 2 = 921.5 (within 3 standard errors: sd of a uniform over 206 values is 59.5, so
    over 20,000 draws 0.42 tokens x 3 = 1.3)."""
    inputs, outputs, note = client_lengths(INFERENCEX, 1024, 8192, 20_000, inferencex_client=True)
    assert inputs.min() >= 819 and inputs.max() <= 1024
    assert outputs.min() >= 6553 and outputs.max() <= 8192
    assert abs(inputs.mean() - 921.5) < 1.3
    assert "random-range-ratio 0.8" in note
    again = client_lengths(INFERENCEX, 1024, 8192, 20_000, inferencex_client=True)
    assert np.array_equal(inputs, again[0]) and np.array_equal(outputs, again[1])      # seeded: the same every run
    # (819 + 1024) / 2 = 921.5 -> 922; (6553 + 8192) / 2 = 7372.5 -> 7372
    assert mean_lengths(INFERENCEX, 1024, 8192, inferencex_client=True) == (922, 7372)
    assert client_lengths(INFERENCEX, 1024, 128, 3)[2] is None      # off by default (harness.SIMULATE_INFERENCEX_CLIENT)
    assert mean_lengths(INFERENCEX, 1024, 128) == (1024, 128)
    fixed = client_lengths(AICONFIGURATOR, 1024, 128, 5)
    assert fixed[0].tolist() == [1024] * 5 and fixed[1].tolist() == [128] * 5 and fixed[2] is None
    assert mean_lengths(None, 1024, 128) == (1024, 128)


def test_inferencex_sglang_scripts_flags():
    """dsr1_fp8_b200.sh: TP 8 -> --max-running-requests 128, --chunked-prefill-size 32768, --max-prefill-tokens
    32768, --scheduler-recv-interval 30 at 16 or more clients (10 below); TP 4 -> 32, 8192, 8192, 10. No script
    passes --enable-mixed-chunk. The DeepSeek scripts and glm5_fp8_b200.sh pass --disable-radix-cache, so the
    client's --ignore-eos requests take SGLang's ignore-EOS admission; glm5_nvfp4_b200.sh keeps the radix cache."""
    tp8, note = sglang_launch(INFERENCEX, "deepseek-r1", "b200", "fp8", "0.5.9", 8, 1024, 1024, 64, inferencex_client=True)
    assert tp8 == {"enable_mixed_chunk": False, "max_running_requests": 128, "chunked_prefill_size": 32768,
                   "max_prefill_tokens": 32768, "scheduler_recv_interval": 30, "ignore_eos": True}
    glm_fp4 = sglang_launch(INFERENCEX, "glm-5", "b200", "nvfp4", None, 8, 1024, 1024, 48, inferencex_client=True)
    assert "ignore_eos" not in glm_fp4[0]
    assert sglang_launch(INFERENCEX, "deepseek-r1", "b200", "fp8", "0.5.9", 8, 1024, 1024, 64) is None  # client off
    assert "dsr1-fp8-b200" in note
    few = sglang_launch(INFERENCEX, "deepseek-v3", "b200", "fp8", None, 8, 1024, 1024, 8, inferencex_client=True)
    assert few[0]["scheduler_recv_interval"] == 10
    tp4 = sglang_launch(INFERENCEX, "deepseek-r1", "b200", "fp8", "0.5.9", 4, 8192, 1024, 16, inferencex_client=True)[0]
    assert (tp4["max_running_requests"], tp4["chunked_prefill_size"], tp4["scheduler_recv_interval"]) == (32, 8192, 10)
    # glm5_fp8_b200.sh: --max-running-requests $CONC
    glm = sglang_launch(INFERENCEX, "glm-5", "b200", "fp8", None, 8, 1024, 1024, 48, inferencex_client=True)
    assert glm[0]["max_running_requests"] == 48
    # dsr1_fp8_h200.sh: 512 running requests for 1k/1k, 256 otherwise; no recv interval (SGLang's default 1)
    h200_1k = sglang_launch(INFERENCEX, "deepseek-r1", "h200", "fp8", "0.5.9", 8, 1024, 1024, 4, inferencex_client=True)
    assert h200_1k[0]["max_running_requests"] == 512
    h200 = sglang_launch(INFERENCEX, "deepseek-r1", "h200", "fp8", "0.5.9", 8, 8192, 1024, 4, inferencex_client=True)[0]
    assert h200["max_running_requests"] == 256 and "scheduler_recv_interval" not in h200
    assert sglang_launch(INFERENCEX, "qwen3-32b", "h100-sxm", None, None, 2, 1024, 128, 4, inferencex_client=True) is None


def test_aiconfigurator_sglang_runs_before_0_5_6_do_not_mix_chunks():
    assert sglang_launch(AICONFIGURATOR, "qwen3-32b", "h100-sxm", None, "0.5.1.post1", 2, 1024, 128, 64)[0] == {
        "enable_mixed_chunk": False}
    assert sglang_launch(AICONFIGURATOR, "llama-3.1-8b", "h200", "fp8", "0.5.6.post2", 1, 1000, 100, 64) is None


@pytest.fixture(scope="module")
def cases():
    return shipped_silicon_cases()


def test_cases_carry_the_harness_and_its_settings(cases):
    """Every row knows its harness; InferenceX's runs keep their stated lengths and the generator's settings while its
    client is not simulated (harness.SIMULATE_INFERENCEX_CLIENT); aiconfigurator's SGLang 0.5.1 runs mix no chunks."""
    assert {c.run.harness for c in cases} == {INFERENCEX, AICONFIGURATOR}
    c = next(c for c in cases if c.run.harness == INFERENCEX and c.run.engine == "sglang" and c.run.mode == "agg")
    assert (c.deployment.input_tokens, c.deployment.output_tokens) == (c.run.isl, c.run.osl)
    assert benchmark_scheduler(c).scheduler_recv_interval == 1
    aic = next(c for c in cases if c.run.harness == AICONFIGURATOR and c.run.engine == "sglang"
               and c.run.engine_version == "0.5.1.post1")
    assert benchmark_scheduler(aic).enable_mixed_chunk is False
    assert (aic.deployment.input_tokens, aic.deployment.output_tokens) == (aic.run.isl, aic.run.osl)


def _trt(model, system, weights, measured, tp, dp, isl, osl, clients, on=True):
    return trtllm_launch(INFERENCEX, model, system, weights, measured, tp, dp, isl, osl, clients,
                         inferencex_client=on)


def test_inferencex_trtllm_scripts_settings():
    """The scripts' own arithmetic. DeepSeek-R1 FP4 on B200, 256 clients, 1k/1k, attention DP over 8 ranks: before
    2026-01-22 MAX_NUM_TOKENS = (256 + 1024 + 64 + 63) // 64 x 64 = 1,344 per rank (no floor), from then the 8,192
    floor; no --max_batch_size (2,048 per rank); enable_balance, timeout_iters 60, batching_wait_iters 0; the engine
    here holds all 8 ranks, so 8 x each. FP8 on B200 from 2026-01-30 at 1k/1k and 64 clients, TP 8: batch waiting
    40 iterations or 0.8 x 8,192 tokens. Llama-3.1-70B below TP 8 at 1k/1k: 16,384 tokens, batch waiting 20 / 0.9;
    at TP 8 none. gpt-oss-120b on H200: --max_batch_size $CONC --max_num_tokens 20000, KV fraction 0.85."""
    early = _trt("deepseek-r1", "b200", "nvfp4", "2025-12-01", 1, 8, 1024, 1024, 256)
    assert early.settings == {"max_num_tokens": 8 * 1344, "max_batch_size": 8 * 2048, "attention_dp_ranks": 8,
                              "attention_dp_balance": True, "attention_dp_timeout_iters": 60,
                              "attention_dp_batching_wait_iters": 0}
    assert early.memory_fraction == 0.8 and "ec90f3fe7" in early.note
    late = _trt("deepseek-r1", "b200", "nvfp4", "2026-02-10", 1, 8, 1024, 1024, 256)
    assert late.settings["max_num_tokens"] == 8 * 8192
    assert _trt("deepseek-r1", "h200", "fp8", "2026-02-10", 8, 1, 8192, 1024, 64).settings["max_num_tokens"] == \
        (64 + 8192 + 64 + 63) // 64 * 64                     # 8,384: above the floor
    assert _trt("deepseek-r1", "h200", "fp8", "2026-02-10", 8, 1, 1024, 1024, 4).memory_fraction == 0.75
    wait = _trt("deepseek-r1", "b200", "fp8", "2026-02-01", 8, 1, 1024, 1024, 64).settings
    assert (wait["batch_wait_timeout_iters"], wait["batch_wait_max_tokens_ratio"], wait["max_num_tokens"]) == \
        (40, 0.8, 8192)
    assert "batch_wait_timeout_iters" not in _trt("deepseek-r1", "b200", "fp8", "2026-02-01", 8, 1, 1024, 1024,
                                                  32).settings
    llama = _trt("llama-3.1-70b", "h200", "fp8", "2025-10-10", 4, 1, 1024, 1024, 16).settings
    assert (llama["max_num_tokens"], llama["batch_wait_timeout_iters"], llama["batch_wait_max_tokens_ratio"]) == \
        (16384, 20, 0.9)
    assert "batch_wait_timeout_iters" not in _trt("llama-3.1-70b", "h200", "fp8", "2025-10-10", 8, 1, 1024, 1024,
                                                  16).settings
    oss = _trt("gpt-oss-120b", "h200", "nvfp4", "2025-11-20", 2, 1, 8192, 1024, 32)
    assert (oss.settings["max_batch_size"], oss.settings["max_num_tokens"], oss.memory_fraction) == (32, 20000, 0.85)
    # off with InferenceX's client, and for other harnesses or runs no script covers
    assert _trt("deepseek-r1", "b200", "nvfp4", "2026-02-10", 1, 8, 1024, 1024, 256, on=False) is None
    assert trtllm_launch(AICONFIGURATOR, "deepseek-r1", "b200", "nvfp4", "2026-02-10", 1, 8, 1024, 1024, 256,
                         inferencex_client=True) is None
    assert _trt("deepseek-r1", "gb200-nvl72", "nvfp4", "2025-11-20", 1, 36, 1024, 1024, 512) is None
    assert _trt("deepseek-r1", "b200", "nvfp4", None, 1, 8, 1024, 1024, 256) is None     # no date, no dated entry


def test_inferencex_vllm_scripts_settings():
    """gpt-oss-120b on H100: max-num-batched-tokens 8192, --max-num-seqs $CONC. MiniMax-M2.5 FP8 on B200 from
    2026-04-04: --max-num-batched-tokens $((ISL * 2)) (8192 x 2 = 16,384), --max-num-seqs not passed (vLLM's 1024);
    before, neither (vLLM's 8192 and 1024). FP4 with --data-parallel-size 2: 2 x (1024 x 2) tokens, 2 x 1024 seqs."""
    def v(model, system, weights, measured, dp, isl, clients, on=True):
        return vllm_launch(INFERENCEX, model, system, weights, measured, 2, dp, isl, 1024, clients, inferencex_client=on)
    assert v("gpt-oss-120b", "h100-sxm", "nvfp4", "2026-03-10", 1, 1024, 16).settings == \
        {"max_num_batched_tokens": 8192, "max_num_seqs": 16}
    assert v("minimax-m2.5", "b200", "fp8", "2026-04-10", 1, 8192, 64).settings == \
        {"max_num_batched_tokens": 16384, "max_num_seqs": 1024}
    assert v("minimax-m2.5", "b200", "fp8", "2026-03-20", 1, 8192, 64).settings == \
        {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    assert v("minimax-m2.5", "b200", "nvfp4", "2026-04-10", 2, 1024, 64).settings == \
        {"max_num_batched_tokens": 4096, "max_num_seqs": 2048}
    assert "bddbf4031" in v("minimax-m2.5", "b200", "fp8", "2026-04-10", 1, 8192, 64).note
    assert v("gpt-oss-120b", "h100-sxm", "nvfp4", "2026-03-10", 1, 1024, 16, on=False) is None
    assert v("qwen3-32b", "h100-sxm", "fp8", "2026-03-10", 1, 1024, 16) is None
