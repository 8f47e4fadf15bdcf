"""Serving runs under load: the light-load TTFT estimate and the closed loop simulated as aiperf measures it (issues 11
and 12)."""
from dataclasses import replace

import numpy as np
import pytest

from tokensim.perf.constants import default_table
from tokensim.perf.timer import CostModelTimer
from tokensim.sim.timer import StepBatch
from tokensim.specs.hardware.catalog import catalog
from tokensim.specs.model.catalog import catalog_model
from tokensim.validate.load import MEASURED_ROUNDS, shipped_silicon_cases, simulate_case
from tokensim.validate.objective import FitData
from tokensim.validate.serving import LIGHT_LOAD_CLIENTS, light_ttft

EMPTY = np.zeros(0, dtype=np.int64)
PATH_S = 0.05


@pytest.fixture(scope="module")
def cases():
    return shipped_silicon_cases()


@pytest.fixture(scope="module")
def table():
    """The shipped constants with a request path of 50 ms for every engine."""
    return default_table().with_overlay({"default": {e: {"request_overhead_s": PATH_S}
                                                     for e in ("default", "vllm", "sglang", "trtllm")}})


def _timer(c, table):
    return CostModelTimer(catalog_model(c.run.model), catalog()[c.run.system], c.deployment, table, exact=True)


def test_light_load_rows_are_the_aggregated_runs_with_few_clients_per_replica(cases):
    light = FitData.of([], cases).ttft_light
    assert light and all(c.prefill_in_decode for c in light)
    assert all(c.concurrency / c.deployment.attn_dp <= LIGHT_LOAD_CLIENTS for c in light)
    assert len(light) < len(cases) / 4


def test_one_client_light_ttft_is_request_path_plus_one_prefill_step(cases, table):
    """One client alone: nothing else decodes, so no step runs before the prompt's, and its first token comes from
    the prefill step of its whole prompt: TTFT = request path + that step (by hand from the step timer)."""
    c = next(c for c in cases if c.concurrency == 1 and c.run.mode == "agg" and c.deployment.attn_dp == 1)
    prefill = _timer(c, table).step_s(StepBatch(EMPTY, np.array([c.run.isl]), np.array([0])))
    assert light_ttft([c], table)[0] == pytest.approx(PATH_S + prefill, rel=1e-3)


def test_four_clients_wait_for_the_step_scheduled_before_they_arrived(cases, table):
    """Four clients of 8,192-token prompts on vLLM (token budget about one prompt): a cohort of about one prompt
    returns while three others decode, waits for the decode step scheduled before it arrived, then gets its first
    token from a step with its prompt beside those decodes; more than one prefill alone, less than two."""
    c = next(c for c in cases if c.concurrency == 4 and c.run.engine == "vllm" and c.run.isl == 8192
             and c.deployment.attn_dp == 1)
    timer = _timer(c, table)
    prefill = timer.step_s(StepBatch(EMPTY, np.array([c.run.isl]), np.array([0])))
    t = light_ttft([c], table)[0] - PATH_S
    assert prefill < t < 2 * prefill


def test_simulated_one_client_matches_its_step_times(cases, table):
    """One client: the simulated TTFT is the request path plus the prefill step, and TPOT the time of a decode step
    of one sequence, between its first and last context (no other request shares the steps)."""
    c = next(c for c in cases if c.concurrency == 1 and c.run.mode == "agg" and c.deployment.attn_dp == 1)
    r = simulate_case(c, table)
    timer = _timer(c, table)
    prefill = timer.step_s(StepBatch(EMPTY, np.array([c.run.isl]), np.array([0])))
    first_decode = timer.step_s(StepBatch(np.array([c.run.isl]), EMPTY, EMPTY))
    last_decode = timer.step_s(StepBatch(np.array([c.run.isl + c.run.osl - 2]), EMPTY, EMPTY))
    assert r.ttft_s == pytest.approx(PATH_S + prefill, rel=0.02)
    assert first_decode * 0.99 <= r.tpot_s <= last_decode * 1.01


def test_the_burst_and_the_drain_weigh_one_round_in_ten_each(cases, table):
    """aiperf's measured requests start together on an idle engine: with 32 or more clients of 8,192-token prompts
    and a token budget of about one prompt per step, the first round (the burst) waits far longer for its first
    token than the rounds after it. Three simulated rounds stand for the harness' ten: the run's mean TTFT is the
    request path plus (burst mean + 8 x steady mean + drain mean) / 10, and its TPOT the same mix, read here from
    the simulation's own per-request records."""
    from tokensim.prediction.serving import engine_for
    from tokensim.sim import ClosedLoop, Workload, simulate
    from tokensim.validate.harness import client_lengths
    from tokensim.validate.load import benchmark_scheduler

    c = next(c for c in cases if c.concurrency >= 32 and c.run.engine == "trtllm" and c.run.isl == 8192
             and c.deployment.attn_dp == 1 and c.run.mode == "agg")
    clients, n = int(c.concurrency), 3 * int(c.concurrency)
    spec = engine_for(catalog_model(c.run.model), catalog()[c.run.system], c.deployment, constants=table,
                      scheduler=benchmark_scheduler(c))
    inputs, outputs, _ = client_lengths(c.run.harness, c.run.isl, c.run.osl, n)     # the run's client's lengths
    work = Workload(np.zeros(n), inputs, outputs)
    req = simulate(ClosedLoop(clients, work), spec, seed=0).requests
    ttft = req["first_token_s"] - req["arrival_s"]
    tpot = (req["last_token_s"] - req["first_token_s"]) / np.maximum(req["tokens"] - 1, 1)
    burst, steady, drain = (ttft[k * clients:(k + 1) * clients].mean() for k in range(3))
    assert burst > 3 * steady
    assert MEASURED_ROUNDS == 10
    r = simulate_case(c, table, rounds=3)
    assert r.ttft_s == pytest.approx(PATH_S + (burst + 8 * steady + drain) / 10, rel=1e-9)
    t_burst, t_steady, t_drain = (tpot[k * clients:(k + 1) * clients].mean() for k in range(3))
    assert r.tpot_s == pytest.approx((t_burst + 8 * t_steady + t_drain) / 10, rel=1e-9)


def test_round_shares_stand_for_ten_rounds():
    """By hand: 3 rounds -> burst 1, one steady round 8, drain 1 (of 10); 4 rounds -> 1, 4, 4, 1; 2 rounds -> the
    burst 1 and the other 9; one simulated round stands for itself."""
    from tokensim.validate.load import round_shares

    assert round_shares(3) == [1.0, 8.0, 1.0]
    assert round_shares(4) == [1.0, 4.0, 4.0, 1.0]
    assert round_shares(2) == [1.0, 9.0]
    assert round_shares(1) == [1.0]
    assert sum(round_shares(10)) == pytest.approx(10.0)


def test_the_drain_round_is_not_stalled_by_new_prompts():
    """64 clients of Qwen3-32B FP8 on one H100 (TensorRT-LLM, 1,024 in / 128 out, no chunked prefill): in the last
    round no client sends again, so its decodes run without the others' prompts between them and its TPOT is
    lower than a steady round's; ten simulated rounds and three weighed 1 / 8 / 1 agree within 1 %."""
    from tokensim.sim import ClosedLoop, Workload, simulate
    from tokensim.validate.load import round_shares, worker_engine

    c = next(c for c in shipped_silicon_cases() if c.run.model == "qwen3-32b" and c.run.system == "h100-sxm"
             and c.run.engine == "trtllm" and c.deployment.tp == 1 and c.concurrency == 64 and c.run.isl == 1024
             and c.run.osl == 128)
    clients, n = 64, 3 * 64
    spec = worker_engine(c, catalog_model(c.run.model), catalog()[c.run.system])
    req = simulate(ClosedLoop(clients, Workload(np.zeros(n), np.full(n, 1024), np.full(n, 128))), spec,
                   seed=0).requests
    tpot = (req["last_token_s"] - req["first_token_s"]) / np.maximum(req["tokens"] - 1, 1)
    steady, drain = tpot[clients:2 * clients].mean(), tpot[2 * clients:].mean()
    assert drain < 0.8 * steady
    three, ten = simulate_case(c, rounds=3), simulate_case(c, rounds=10)
    assert round_shares(10) == [1.0] * 10
    assert three.tpot_s == pytest.approx(ten.tpot_s, rel=0.01)


def test_a_disaggregated_run_is_simulated_whole():
    """DeepSeek-R1 FP8 on GB200 with TensorRT-LLM, 1 prefill worker of 8 attention-DP ranks (EP 8) and 1 decode worker
    of 32 (EP 32), 2,048 clients (silicon_dev.csv). By hand: the prefill worker packs prompts up to 8,192 tokens per
    rank: 8 prompts of 1,024 per rank, 64 in all, 8 x 8,192 = 65,536 tokens a step; the decode worker runs 64 per rank,
    2,048 in all, within 32 x (64 + 1,024 + 1,500 -> 2,592) = 82,944 tokens; 8 + 32 = 40 GPUs fit the NVL72's NVLink
    domain, so each request's KV cache (DeepSeek's 61 MLA layers at FP8) moves at 8 x 900 GB/s with 3 us latency."""
    from tokensim.perf.memory import kv_bytes_per_token
    from tokensim.specs.model.catalog import catalog_model
    from tokensim.validate.fit_report import serving_cases
    from tokensim.validate.load import disaggregated

    case = next(c for c in serving_cases(None) if c.run.id == "dsr1_gb200_trtllm_fp8_disagg_1024x8192_c2048_cfg375")
    d = disaggregated(case)
    assert (d.prefill.scheduler.max_batch_size, d.prefill.scheduler.max_num_tokens) == (64, 65536)
    assert (d.decode.scheduler.max_batch_size, d.decode.scheduler.max_num_tokens) == (2048, 82944)
    assert (d.prefill_count, d.decode_count) == (1, 1)
    assert d.transfer_bandwidth_bytes_per_s == 8 * 900e9 and d.transfer_latency_s == 3e-6
    assert d.kv_bytes_per_token == kv_bytes_per_token(catalog_model("deepseek-v3"), "fp8")


def test_left_out_tpot_reported_is_the_steady_state_estimate_not_the_objective(cases, monkeypatch):
    """The fit's objective multiplies each run's steady-state TPOT by the simulator's ratio at the whole fit's constants
    (`FitData.tpot_ratio`); the report labels its TPOT "steady-state estimate" and `validate --serving` prints that
    estimate, so the left-out figure must not carry the ratio. With the refit replaced by the shipped constants and
    a ratio of 2 on every run, the reported error is ln(steady / measured), not ln(2 steady / measured)."""
    from tokensim.validate import fit_report
    from tokensim.validate.serving import steady_tpot

    pair = ("h100-sxm", "trtllm")
    runs = tuple(c for c in cases if c.pair == pair and c.concurrency <= 4)[:2]
    assert len(runs) == 2
    data = replace(FitData.of((), runs), tpot_ratio=(2.0, 2.0))
    shipped = default_table()
    monkeypatch.setattr(fit_report, "held_out", lambda d, fitted, lp, ls: ({}, d))
    monkeypatch.setattr(fit_report, "table_for", lambda values: shipped)
    _, _, errs, _, _ = fit_report._pair_task((data, {}, pair))
    measured = np.array([c.run.tpot_s for c in runs])
    expected = np.log(steady_tpot(list(runs), shipped) / measured)
    assert np.allclose(errs["tpot"], expected, rtol=0, atol=1e-12)
    assert not np.allclose(errs["tpot"], expected + np.log(2.0), rtol=0, atol=0.1)


def test_interleaved_shares_cover_every_index_once():
    """The fit deals the runs into shares i, i + k, i + 2k, ...: every run once, no empty share, k capped at n."""
    from tokensim.validate.pool import interleaved

    assert interleaved(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert interleaved(2, 8) == [[0], [1]]
    shares = interleaved(101, 8)
    assert sorted(i for s in shares for i in s) == list(range(101)) and all(shares)
    assert interleaved(0, 4) == []


def test_fit_simulations_are_the_same_in_two_processes(cases, table):
    """The fit's simulations of the serving runs (`fit.simulated`, three passes over every run) may run in a process
    pool; each run is simulated alone from its own seed, so two processes must give exactly the results one gives,
    in the runs' order, including a run that cannot be laid out (None)."""
    from tokensim.validate.fit import simulate_runs, simulated

    picked = [c for i, c in enumerate(cases) if i % 97 == 0][:12]
    assert len({c.pair for c in picked}) >= 3
    big = next(c for c in cases if c.run.model == "deepseek-r1" and c.run.system == "h200")
    unfit = replace(big, deployment=replace(big.deployment, tp=1, ep=1, attn_dp=1))     # 671B on one H200
    picked.insert(5, unfit)
    one = simulate_runs(picked, table, workers=1)
    two = simulate_runs(picked, table, workers=2)
    assert one == two and one[5] is None and all(r is not None for i, r in enumerate(one) if i != 5)
    assert one[0] == (simulate_case(picked[0], table).ttft_s, simulate_case(picked[0], table).tpot_s)
    data = FitData.of((), picked)
    assert simulated(data, table, workers=1) == simulated(data, table, workers=2)


def test_default_workers_are_the_cpus_this_process_may_use(monkeypatch):
    """The fit's default pool counts the CPUs in this process's affinity mask (a container's or taskset's share), not
    the machine's; where the platform has no affinity call it falls back to os.cpu_count()."""
    import os

    from tokensim.validate import pool

    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda pid: {3, 5}, raising=False)
    assert pool.available_cpus() == 2
    monkeypatch.delattr(pool.os, "sched_getaffinity")
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 6)
    assert pool.available_cpus() == 6
    monkeypatch.setattr(pool.os, "cpu_count", lambda: None)
    assert pool.available_cpus() == 1 and os is pool.os


def test_split_loss_is_the_serial_loss_to_the_bit(cases, table):
    """The fit may spread each evaluation of its loss over processes (validate/split_loss.py): each holds whole
    serving groups (a group is priced in one vectorized call, from its first run's layout), and the parent sums the
    log errors in the rows' own order, so the loss must be the same float as objective.loss for every constant, with
    2 or 3 processes, on published rows and on light-load and loaded serving runs with their pinned ratios."""
    from tokensim.validate.fit import FITTED_LEVELS, PARAMS, buildable
    from tokensim.validate.objective import KINDS, affected, loss
    from tokensim.validate.run import shipped_measurements
    from tokensim.validate.split_loss import SplitLoss, shares

    picked = [c for c in cases if c.run.system in ("h200", "b200") and c.run.model in ("llama-3.1-70b", "gpt-oss-120b",
                                                                                         "deepseek-r1")][::7]
    data = FitData.of(buildable(shipped_measurements())[::5], picked)
    data = replace(data, tpot_ratio=tuple(1.0 + 0.01 * (i % 7) for i in range(len(data.tpot))),
                   light_steps=tuple(1.0 + 0.1 * (i % 3) for i in range(len(data.ttft_light))))
    assert len(data.published) > 20 and len(data.tpot) > 40 and len(data.ttft_light) > 3
    for n in (2, 3):
        dealt = shares(data, n)
        for kind in KINDS:      # every row in exactly one share
            assert sorted(i for s in dealt for i in s[kind]) == list(range(len(getattr(data, kind))))
        owners = {}
        for s, share in enumerate(dealt):
            for kind in ("tpot", "ttft_light"):
                for i in share[kind]:
                    assert owners.setdefault(getattr(data, kind)[i].group, s) == s    # groups whole
    moving = [p for p in PARAMS if len(affected(p, data, FITTED_LEVELS))][::3]
    assert len(moving) >= 8
    for n in (2, 3):
        with SplitLoss(data, FITTED_LEVELS, n) as split:
            for p in moving:
                for scale in (0.7, 1.0):
                    t = table.with_overlay({p.family: {p.engine: {p.name: min(p.hi, max(p.lo, p.lo * 1.5 / scale))}}})
                    assert split.loss(p, t) == loss(affected(p, data, FITTED_LEVELS), t), (n, p.name)


def test_kept_serving_sums_give_the_loss_to_the_bit(cases, table):
    """The out-of-sample refits keep the serving kinds' capped sums by (rows, constants) across refits in a process
    (objective.loss_kept): the first call and a call served from the store must both equal objective.loss, and rows
    that differ (a run left out, or a pinned ratio changed) must get another key."""
    from tokensim.validate.fit import buildable
    from tokensim.validate.objective import loss, loss_kept, serving_rows_key
    from tokensim.validate.run import shipped_measurements

    picked = [c for c in cases if c.run.system == "h100-sxm"][::11]
    data = FitData.of(buildable(shipped_measurements())[::9], picked)
    data = replace(data, tpot_ratio=tuple(1.0 + 0.02 * (i % 5) for i in range(len(data.tpot))))
    assert data.tpot and data.ttft_light and data.published
    key = (serving_rows_key(data), "constants A")
    first, again = loss_kept(data, table, key), loss_kept(data, table, key)
    assert first == again == loss(data, table)
    fewer = data.subset(lambda c: True, lambda c: c is not data.tpot[0])
    other = replace(data, tpot_ratio=(2.0,) + data.tpot_ratio[1:])
    assert len({serving_rows_key(data), serving_rows_key(fewer), serving_rows_key(other)}) == 3
    assert loss_kept(fewer, table, (serving_rows_key(fewer), "constants A")) == loss(fewer, table) != first


def test_serial_evaluator_is_the_loss_of_the_moved_rows(cases, table):
    """A sweep run in one process evaluates with objective.KeptLoss: for every constant, the loss of the rows it
    moves at that constant's value, the same float as objective.loss on affected(...), on the first call and on a
    call the store answers; two values of a constant must not share a stored sum (their overlays differ: a stale sum
    would show wherever the two values' losses differ, which they do for these constants)."""
    from tokensim.validate.fit import FITTED_LEVELS, PARAMS, buildable
    from tokensim.validate.objective import KeptLoss, affected, loss
    from tokensim.validate.run import shipped_measurements

    picked = [c for c in cases if c.run.system in ("h200", "b200")][::13]
    data = FitData.of(buildable(shipped_measurements())[::7], picked)
    # constants every engine's serving runs are priced with: weight streaming, prompt FLOPs, per-step and request time
    moving = [p for p in PARAMS if p.engine in ("vllm", "sglang", "trtllm") and p.name in (
        "hbm_bandwidth_fraction", "prefill_flops_fraction", "host_overhead_s", "request_overhead_s")]
    assert len(moving) == 12 and all(len(affected(p, data, FITTED_LEVELS).tpot) for p in moving)
    differ = 0
    with KeptLoss(data, FITTED_LEVELS) as kept:
        for p in moving:
            values = []
            for v in (p.lo * 1.2, min(p.hi, p.lo * 2.0)):
                t = table.with_overlay({p.family: {p.engine: {p.name: v}}})
                expected = loss(affected(p, data, FITTED_LEVELS), t)
                assert kept.loss(p, t) == expected and kept.loss(p, t) == expected, p.name
                values.append(expected)
            differ += values[0] != values[1]
    assert differ == len(moving)
