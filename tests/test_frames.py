"""Results as pandas DataFrames: a prediction is one row (or its breakdown, one row per op), a plan every evaluated
deployment, validation one row per measurement; without pandas the error says how to get it."""
import sys

import pytest

import tokensim
from tokensim.output.frames import to_pandas

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def prediction():
    return tokensim.predict("llama-3.1-70b", "h200", tp=2, batch=16, weights="fp8")


def test_a_prediction_is_one_row_with_units_in_the_names(prediction):
    frame = to_pandas(prediction)
    assert len(frame) == 1
    row = frame.iloc[0]
    assert row["tokens_per_s_per_user"] == prediction.tokens_per_s_per_user
    assert row["ttft_s"] == prediction.ttft_s and row["memory_per_chip_bytes"] == prediction.memory_per_chip_bytes
    assert row["deployment.tp"] == 2 and row["deployment.weights"] == "fp8" and row["model"] == prediction.model
    lo, hi = prediction.tokens_per_s_per_user_range
    assert (row["tokens_per_s_per_user_p10"], row["tokens_per_s_per_user_p90"]) == (lo, hi)
    assert "breakdown" not in frame.columns and "prefill_breakdown" not in frame.columns


def test_the_breakdown_is_one_row_per_op_with_shares_per_phase(prediction):
    frame = to_pandas(prediction, breakdown=True)
    assert len(frame) == len(prediction.breakdown) + len(prediction.prefill_breakdown)
    decode = frame[frame["phase"] == "decode"]
    assert list(decode["name"]) == [op.name for op in prediction.breakdown]
    assert decode["time_s"].sum() == pytest.approx(sum(op.time_s for op in prediction.breakdown))
    for _, ops in frame.groupby("phase"):
        assert ops["share"].sum() == pytest.approx(1.0)


def test_a_list_of_predictions_is_one_row_each(prediction):
    other = tokensim.predict("llama-3.1-8b", "h100-sxm")
    frame = to_pandas([prediction, other])
    assert list(frame["model"]) == [prediction.model, other.model]
    ops = to_pandas([prediction, other], breakdown=True)
    assert set(ops["prediction"]) == {0, 1}


def test_a_plan_is_every_evaluated_deployment():
    from tokensim.plan.search import PlanRequest, plan

    r = plan(PlanRequest(tokensim.load_model("llama-3.1-8b"), (tokensim.load_hardware("h100-sxm"),), max_chips=4))
    frame = to_pandas(r)
    assert len(frame) == r.evaluated
    assert frame["feasible"].sum() == int(r.feasible.sum())
    assert sorted(frame.index[frame["front"]]) == sorted(r.front.tolist())
    assert list(frame.index[frame["best"]]) == [r.best]
    best = frame.loc[r.best]
    assert best["tokens_per_s_per_user"] == pytest.approx(r.point(r.best)["tokens_per_s_per_user"])
    assert best["hardware"] == "h100-sxm" and isinstance(best["weights"], str)


def test_validation_results_are_one_row_per_measurement():
    from tokensim.validate.run import shipped_measurements, validate

    results, _ = validate(shipped_measurements())
    frame = to_pandas(results)
    assert len(frame) == len(results)
    modelled = frame[frame["skipped_reason"].isna()]
    assert len(modelled) == sum(r.predicted is not None for r in results)
    first = next(r for r in results if r.predicted is not None)
    row = frame.set_index("id").loc[first.row.id]
    assert row["predicted"] == first.predicted and row["error"] == pytest.approx(first.error)
    assert row["measured"] == first.row.value and row["family"] == first.family
    skipped = frame[frame["predicted"].isna()]
    assert skipped["skipped_reason"].map(lambda s: isinstance(s, str) and len(s) > 0).all()
    assert len(to_pandas(results[0])) == 1


def test_something_else_is_a_type_error():
    with pytest.raises(TypeError, match="expected a Prediction"):
        to_pandas({"tokens_per_s_per_user": 1.0})
    with pytest.raises(TypeError, match="empty"):
        to_pandas([])


def test_without_pandas_the_error_says_how_to_install_it(prediction, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)           # `import pandas` now raises ImportError
    with pytest.raises(ImportError, match="pip install pandas"):
        to_pandas(prediction)

