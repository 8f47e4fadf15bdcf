"""The spread between measurements of one stated configuration (validate/repeats.py)."""
import pytest

from tokensim.validate.repeats import pair_differences


def test_pairs_of_differing_runs_give_the_larger_over_the_smaller_and_copies_are_counted_apart():
    # key a: 1.0, 1.0, 1.2 -> pairs (1.0, 1.0) identical, (1.0, 1.2) twice: 1.2 / 1.0 - 1 = 0.2 each
    # key b: one run, no pair; key c: 3.0 and 1.5 -> 3.0 / 1.5 - 1 = 1.0 (the order of the runs does not matter)
    runs = [("a", 1.0), ("a", 1.0), ("a", 1.2), ("b", 7.0), ("c", 3.0), ("c", 1.5)]
    differences, identical = pair_differences(runs)
    assert sorted(differences) == pytest.approx([0.2, 0.2, 1.0])
    assert identical == 1


def test_the_shipped_runs_measured_twice_differ_by_a_few_percent_at_the_median():
    """silicon_dev.csv: hundreds of configurations are measured more than once; where two runs differ, the median gap
    is a few percent and the tail wide (a bound on any model's error, not a figure to fit)."""
    from tokensim.validate.fit_report import serving_cases
    from tokensim.validate.repeats import repeat_spread
    spread = repeat_spread(serving_cases(None))
    assert spread["configurations"] > 100 and spread["runs"] > 2 * spread["configurations"] - 1
    for metric in ("ttft", "tpot"):
        st = spread[metric]
        assert st["rows"] > 100
        assert 0.01 < st["median_abs_error"] < 0.2 < st["p90_abs_error"]


def test_validate_serving_reports_the_floor_beside_the_errors():
    """`tokensim validate --serving` carries the spread (JSON) and prints it as two rows of its first table."""
    import io

    from rich.console import Console

    from tokensim.cli_serving import print_serving_validation, validate_serving
    from tokensim.output.progress import progress_bar
    from tokensim.validate.fit_report import serving_cases
    from tokensim.validate.repeats import repeat_spread
    load = validate_serving(2, progress_bar, enabled=False)
    assert load["silicon_repeats"] == repeat_spread(serving_cases(None))
    buffer = io.StringIO()
    print_serving_validation(load, Console(file=buffer, width=250))
    assert "TTFT, one configuration measured twice" in buffer.getvalue()
    assert "TPOT, one configuration measured twice" in buffer.getvalue()
