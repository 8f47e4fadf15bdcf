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
from tokensim.validate.serving import build_cases, prefill_step_tokens, steady_tpot
from tokensim.validate.serving_rows import read_silicon

# Qwen3-235B-A22B (FP8) on 4 H100 with TensorRT-LLM, 1,024 in / 128 out, 4 clients (silicon_dev.csv)
RUN = "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h100_sxm_trtllm_agg_1024x128_c4_tp4_epnone_4"


@pytest.fixture(scope="module")
def case():
    runs, _ = read_silicon(shipped_silicon())
    cases, _ = build_cases([r for r in runs if r.id == RUN])
    assert len(cases) == 1
    return cases[0]


def _ctx(case):
    dep = case.deployment
    model, hw = catalog_model(case.run.model), catalog()[case.run.system]
    return make_context(model, hw, dep, for_hardware(hw, dep.engine, None))


def _step_s(case, decode_seqs: float, prompts: float) -> float:
    dep = case.deployment
    ctx = _ctx(case)
    b = Batch(decode_seqs=decode_seqs, decode_context=dep.input_tokens + dep.output_tokens / 2.0,
              prefill_seqs=prompts, prefill_tokens=float(dep.input_tokens), prefill_position=dep.input_tokens / 2.0)
    return float(step_cost(ctx, b).latency_s)


def test_clients_return_in_cohorts_and_a_request_waits_for_the_other_cohorts_prefills(case):
    # TensorRT-LLM here takes whole prompts up to isl + 1,500 = 2,524 tokens a step: two 1,024-token prompts. The
    # 4 clients' prompts are prefilled two by two, so they return in k = 4 x 1,024 / 2,048 = 2 cohorts; in a
    # request's 128 decode steps the other cohort is prefilled once: 1 step in 128 carries 2 prompts
    assert prefill_step_tokens(4, 1024, "trtllm") == 2048
    expected = (127 / 128) * _step_s(case, 4, 0) + (1 / 128) * _step_s(case, 4, 2)
    assert steady_tpot([case])[0] == pytest.approx(expected, rel=1e-9)


def test_chunked_engines_fill_the_budget_with_parts_of_prompts():
    assert prefill_step_tokens(4, 1024, "vllm") == 1024 + 1500
    assert prefill_step_tokens(1, 1024, "sglang") == 1024          # one client: its own prompt only


def test_clients_whose_prompts_fit_one_step_move_in_lockstep_and_decode_undisturbed(case):
    # 2 clients x 1,024 tokens fit one step: one cohort, no other cohort's prefill in any request's decodes
    c = replace(case, concurrency=2.0, deployment=replace(case.deployment, batch=2))
    assert steady_tpot([c])[0] == pytest.approx(_step_s(case, 2, 0), rel=1e-9)


def test_the_mean_step_is_below_the_step_of_the_mean_batch_for_a_moe(case):
    # a MoE step's expert reads are concave in its tokens: spreading 4 / 128 of a prompt (32 tokens) over every step
    # touches far more experts per step than 4 decodes do, so pricing the mean batch overstates the mean step
    averaged = _step_s(case, 4, 4 / 128)
    assert steady_tpot([case])[0] < 0.8 * averaged


def test_more_cohorts_than_decode_steps_put_a_prefill_in_every_step(case):
    # 512 clients: 256 cohorts of 2 prompts, 255 > 128 other cohorts' prefills: every step carries 2 prompts
    c = replace(case, concurrency=512.0, deployment=replace(case.deployment, batch=512), batch_cap=None)
    assert steady_tpot([c])[0] == pytest.approx(_step_s(c, 512, 2), rel=1e-9)


def test_the_running_batch_is_capped_at_the_runs_batch_size(case):
    c = replace(case, concurrency=64.0, deployment=replace(case.deployment, batch=64), batch_cap=16)
    assert c.running_per_rank == 16
    share = (16 * 1024 / 2048 - 1) / 128                      # 8 cohorts of the 16 running requests
    expected = (1 - share) * _step_s(c, 16, 0) + share * _step_s(c, 16, 2)
    assert steady_tpot([c])[0] == pytest.approx(expected, rel=1e-9)


def test_a_disaggregated_decode_worker_sees_no_prompts(case):
    c = replace(case, prefill_in_decode=False)
    assert steady_tpot([c])[0] == pytest.approx(_step_s(case, 4, 0), rel=1e-9)
    assert np.isfinite(steady_tpot([c])).all()


def _run(tmp_path, line):
    from tokensim.validate.serving_rows import SILICON_COLUMNS, read_silicon
    path = tmp_path / "one.csv"
    path.write_text(",".join(SILICON_COLUMNS) + "\n" + line + "\n")
    runs, _ = read_silicon(path)
    return runs[0]


def test_experts_split_below_a_tile_are_read_as_expert_parallelism(tmp_path):
    """DeepSeek-R1 'tp 36, moe_tp 36, moe_ep 1' would give each GPU 2,048 / 36 = 57 columns of every expert, below one
    128-column tile: read as expert parallelism 36 with attention data parallelism 36, and the 256 experts padded to
    the next multiple of 36, 288 slots: 32 redundant."""
    from tokensim.validate.serving import serving_case
    run = _run(tmp_path, "r1,source_file=x.csv; silicon_concurrency=64,trtllm,,deepseek-ai/DeepSeek-R1,gb200,fp4,agg,"
                         "1024,1024,nvfp4,nvfp4,64,36,1,1,36,1,,,,,,,,,,,,,,,200.0,10.0")
    case = serving_case(run)
    d = case.deployment
    assert (d.tp, d.attn_dp, d.ep) == (1, 36, 36)
    assert d.redundant_experts == 288 - 256
    assert any("below one 128-column tile" in n for n in case.assumptions)


def test_inferencex_deepseek_on_gb200_written_as_agg_beyond_one_node_is_skipped_as_disaggregated(tmp_path):
    """InferenceX ran DeepSeek on GB200 only as multi-node disaggregated Dynamo deployments (harness.toml
    [[multinode_disagg]]): its row written as agg with tp 36 counts prefill and decode GPUs together and states
    neither the decode workers nor MTP, so it is skipped with that reason. The same row from aiconfigurator's own
    sample (the test above) stands, as does an InferenceX row that fits one 4-GPU GB200 node."""
    from tokensim.validate.serving import build_cases
    row = ("r1,source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=64; measured=2025-11-17T00:00:00.000Z"
           ",trtllm,,deepseek-ai/DeepSeek-R1,gb200,fp4,agg,1024,1024,nvfp4,nvfp4,64,{tp},1,1,{tp},1,,,,,,,,,,,,,,,"
           "200.0,10.0")
    cases, skipped = build_cases([_run(tmp_path, row.format(tp=36))])
    assert not cases and len(skipped) == 1
    assert "multi-node disaggregated" in skipped[0][1] and "MTP" in skipped[0][1] and "36 GPUs" in skipped[0][1]
    cases, skipped = build_cases([_run(tmp_path, row.format(tp=4))])
    assert len(cases) == 1 and not skipped


def test_the_shipped_runs_skipped_as_multinode_are_inferencex_deepseek_on_gb200():
    """silicon_dev.csv: the 55 rows the rule skips are all InferenceX DeepSeek runs on GB200 written as agg on 12 to
    72 GPUs (3 nodes to a rack); no other run is skipped by it."""
    runs, _ = read_silicon(shipped_silicon())
    by_id = {r.id: r for r in runs}
    _, skipped = build_cases(runs)
    multinode = [by_id[i] for i, why in skipped if "multi-node disaggregated" in why]
    assert len(multinode) == 55
    for r in multinode:
        gpus = r.agg.chips_per_worker
        assert (r.system, r.harness, r.mode) == ("gb200-nvl72", "inferencex", "agg") and 12 <= gpus <= 72
        assert r.model in ("deepseek-r1", "deepseek-v3")


def test_experts_wide_enough_per_gpu_stay_tensor_parallel(tmp_path):
    """moe_tp 8 on DeepSeek-R1: 2,048 / 8 = 256 columns per GPU, two tiles: the stated layout stands."""
    from tokensim.validate.serving import serving_case
    run = _run(tmp_path, "r2,source_file=x.csv; silicon_concurrency=16,trtllm,,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,"
                         "1024,1024,fp8,fp8,16,8,1,1,8,1,,,,,,,,,,,,,,,200.0,10.0")
    d = serving_case(run).deployment
    assert (d.tp, d.attn_dp, d.ep, d.redundant_experts) == (8, 1, 1, 0)


def test_a_whole_multiple_of_the_batch_is_that_many_replicas_as_the_generator_deploys_them():
    """Qwen3-32B on GB200 with TensorRT-LLM, tp 2, batch_size 1, 2 clients (silicon_dev.csv): aiconfigurator's
    generator sets a benchmark's concurrency to agg_workers x max_batch_size, so 2 = 2 x 1 is two TP2 replicas (one
    4-GPU GB200 tray), one client each: the cap stays 1 per rank and the rule is recorded."""
    runs, _ = read_silicon(shipped_silicon())
    run = next(r for r in runs if r.id == "qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_2000x500_c2_tp2_epnone_3")
    assert (run.concurrency, run.agg.batch_size, run.agg.tp, run.agg.workers, run.chips) == (2, 1, 2, 2, 4)
    cases, _ = build_cases([run])
    assert cases[0].concurrency == 1 and cases[0].batch_cap == 1 and cases[0].running_per_rank == 1.0
    assert any("2 replicas of 2 GPUs, 1 clients each" in a for a in run.assumptions)


def test_clients_beyond_the_stated_batch_but_no_whole_multiple_of_it_all_run_on_one_replica(tmp_path):
    """5 clients on a replica of batch_size 2: not a whole number of replicas, so one replica, and (as measured
    TTFTs of such runs show no queue behind a full batch) every client runs: the cap becomes 5, the rule recorded."""
    run = _run(tmp_path, "r4,source_file=x.csv; silicon_concurrency=5,trtllm,,Qwen/Qwen3-32B,h100_sxm,fp8,agg,"
                         "1024,1024,fp8,fp8,2,2,1,1,1,1,,,,,,,,,,,,,,,200.0,10.0")
    assert run.agg.workers == 1
    cases, _ = build_cases([run])
    assert cases[0].concurrency == 5 and cases[0].batch_cap == 5
    assert any("every client runs" in a for a in cases[0].assumptions)


@pytest.mark.parametrize("row_id, tp, adp, moe_tp, moe_ep, expect", [
    ("r3", 64, 1, 8, 8, (8, 1, 8)),                          # 64 GPUs would leave an 8-GPU NVLink domain
    ("r3", 1, 64, 8, 8, (1, 8, 8)),
    ("x_agg_1024x1024_c8_tp2_ep2_992", 4, 1, 2, 2, (2, 1, 2)),   # 4 GPUs fit a node, but the id names tp2_ep2
    ("r3", 8, 8, 1, 64, (8, 1, 8)),                          # the second pattern: tp = attention_dp = N, moe_ep N^2
    ("x_agg_1024x1024_c4_tp2_ep2_1389", 2, 2, 1, 4, (2, 1, 2)),
])
def test_a_width_written_squared_is_read_as_the_named_layout(tmp_path, row_id, tp, adp, moe_tp, moe_ep, expect):
    """moe_tp = moe_ep = N with tp x attention_dp = N^2: the source's 2026-04-06 rows so written are named tpN_epN, and
    its 2026-03-25 rows write the same named layout as tp N, moe_tp 1, moe_ep N (gpt-oss-120b on H200, tp8_ep8,
    8 clients, 1k/8k: TPOT 5.27 ms there, 5.23 ms here). Read as N GPUs (not N^2): attention tp N (or attention DP N)
    and expert parallelism N, the rule recorded."""
    from tokensim.validate.serving import serving_case
    run = _run(tmp_path, f"{row_id},source_file=x.csv; silicon_concurrency=8,trtllm,,openai/gpt-oss-120b,h200_sxm,fp4,"
                         f"agg,1024,8192,nvfp4,nvfp4,8,{tp},1,{adp},{moe_tp},{moe_ep},,,,,,,,,,,,,,,119.0,5.23")
    case = serving_case(run)
    d = case.deployment
    assert (d.tp, d.attn_dp, d.ep) == expect
    side = expect[2]
    assert d.tp * d.attn_dp * d.pp == side
    assert any(f"read as {side} GPUs" in n for n in case.assumptions)


@pytest.mark.parametrize("source, chips", [
    ("db-dump/2026-04-27; config_id=690; silicon_concurrency=64", 2),     # InferenceX: its configs run on tp GPUs
    ("source_file=x.csv; silicon_concurrency=64", 4),                      # aiconfigurator's own: an ordinary layout
])
def test_an_inferencex_width_written_squared_is_read_as_tp_gpus_even_unnamed(tmp_path, source, chips):
    """MiniMax-M2.5 on B200 with vLLM written tp 2 x attention_dp 2 with moe_tp 1 x moe_ep 4, unnamed, inside one
    8-GPU node (silicon_dev.csv's cfg690 rows): InferenceX's config for it lists only {tp: 2, ep: 2} at that width and
    its script runs on $TP GPUs, so an InferenceX row is 2 GPUs, tp 2 with expert parallelism 2 (2 x 2 = 4 = the
    written product), the rule recorded; the same numbers from another harness stay 4 GPUs (tp 2 x attention DP 2,
    experts over 4)."""
    from tokensim.validate.serving import serving_case
    run = _run(tmp_path, f"minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c64_cfg690,{source},vllm,0.19.0,"
                         "MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,fp8,fp8,32,2,1,2,1,4,,,,,,,,,,,,,,,"
                         "191.9,22.4")
    case = serving_case(run)
    d = case.deployment
    assert d.tp * d.attn_dp * d.pp == chips
    assert (d.tp, d.attn_dp, d.ep) == ((2, 1, 2) if chips == 2 else (2, 2, 4))
    assert any("read as 2 GPUs" in n for n in case.assumptions) == (chips == 2)


def test_a_square_layout_that_is_not_named_and_fits_a_node_stands(tmp_path):
    """tp 4 with moe_tp 2 x moe_ep 2 = 4, unnamed, on one 8-GPU node: an ordinary 4-GPU layout (experts split 2 ways
    by tensor and 2 by expert parallelism); it stays 4 GPUs with expert parallelism 2."""
    from tokensim.validate.serving import serving_case
    run = _run(tmp_path, "r4,source_file=x.csv; silicon_concurrency=8,trtllm,,openai/gpt-oss-120b,h200_sxm,fp4,agg,"
                         "1024,1024,nvfp4,nvfp4,8,4,1,1,2,2,,,,,,,,,,,,,,,100.0,5.0")
    case = serving_case(run)
    assert (case.deployment.tp, case.deployment.attn_dp, case.deployment.ep) == (4, 1, 2)
    assert not any("the layout the source names" in n for n in case.assumptions)


def test_clients_with_drawn_lengths_come_back_alone_and_interrupt_each_request_once(case):
    # A client that draws each request's lengths (InferenceX's) finishes apart from the others, so each of the 3
    # other clients sends its next 1,024-token prompt alone once in a request's 128 decode steps: 3 steps in 128
    # carry one prompt beside the 4 decodes (where cohorts would put 2 prompts in 1 step in 128, above)
    from tokensim.validate.serving import cohort_step_s
    expected = (125 / 128) * _step_s(case, 4, 0) + (3 / 128) * _step_s(case, 4, 1)
    got = cohort_step_s(_ctx(case), np.array([4.0]), 1024, 128, "trtllm", spread=True)[0]
    assert got == pytest.approx(expected, rel=1e-9)


def test_drawn_lengths_with_more_arrivals_than_steps_fill_each_step_up_to_its_budget(case):
    # 512 clients: 511 / 128 = 4.0 prompts arrive per decode step, and TensorRT-LLM's budget (2,524 tokens, whole
    # prompts) takes 2 of them a step: every step carries 2 prompts
    from tokensim.validate.serving import cohort_step_s
    c = replace(case, concurrency=512.0, deployment=replace(case.deployment, batch=512), batch_cap=None)
    got = cohort_step_s(_ctx(c), np.array([512.0]), 1024, 128, "trtllm", spread=True)[0]
    assert got == pytest.approx(_step_s(c, 512, 2), rel=1e-9)


def test_a_lone_client_with_drawn_lengths_decodes_undisturbed(case):
    from tokensim.validate.serving import cohort_step_s
    got = cohort_step_s(_ctx(case), np.array([1.0]), 1024, 128, "trtllm", spread=True)[0]
    assert got == pytest.approx(_step_s(case, 1, 0), rel=1e-9)


def test_light_ttft_with_drawn_lengths_prefills_the_prompt_alone_beside_the_others_decodes(case, monkeypatch):
    # 4 clients with drawn lengths: the prompt arrives alone while 3 others decode; it waits for the decode step
    # scheduled before it arrived (3 decodes) and gets its first token from the next (3 decodes + its prompt);
    # the request path comes on top
    from tokensim.validate.serving import ServingCase, light_ttft
    monkeypatch.setattr(ServingCase, "spread_arrivals", property(lambda self: True))
    path = for_hardware(catalog()[case.run.system], case.deployment.engine, None).request_overhead_s
    expected = path + _step_s(case, 3, 0) + _step_s(case, 3, 1)
    assert light_ttft([case])[0] == pytest.approx(expected, rel=1e-9)
