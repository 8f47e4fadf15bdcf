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


def _result(model, clients, attn_dp, ttft_error, tpot_error):
    case = SimpleNamespace(concurrency=clients, deployment=SimpleNamespace(attn_dp=attn_dp),
                           run=SimpleNamespace(model=model))
    return SimpleNamespace(case=case, ttft_error=ttft_error, tpot_error=tpot_error)


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
