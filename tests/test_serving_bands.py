"""Ranges under load: the percentiles `tokensim fit` stores of the simulator's out-of-sample error on measured serving
runs, the range a simulated mean gets from them, how often such a range held for a pair it never saw, and the range
`tokensim simulate` prints. Every expected value is worked by hand in the test."""
import json
import math
import tomllib

import pytest
from typer.testing import CliRunner

from tokensim.cli import app
from tokensim.validate import uncertainty
from tokensim.validate.fit import PARAMS
from tokensim.validate.fit_report import write_fitted
from tokensim.validate.uncertainty import serving_band, serving_coverage, serving_quantiles, stretch_for


def test_quantiles_group_by_family_and_engine_then_family_then_engine_and_skip_nan():
    r = [0.0, 0.1, 0.2, 0.3, math.nan, -0.4]
    fam = ["nvidia-hopper"] * 4 + ["nvidia-hopper", "nvidia-blackwell"]
    eng = ["vllm"] * 5 + ["sglang"]
    bands = {(b["metric"], b["family"], b["engine"]): b for b in serving_quantiles("ttft_s", r, fam, eng)}
    assert set(bands) == {("ttft_s", "nvidia-hopper", "vllm"), ("ttft_s", "nvidia-hopper", "any"),
                          ("ttft_s", "any", "vllm"), ("ttft_s", "nvidia-blackwell", "sglang"),
                          ("ttft_s", "nvidia-blackwell", "any"), ("ttft_s", "any", "sglang")}
    hv = bands["ttft_s", "nvidia-hopper", "vllm"]
    # four finite values 0, 0.1, 0.2, 0.3 (the nan is left out): q50 at position 1.5 -> 0.15; q10 at 0.3 -> 0.03
    assert hv["rows"] == 4
    assert hv["q50"] == pytest.approx(0.15) and hv["q10"] == pytest.approx(0.03) and hv["q90"] == pytest.approx(0.27)
    assert bands["ttft_s", "any", "sglang"]["rows"] == 1 and bands["ttft_s", "any", "sglang"]["q50"] == -0.4


BANDS = [
    {"metric": "ttft_s", "family": "nvidia-hopper", "engine": "vllm", "rows": 5, "q10": -1.0, "q50": 0.0, "q90": 1.0},
    {"metric": "ttft_s", "family": "nvidia-hopper", "engine": "any", "rows": 6, "q10": -1.0, "q50": 0.0, "q90": 1.0},
    {"metric": "ttft_s", "family": "any", "engine": "vllm", "rows": 20, "q10": -0.2, "q50": 0.0, "q90": 0.3},
    {"metric": "ttft_s", "family": "nvidia-blackwell", "engine": "any", "rows": 100, "q10": -0.5, "q50": 0.1,
     "q90": 0.5},
]


def test_band_takes_the_most_specific_group_with_enough_runs():
    # (nvidia-hopper, vllm) has 5 runs and Hopper under any engine 6 (< MIN_ROWS = 8): the engine's 20 runs over
    # every family stand. Widened x(1 + 2/20) = 1.1 around q50 = 0: lo = -0.22, hi = 0.33; measured = simulated x
    # exp(-r)
    b = serving_band("ttft_s", "nvidia-hopper", "vllm", 0.5, BANDS, stretch=1.0)
    assert b.rows == 20 and "vllm on any hardware" in b.note
    assert b.estimate == pytest.approx(0.5)
    assert b.low == pytest.approx(0.5 * math.exp(-0.33)) and b.high == pytest.approx(0.5 * math.exp(0.22))
    # an engine with no runs on a family with some: the family's runs, widened x1.02 around q50 = 0.1:
    # lo = 0.1 - 0.6 x 1.02, hi = 0.1 + 0.4 x 1.02
    b = serving_band("ttft_s", "nvidia-blackwell", "trtllm", 1.0, BANDS, stretch=1.0)
    assert b.rows == 100 and b.estimate == pytest.approx(math.exp(-0.1)) and "under any engine" in b.note
    assert b.low == pytest.approx(math.exp(-(0.1 + 0.4 * 1.02))) and b.high == pytest.approx(math.exp(0.6 * 1.02 - 0.1))
    # a wafer under its own stack: no measured run shares either, so no range (a GPU's errors are not a wafer's)
    assert serving_band("ttft_s", "cerebras-wafer", "default", 1.0, BANDS) is None


def test_the_shipped_stretch_is_read_from_the_fitted_constants():
    # `tokensim fit` stores one per metric; the printed range uses it when none is given
    k = uncertainty.serving_band_stretch("ttft_s")
    assert 1.0 <= k <= 3.0
    b = serving_band("ttft_s", "nvidia-hopper", "vllm", 1.0, BANDS)
    assert b.high == pytest.approx(math.exp(0.2 * 1.1 * k))


def test_no_band_without_stored_bands_or_for_another_metric():
    assert serving_band("tpot_s", "nvidia-hopper", "vllm", 0.01, BANDS) is None
    assert serving_band("ttft_s", "nvidia-hopper", "vllm", 0.01, []) is None
    with pytest.raises(ValueError):
        serving_band("e2e_s", "nvidia-hopper", "vllm", 0.01, BANDS)


def test_coverage_judges_each_pair_with_bands_built_without_it():
    # two pairs, the same ten errors 0, 0.1, ..., 0.9 each. Left out, a pair meets the other's ten: q10 = 0.09,
    # q50 = 0.45, q90 = 0.81, widened x1.2: [0.45 - 0.36 x 1.2, 0.45 + 0.36 x 1.2] = [0.018, 0.882], which holds
    # 0.1 .. 0.8 (8 of 10) of its own runs
    r = [i / 10 for i in range(10)] * 2
    pairs = [("h100-sxm", "vllm")] * 10 + [("h200", "vllm")] * 10
    assert serving_coverage("ttft_s", r, ["nvidia-hopper"] * 20, ["vllm"] * 20, pairs) == pytest.approx(0.8)
    # one pair runs a factor e too slow where the other is exact: neither range holds the other's runs
    r = [0.0] * 10 + [1.0] * 10
    assert serving_coverage("ttft_s", r, ["nvidia-hopper"] * 20, ["vllm"] * 20, pairs) == 0.0


def test_a_stretch_covers_a_pair_whose_runs_share_an_offset():
    """Pairs A and B err 0, 0.1, ..., 0.9 each, pair C 0.5 .. 1.4. Without C, A and B's 20 runs give q10 0.09, q50 0.45,
    q90 0.81, widened x(1 + 2/20) = 1.1: C is inside up to 0.45 + 0.396 k. Without A, B and C give q10 0.19, q50 0.7,
    q90 1.21: A is inside from 0.7 - 0.561 k (B likewise). At k = 1: C 4, A 8, B 8 of 30 (0.667); at 1.2: 5 + 9 + 9 =
    23 (0.767); at 1.25: 5 + 10 + 10 = 25 (0.833), the first stretch to reach 0.8."""
    r = [i / 10 for i in range(10)] * 2 + [0.5 + i / 10 for i in range(10)]
    fam, eng = ["nvidia-hopper"] * 30, ["vllm"] * 30
    pairs = [("h100-sxm", "vllm")] * 10 + [("h200", "vllm")] * 10 + [("b200", "vllm")] * 10
    assert stretch_for("ttft_s", r, fam, eng, pairs) == 1.25
    assert serving_coverage("ttft_s", r, fam, eng, pairs, stretched=False) == pytest.approx(20 / 30)
    # out of sample for the stretch as well: A's stretch is chosen from B judged by C alone and C by B alone (10 runs,
    # x1.2): B inside from 0.95 - 0.432 k, C up to 0.45 + 0.432 k, 16 of 20 first at k = 1.75, where A's own runs all
    # fall in [0.7 - 0.98, 0.7 + 0.98] (B likewise). C's stretch, from A and B judged by each other, is 1 (8 + 8 of
    # 20), where C keeps 4 of 10: (10 + 10 + 4) / 30
    assert serving_coverage("ttft_s", r, fam, eng, pairs) == pytest.approx(24 / 30)
    # a stored stretch widens the printed range about its median: x1.25 on the engine's 20 runs of BANDS
    b = serving_band("ttft_s", "nvidia-hopper", "vllm", 1.0, BANDS, stretch=1.25)
    assert b.high == pytest.approx(math.exp(0.2 * 1.1 * 1.25)) and "stretched x1.25" in b.note


def test_fit_writes_the_bands_and_their_coverage(tmp_path):
    report = {"date": "2026-12-07", "rows": 0, "fitted_constants": 0, "objective": "x", "in_sample": None,
              "residuals": [], "serving": {"rows": 3, "light_rows": 0, "held_out": {}, "bands": BANDS[1:],
                                           "bands_coverage_80": {"ttft_s": 0.7, "tpot_s": 0.75},
                                           "bands_stretch": {"ttft_s": 1.25, "tpot_s": 1.3},
                                           **{k: {"metric": k, "in_sample": None, "leave_one_pair_out": None,
                                                  "leave_one_pair_out_by_system_engine": {}}
                                              for k in ("tpot", "ttft_light", "simulated_ttft", "simulated_tpot")}}}
    path = tmp_path / "fitted.toml"
    write_fitted(path, {PARAMS[0]: 0.5}, report)
    read = tomllib.loads(path.read_text())["serving"]
    assert read["bands_coverage_80_ttft"] == 0.7 and read["bands_coverage_80_tpot"] == 0.75
    assert read["bands_stretch_ttft"] == 1.25 and read["bands_stretch_tpot"] == 1.3
    assert read["bands"] == BANDS[1:]


def test_simulate_prints_and_returns_the_range_of_a_measured_mean(monkeypatch):
    bands = [{**b, "metric": m} for b in BANDS for m in ("ttft_s", "tpot_s")]
    monkeypatch.setattr(uncertainty, "shipped_serving_bands", lambda: bands)
    monkeypatch.setattr(uncertainty, "serving_band_coverage", lambda metric: 0.7)
    monkeypatch.setattr(uncertainty, "serving_band_stretch", lambda metric: 1.0)
    args = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--concurrency", "4", "--requests", "20"]
    out = CliRunner().invoke(app, args + ["--json"])
    assert out.exit_code == 0, out.output
    s = json.loads(out.stdout)
    got = s["measured_range"]["ttft_s_mean"]
    mean = s["ttft_s"]["mean"]
    # vllm on nvidia-hopper: the engine's 20 runs (see above): [mean x exp(-0.33), mean x exp(0.22)]
    assert got["low"] == pytest.approx(mean * math.exp(-0.33)) and got["high"] == pytest.approx(mean * math.exp(0.22))
    assert got["runs"] == 20 and got["coverage_pair_left_out"] == 0.7
    text = " ".join(CliRunner().invoke(app, args).stdout.split())       # the console wraps long lines at 150 columns
    assert "80 % range of a benchmark's measured mean" in text and "held TTFT 70%" in text


def test_simulate_without_stored_bands_says_nothing_of_a_range(monkeypatch):
    monkeypatch.setattr(uncertainty, "shipped_serving_bands", lambda: [])
    args = ["simulate", "--model", "llama-3.1-8b", "--concurrency", "2", "--requests", "5"]
    out = CliRunner().invoke(app, args + ["--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["measured_range"] is None
    assert "range" not in CliRunner().invoke(app, args).stdout


def test_simulate_says_when_no_measured_run_shares_the_chip_or_the_engine(monkeypatch):
    monkeypatch.setattr(uncertainty, "shipped_serving_bands", lambda: BANDS)
    args = ["simulate", "--model", "llama-3.1-8b", "--hardware", "mi300x", "--engine", "sglang", "--concurrency", "2",
            "--requests", "5"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "no measured serving run shares this chip family (amd-cdna3) or engine (sglang)" in " ".join(out.stdout.split())
