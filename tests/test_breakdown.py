"""The simulator's errors grouped by load regime and model (issue 11, item 5: error reports by batch regime)."""
import math
from types import SimpleNamespace

import pytest

from tokensim.validate.breakdown import LOAD_REGIMES, group_errors, load_regime, simulated_breakdown


@pytest.mark.parametrize(("clients", "regime"), [(1, "1-4 clients"), (4, "1-4 clients"), (4.5, "5-32 clients"),
                                                 (32, "5-32 clients"), (33, "33-128 clients"),
                                                 (128, "33-128 clients"), (129, "over 128 clients"),
                                                 (5632, "over 128 clients")])
def test_each_count_of_clients_falls_in_the_regime_whose_bounds_hold_it(clients, regime):
    """Bounds are inclusive at the top: 4 clients are light load (the light-load TTFT rule's <= 4)."""
    assert load_regime(clients) == regime


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf])
def test_a_count_that_is_not_a_positive_finite_number_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="clients_per_rank"):
        load_regime(bad)


def test_group_statistics_are_the_medians_and_p90_of_the_errors_of_each_group():
    """Hand calculation: group a has TTFT errors +10 %, -30 %, +20 % -> |e| 0.1, 0.3, 0.2, median 0.2, signed median
    +0.1; numpy's linear p90 of |e| (0.1, 0.2, 0.3) = 0.2 + 0.8 x 0.1 = 0.28. Group b has one run; a NaN (a run
    the simulator could not lay out) counts in no statistic."""
    out = group_errors(["a", "b", "a", "a", "b"], [0.1, -0.5, -0.3, 0.2, math.nan], [0.0, 0.05, -0.1, 0.1, math.nan])
    assert list(out) == ["a", "b"]
    a = out["a"]["ttft"]
    assert a["rows"] == 3
    assert a["median_abs_error"] == pytest.approx(0.2)
    assert a["median_signed_error"] == pytest.approx(0.1)
    assert a["p90_abs_error"] == pytest.approx(0.28)
    assert out["a"]["tpot"]["median_abs_error"] == pytest.approx(0.1)
    assert out["b"]["ttft"] == {"rows": 1, "median_abs_error": pytest.approx(0.5), "p90_abs_error": pytest.approx(0.5),
                                "median_signed_error": pytest.approx(-0.5)}


def test_lengths_that_differ_are_refused():
    with pytest.raises(ValueError, match="lengths 2, 1, 2"):
        group_errors(["a", "b"], [0.1], [0.1, 0.2])


def _result(model, clients, attn_dp, ttft_error, tpot_error, isl=1024):
    layout = SimpleNamespace(attn_dp=attn_dp, tp=1, pp=1, ep=1, weights="fp8", expert_weights=None, kv="fp8")
    run = SimpleNamespace(model=model, system="h100-sxm", engine="vllm", harness="inferencex", isl=isl, osl=1024)
    case = SimpleNamespace(concurrency=clients, deployment=layout, run=run, prefill_in_decode=True)
    return SimpleNamespace(case=case, ttft_error=ttft_error, tpot_error=tpot_error)


def test_error_splits_into_each_configurations_level_and_its_change_with_load():
    """Hand calculation. Configuration A at three loads: predicted / measured 2, 2, 2.2 (errors +100, +100, +120 %);
    its level is the median, 2, so what changes with load is 1, 1, 1.1 (0, 0, 10 %). Configuration C: 0.5, 1.0, 0.8,
    level 0.8, left 0.625, 1.25, 1 (37.5, 25, 0 %). Configuration B has two loads only and counts in neither. As they
    are, the six |errors| 1, 1, 1.2, 0.5, 0, 0.2 have median 0.75; with the levels out, 0, 0, 0.1, 0.375, 0.25, 0 have
    median 0.05. A run without a finite error is left out."""
    ttft = {"A": [1.0, 1.0, 1.2], "B": [0.3, -0.3], "C": [-0.5, 0.0, -0.2, math.nan]}
    results = [_result("m", 4 * (i + 1), 1, e, 0.0, isl=isl) for isl, key in ((1024, "A"), (2048, "B"), (4096, "C"))
               for i, e in enumerate(ttft[key])]
    out = simulated_breakdown(results)["level_and_load"]["ttft"]
    assert (out["configurations"], out["runs"]) == (2, 6)
    assert out["as_is_median_abs_error"] == pytest.approx(0.75)
    assert out["load_only_median_abs_error"] == pytest.approx(0.05)
    tpot = simulated_breakdown(results)["level_and_load"]["tpot"]
    assert tpot["load_only_median_abs_error"] == 0.0 and tpot["runs"] == 7     # C's fourth run has a finite TPOT


def test_breakdown_counts_every_run_once_per_grouping_and_orders_regimes_by_load():
    """256 clients over 8 attention ranks are 32 per rank: a partly filled batch, not over 128."""
    results = [_result("m2", 256, 8, 0.1, 0.0), _result("m1", 2, 1, -0.2, 0.1), _result("m1", 200, 1, 0.3, -0.1),
               _result("m2", 64, 1, 0.0, 0.2)]
    out = simulated_breakdown(results)
    assert list(out["by_load"]) == ["1-4 clients", "5-32 clients", "33-128 clients", "over 128 clients"]
    assert out["by_load"]["5-32 clients"]["ttft"]["rows"] == 1
    assert out["by_load"]["5-32 clients"]["ttft"]["median_signed_error"] == pytest.approx(0.1)
    assert list(out["by_model"]) == ["m1", "m2"]
    assert sum(g["ttft"]["rows"] for g in out["by_load"].values()) == len(results)
    assert sum(g["tpot"]["rows"] for g in out["by_model"].values()) == len(results)
    assert [name for _, name in LOAD_REGIMES] == list(out["by_load"])


def test_validate_serving_simulates_the_same_runs_to_the_same_figures_in_one_process_or_two():
    """`tokensim validate --serving --workers 2` splits the sampled runs by (system, engine) pair over processes: each
    pair's runs keep their held-out constants, so every run's simulated TTFT and TPOT are bit-identical."""
    from tokensim.cli_serving import _simulate_pair
    from tokensim.validate.fit_report import pair_name, pair_tables, pool_map
    from tokensim.validate.load import sample_cases, shipped_silicon_cases

    tables = pair_tables()
    chosen = sample_cases(shipped_silicon_cases(), 2)[:4]          # one run each of the first pairs
    tasks = [([c], tables[pair_name(*c.pair)]) for c in chosen]
    one = pool_map(_simulate_pair, tasks, None, 1)
    two = pool_map(_simulate_pair, tasks, None, 2)
    flat = [(r.case.run.id, r.ttft_s, r.tpot_s) for batch in one for r in batch]
    assert len(flat) == len(chosen)
    assert flat == [(r.case.run.id, r.ttft_s, r.tpot_s) for batch in two for r in batch]


def test_the_readme_script_writes_each_groups_run_count_and_signed_median():
    """scripts/validation_report.py turns the same groups into the README's tables: one line per group with its run
    count, median |error| and signed median (m1: TTFT errors -0.2 and +0.3: median |e| 25 %, signed +5 %)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "validation_report.py"
    spec = importlib.util.spec_from_file_location("validation_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = [_result("m1", 2, 1, -0.2, 0.1), _result("m1", 200, 1, 0.3, -0.1), _result("m2", 64, 1, 0.0, 0.2)]
    lines = module.breakdown_lines(simulated_breakdown(results))
    assert "| m1 | 2 | 25.0% (+5%) | 10.0% (+0%) |" in lines
    assert "| m2 | 1 | 0.0% (+0%) | 20.0% (+20%) |" in lines
    assert "| over 128 clients | 1 | 30.0% (+30%) | 10.0% (-10%) |" in lines
    # a group whose only run has no finite TTFT still counts that run, with a dash for TTFT
    lines = module.breakdown_lines(simulated_breakdown([_result("m3", 2, 1, float("nan"), 0.05)]))
    assert "| m3 | 1 | - | 5.0% (+5%) |" in lines
    assert simulated_breakdown([_result("m3", 2, 1, float("nan"), 0.05)])["by_model"]["m3"]["runs"] == 1


def test_the_readme_script_states_the_level_and_load_split():
    """The README's sentence carries the split's counts and both medians (the hand-calculated case above: 75 % as the
    runs are, 5 % with each configuration's level out)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "validation_report.py"
    spec = importlib.util.spec_from_file_location("validation_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ttft = {"A": [1.0, 1.0, 1.2], "C": [-0.5, 0.0, -0.2]}
    results = [_result("m", 4 * (i + 1), 1, e, 0.1, isl=isl) for isl, key in ((1024, "A"), (4096, "C"))
               for i, e in enumerate(ttft[key])]
    text = " ".join(module.level_lines(simulated_breakdown(results)))
    assert "2 configurations" in text and "(6 runs)" in text
    assert "a median 75.0% as the runs are and 5.0% once" in text
    assert "TPOT 10.0% and 0.0%" in text
