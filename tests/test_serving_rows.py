"""Reading measured serving runs (silicon_dev.csv, serving_dev.csv) into typed rows with catalog names."""
from collections import Counter
from pathlib import Path

import pytest

import tokensim.validate.serving_rows as serving_rows
from tokensim.errors import TokensimError
from tokensim.validate.serving_rows import SERVING_COLUMNS, SILICON_COLUMNS, read_serving, read_silicon

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "serving"

SILICON_CSV = ",".join(SILICON_COLUMNS) + "\n" + """\
agg1,db-dump/2026-04-27; config_id=691; silicon_concurrency=256; measured=2026-04-22T00:00:00.000Z; workflow_run_id=799; vllm/vllm-openai:v0.19.0-cu130,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,fp8,fp8,64,4,1,4,1,16,,,,,,,,,,,,,,,388.0431298702206,23.670495370491842
agg2,source_file=/x/gb200/trtllm/1.2.0rc6.post1/qwen3_32b.csv; gtl_job_id=1; measured=2026-01-25; image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.0,trtllm,1.2.0rc6.post1,nvidia/Qwen3-32B-NVFP4,gb200,fp4,agg,4000,1000,nvfp4,nvfp4,144,1,1,,1,0,,,,,,,,,,,,,,,17542.6,47.96
dis1,source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=48; measured=2026-03-23T13:00:07Z; wip=False; image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2,trtllm,0.8.1.post2,deepseek-ai/DeepSeek-R1,gb200,fp4,disagg,1024,1024,nvfp4,nvfp4,,,,,,,,,4,1,1,1,4,,,8,1,1,2,4,2137.55,4.62
dis2,db-dump/2026-04-27; config_id=641; silicon_concurrency=288; measured=2026-03-18T00:00:00.000Z; lmsysorg/sglang:v0.5.8.post1-cu130-amd64,sglang,0.5.8.post1,deepseek-ai/DeepSeek-V3,b200_sxm,fp8,disagg,8192,1024,fp8,fp8_block,,,,,,,1,1,1,1,8,8,1,36,1,1,1,8,1,8,19558.75,30.91
dense,source_file=/x/h100_sxm/sglang/0.5.1.post1/Qwen_Qwen3-32B.csv; silicon_concurrency=16,sglang,0.5.1.post1,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,8,2,1,,1,1,,,,,,,,,,,,,,,120.5,11.2
nocon,source_file=/x/h100_sxm/sglang/0.5.6.post2/qwen3_32b.csv; measured=2026-01-23,sglang,0.5.6.post2,Qwen/Qwen3-32B,h100_sxm,fp8,disagg,4000,1000,fp8_block,fp8_block,,,,,,,1,5,1,1,1,1,1,48,11,1,1,1,1,1,566.6,22.3
nomodel,db-dump/2026-04-27; silicon_concurrency=4,vllm,0.19.0,Qwen/Qwen2.5-72B-Instruct,h100_sxm,fp8,agg,1024,1024,fp8,fp8,4,1,1,1,1,1,,,,,,,,,,,,,,,100.0,10.0
"""

SERVING_CSV = ",".join(SERVING_COLUMNS) + "\n" + """\
s1,https://example.org/a,2026-04-25,"vLLM (AsyncLLM, V1 engine)",0.19.0,Qwen/Qwen3-32B,NVIDIA RTX PRO 6000 (Blackwell),2,2,1,,bf16,auto (bf16),"ShareGPT, 300 req",862.3,665.0,poisson (timestamps replayed),10,ttft_s_mean,36.9,notes
s2,https://example.org/b,2025 (round),vLLM (AMD MLPerf submission),vLLM 0.9.0.2.dev108+g71faa1880 (ROCm 6.4.1),Llama-2-70B (llama2-70b-99),AMD Instinct MI300X 192GB,8,,,,fp8,,MLPerf,,301.3,MLPerf LoadGen server scenario (arrival process per LoadGen rules),max rate meeting constraints,throughput_tokens_per_s (Server),24593.8,notes
s3,https://example.org/c,undated,vLLM,nightly (version not in excerpt),Llama-3-70B (serving_llama70B_tp4_sharegpt_qps_1),"8xH100 node (H100, 4 used)",4,4,1,,not stated,,"ShareGPT, 200 prompts",,,poisson,1,ttft_ms_p99,110.7,notes
s4,https://example.org/d,2026-04-25,vLLM,0.19.0,meta-llama/Llama-3.1-8B,NVIDIA GeForce RTX 4090,2,1,1,2 (DP2 + enable_expert_parallel),bf16,,x,1,1,fixed concurrency,64,tpot_s_p50,0.03,notes
s5,https://example.org/e,2025-07-19,SGLang (PD disaggregation),v0.4.8,DeepSeek (variant not stated in excerpt),H800 (DGX SuperPod),104,,,,not stated,,x,,,fixed concurrency,50,throughput_output_tokens_per_s,25000,notes
s6,https://example.org/f,2025-05-05,SGLang,not stated,DeepSeek (V3/R1 architecture),H100,32,,,32,not stated,,synthetic,4096,,not stated,,throughput_input_tokens_per_s_per_node,50302,notes
"""


@pytest.fixture(scope="module")
def silicon(tmp_path_factory):
    path = tmp_path_factory.mktemp("s") / "silicon.csv"
    path.write_text(SILICON_CSV)
    runs, unresolved = read_silicon(path)
    return {r.id: r for r in runs}, {u.id: u.reason for u in unresolved}


def test_the_public_api_is_pinned():
    assert sorted(serving_rows.__all__) == sorted(["Pool", "SiliconRun", "ServingRow", "Unresolved", "SILICON_COLUMNS",
                                                   "SERVING_COLUMNS", "silicon_run", "serving_row", "read_silicon",
                                                   "read_serving", "job_budgets"])


def test_an_agg_run_reads_engine_layout_concurrency_times_and_date(silicon):
    runs, _ = silicon
    r = runs["agg1"]
    assert (r.engine, r.engine_version, r.image, r.model, r.system) == (
        "vllm", "0.19.0", "vllm/vllm-openai:v0.19.0-cu130", "minimax-m2.5", "b200")
    assert (r.weights, r.gemm_weights, r.moe_weights, r.kv, r.mode, r.isl, r.osl) == ("fp8", "fp8", "fp8", None, "agg", 1024, 1024)
    assert r.concurrency == 256 and r.measured == "2026-04-22"
    assert (r.agg.tp, r.agg.pp, r.agg.attention_dp, r.agg.moe_tp, r.agg.moe_ep, r.agg.batch_size) == (4, 1, 4, 1, 16, 64)
    assert r.chips == 16 and r.prefill is None and r.decode is None
    assert r.ttft_s == pytest.approx(0.3880431) and r.tpot_s == pytest.approx(0.0236705)


def test_an_agg_run_without_silicon_concurrency_takes_batch_times_attention_dp(silicon):
    """README: for agg rows without silicon_concurrency=, concurrency is batch_size x attention_dp_size; an empty or
    0 attention_dp_size is 1, a 0 moe_ep_size is not stated; the name's quantization tag agrees with the columns."""
    r = silicon[0]["agg2"]
    assert r.concurrency == 144 and r.agg.attention_dp == 1 and r.agg.moe_ep is None
    assert (r.model, r.weights, r.system, r.measured) == ("qwen3-32b", "nvfp4", "gb200-nvl72", "2026-01-25")
    assert any("batch_size x attention_dp_size = 144" in a for a in r.assumptions)


def test_disagg_runs_have_prefill_and_decode_pools(silicon):
    runs, _ = silicon
    r = runs["dis1"]
    assert r.agg is None and (r.prefill.tp, r.prefill.moe_ep, r.decode.tp, r.decode.moe_tp, r.decode.moe_ep) == (4, 4, 8, 2, 4)
    assert r.prefill.workers is None and r.chips is None
    assert any("Dynamo runtime image" in a for a in r.assumptions)       # backend_version is the Dynamo tag there
    r = runs["dis2"]
    assert (r.prefill.workers, r.prefill.attention_dp, r.decode.workers, r.decode.attention_dp, r.decode.batch_size) == (1, 8, 1, 8, 36)
    assert (r.gemm_weights, r.moe_weights, r.chips) == ("fp8", "fp8", 16)


def test_an_unstated_precision_is_the_checkpoints_own(silicon):
    r = silicon[0]["dense"]
    assert r.weights is None and any("precision: not stated" in a for a in r.assumptions)
    assert r.engine_version == "0.5.1.post1" and r.measured is None


def test_rows_that_cannot_be_read_name_the_missing_fact(silicon):
    _, unresolved = silicon
    assert unresolved == {"nocon": "concurrency not stated (no silicon_concurrency= in silicon_data_source, and no agg batch_size)",
                          "nomodel": "model 'Qwen/Qwen2.5-72B-Instruct' not in the catalog"}


JOB = "source_file=/x/b200_sxm/trtllm/1.3.0rc5/q.csv; gtl_job_id={job}; silicon_concurrency={c}; measured=2026-03-07"
JOB_CSV = ",".join(SILICON_COLUMNS) + "\n" + "\n".join([
    # aiconfigurator's job 23803065, as in silicon_dev.csv: a disagg run of 40 TP1 prefill + 6 TP4 decode workers
    "dis," + JOB.format(job=7, c=480) + ",trtllm,1.3.0rc5,nvidia/Qwen3-32B-NVFP4,b200_sxm,fp4,disagg,15000,500,nvfp4,"
    "nvfp4,,,,,,,1,40,1,1,1,1,1,80,6,4,1,1,1,1,1436.1,10.6",
    # its agg run: TP2, batch 13, 416 clients = 32 x 13, and 64 GPUs / 2 = 32 replicas
    "rep," + JOB.format(job=7, c=416) + ",trtllm,1.3.0rc5,nvidia/Qwen3-32B-NVFP4,b200_sxm,fp4,agg,15000,500,nvfp4,"
    "nvfp4,13,2,1,1,1,1,,,,,,,,,,,,,,,719.3,13.7",
    # the same job, concurrency 26 = 2 x 13: 2 replicas (4 GPUs), which the job's budget does not corroborate
    "odd," + JOB.format(job=7, c=26) + ",trtllm,1.3.0rc5,nvidia/Qwen3-32B-NVFP4,b200_sxm,fp4,agg,15000,500,nvfp4,"
    "nvfp4,13,2,1,1,1,1,,,,,,,,,,,,,,,719.3,13.7",
    # 416 clients in a job that ran no disagg deployment: 32 replicas by the generator's rule alone
    "alone," + JOB.format(job=8, c=416) + ",trtllm,1.3.0rc5,nvidia/Qwen3-32B-NVFP4,b200_sxm,fp4,agg,15000,500,nvfp4,"
    "nvfp4,13,2,1,1,1,1,,,,,,,,,,,,,,,719.3,13.7",
]) + "\n"


def test_an_agg_run_stating_a_whole_multiple_of_its_batch_is_that_many_replicas(tmp_path):
    """aiconfigurator's generator sets concurrency = agg_workers x max_batch_size. 416 = 32 x batch 13 x attention_dp
    1: 32 TP2 replicas of 13 clients, 64 GPUs, which the job's disagg run (40 x 1 + 6 x 4 = 64 GPUs) holds too, and
    the note says so; the same 416 in a job without disagg runs is 32 replicas as well, without that corroboration.
    26 = 2 x 13 is 2 replicas; a concurrency equal to the batch stays one replica."""
    from tokensim.validate.serving import serving_case
    path = tmp_path / "jobs.csv"
    path.write_text(JOB_CSV + "one," + JOB.format(job=7, c=13)
                    + ",trtllm,1.3.0rc5,nvidia/Qwen3-32B-NVFP4,b200_sxm,fp4,agg,15000,500,nvfp4,nvfp4,13,2,1,1,1,1,,,,,,,,,,,,"
                    ",,,719.3,13.7\n")
    runs, unresolved = read_silicon(path)
    assert not unresolved
    by_id = {r.id: r for r in runs}
    assert by_id["dis"].chips == 64 and by_id["dis"].job == "7"
    rep = by_id["rep"]
    assert (rep.agg.workers, rep.chips, rep.concurrency) == (32, 64, 416)
    assert any("32 replicas of 2 GPUs, 13 clients each" in a for a in rep.assumptions)
    assert any("every disagg run of its job 7 holds the same 64 GPUs" in a for a in rep.assumptions)
    assert not any(a.startswith("agg: one replica") for a in rep.assumptions)
    alone = by_id["alone"]
    assert (alone.agg.workers, alone.chips) == (32, 64)
    assert not any("holds the same" in a for a in alone.assumptions)
    assert (by_id["odd"].agg.workers, by_id["odd"].chips) == (2, 4)
    assert (by_id["one"].agg.workers, by_id["one"].chips) == (1, 2)
    assert any(a.startswith("agg: one replica") for a in by_id["one"].assumptions)
    case = serving_case(rep)
    assert case.concurrency == 416 / 32 == 13 and case.deployment.batch == 13


def test_a_file_missing_columns_is_refused_with_their_names(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,backend\nx,vllm\n")
    with pytest.raises(TokensimError, match="missing columns silicon_data_source"):
        read_silicon(path)


def test_serving_rows(tmp_path):
    path = tmp_path / "serving.csv"
    path.write_text(SERVING_CSV)
    rows, unresolved = read_serving(path)
    by_id = {r.id: r for r in rows}
    s1 = by_id["s1"]
    assert (s1.engine, s1.engine_version, s1.model, s1.hardware, s1.chips, s1.tp, s1.weights, s1.kv) == (
        "vllm", "0.19.0", "qwen3-32b", "rtx-pro-6000", 2, 2, "bf16", "bf16")
    assert (s1.arrival, s1.request_rate_per_s, s1.metric, s1.value, s1.mean_input_tokens) == ("poisson", 10.0, "ttft_s_mean", 36.9, 862.3)
    s2 = by_id["s2"]
    assert (s2.engine_version, s2.model, s2.hardware, s2.arrival, s2.request_rate_per_s) == (
        "0.9.0.2.dev108+g71faa1880", "llama-2-70b", "mi300x", "poisson", None)
    assert (s2.metric, s2.scenario, s2.mean_input_tokens) == ("throughput_tokens_per_s", "Server", None)
    s3 = by_id["s3"]
    assert (s3.model, s3.chips, s3.weights, s3.engine_version) == ("llama-3.1-70b", 4, None, None)
    assert (s3.metric, s3.value) == ("ttft_s_p99", pytest.approx(0.1107))                 # ms -> s
    s4 = by_id["s4"]
    assert (s4.ep, s4.attention_dp, s4.arrival, s4.concurrency) == (2, 2, "fixed_concurrency", 64)
    assert {u.id: u.reason for u in unresolved} == {
        "s5": "model variant not stated ('DeepSeek (variant not stated in excerpt)')",
        "s6": "arrival process not stated ('not stated')"}


@pytest.mark.skipif(not (SHARED / "silicon_dev.csv").exists(), reason="shared/data/serving not present")
def test_the_shared_silicon_file_resolves_at_least_95_percent():
    """At least 95 % of silicon_dev.csv rows resolve on every (system, engine) pair the file has."""
    runs, unresolved = read_silicon(SHARED / "silicon_dev.csv")
    assert len(runs) / (len(runs) + len(unresolved)) >= 0.95
    assert all(u.reason for u in unresolved)
    assert {(r.system, r.engine) for r in runs} >= {("b200", "trtllm"), ("h100-sxm", "vllm"), ("gb200-nvl72", "sglang")}
    assert Counter(r.mode for r in runs)["disagg"] > 0


def test_the_shipped_agg_runs_read_as_replicas():
    """silicon_dev.csv (the package's copy): 29 TensorRT-LLM agg runs state a whole multiple (2 to 32) of their
    batch as concurrency and are read as that many replicas; the five of jobs 23803065 and 23793564 hold 64 GPUs, as
    their jobs' disagg runs do, and say so."""
    from tokensim.validate.fit import shipped_silicon
    runs, _ = read_silicon(shipped_silicon())
    replicated = [r for r in runs if r.agg is not None and r.agg.workers != 1]
    assert len(replicated) == 29 and {r.engine for r in replicated} == {"trtllm"}
    assert all(r.concurrency == r.agg.workers * r.agg.batch_size * r.agg.attention_dp for r in replicated)
    corroborated = [r for r in replicated if any("holds the same" in a for a in r.assumptions)]
    assert {r.job for r in corroborated} == {"23803065", "23793564"} and len(corroborated) == 5
    assert all(r.chips == 64 for r in corroborated)


@pytest.mark.skipif(not (SHARED / "serving_dev.csv").exists(), reason="shared/data/serving not present")
def test_the_shared_serving_file_reads_and_says_why_not():
    rows, unresolved = read_serving(SHARED / "serving_dev.csv")
    assert len(rows) >= 40 and all(u.reason for u in unresolved)
