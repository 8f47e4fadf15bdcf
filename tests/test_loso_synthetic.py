"""Leave-one-source-out on a synthetic data set whose answers are known (issue 10).

Rows are made from tokensim's own predictions with known constants: default-engine rows at an HBM fraction of
0.6 from sources A and B, llama.cpp rows at 0.3 from source C. In sample the fit explains every row. Left out,
A is predicted from B (same constants: near zero error), but C is the only source of the llama.cpp constant, so
without it that constant falls back to its prior (constants.toml / the engine profile: 0.45), never to the
value fitted on C, and C's rows are off by what the prior predicts, computed here directly."""
import csv
import math

import pytest

import tokensim
from tokensim.perf.constants import default_table
from tokensim.validate.fit_report import run_fit

COLUMNS = ("id", "provider_or_engine", "hardware", "n_chips", "model", "total_params_B", "active_params_B",
           "weight_precision", "kv_precision", "batch_or_concurrency", "input_tokens", "output_tokens", "spec_decode",
           "metric", "value", "source_url", "source_date", "notes")
ROWS = [  # id, engine, model, batch, source, true constants
    ("a1", "gpt-fast", "llama-3.1-8b", 1, "https://a.example/post", 0.6),
    ("a2", "gpt-fast", "llama-3.1-70b", 1, "https://a.example/post", 0.6),
    ("b1", "gpt-fast", "llama-3.1-8b", 8, "https://b.example/table", 0.6),     # other figures than A's: rows that
    ("b2", "gpt-fast", "llama-3.1-70b", 8, "https://b.example/table", 0.6),    # repeat a figure count as one source
    ("c1", "llama.cpp", "llama-3.1-8b", 1, "https://c.example/bench", 0.3),
    ("c2", "llama.cpp", "llama-3.1-70b", 1, "https://c.example/bench", 0.3),
]
PRIOR_LLAMACPP = 0.45          # data/engines/llamacpp.toml [constants] hbm_bandwidth_fraction


def _speed(model: str, engine: str, table, batch: int = 1) -> float:
    tp = 1 if model.endswith("8b") else 4
    return tokensim.predict(model, "h100-sxm", tp=tp, batch=batch, input_tokens=1000, output_tokens=1000, engine=engine,
                            constants=table).tokens_per_s_per_user


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    base = default_table().without_fitted()
    path = tmp_path_factory.mktemp("loso") / "rows.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for rid, provider, model, batch, url, bw in ROWS:
            engine = "llamacpp" if provider == "llama.cpp" else "default"
            table = base.with_overlay({"default": {engine: {"hbm_bandwidth_fraction": bw}}})
            n = 1 if model.endswith("8b") else 4
            w.writerow([rid, provider, "H100 SXM", n, model, "", "", "bf16", "bf16", batch, 1000, 1000, "none",
                        "output_tps_per_user", f"{_speed(model, engine, table, batch):.6g}", url, "2026-01-01", "synthetic"])
    out = tmp_path_factory.mktemp("loso") / "fitted.toml"
    return run_fit(path, out, loso=True, silicon_path=False), base


def test_in_sample_fit_explains_rows_made_by_the_model(fitted):
    report, _ = fitted
    assert report["rows"] == len(ROWS)
    assert report["in_sample"]["median_abs_error"] < 0.02


def test_left_out_source_with_its_twin_left_in_is_predicted(fitted):
    report, _ = fitted
    out = {r["id"]: r["log_ratio_out_of_sample"] for r in report["residuals"]}
    for rid in ("a1", "a2", "b1", "b2"):
        assert abs(out[rid]) < 0.03, rid


def test_a_constant_without_training_rows_falls_back_to_its_prior(fitted):
    """C's rows held out: the llama.cpp constant has no rows left and takes its prior 0.45, so C's predictions
    are those of the prior, not of the 0.3 fitted on C itself."""
    report, base = fitted
    out = {r["id"]: r["log_ratio_out_of_sample"] for r in report["residuals"]}
    values = report["values"]
    for rid, model in (("c1", "llama-3.1-8b"), ("c2", "llama-3.1-70b")):
        default = {k.split(".")[-1]: v for k, v in values.items() if k.startswith("default.default.")}
        prior = base.with_overlay({"default": {"default": default, "llamacpp": {"hbm_bandwidth_fraction": PRIOR_LLAMACPP}}})
        truth = base.with_overlay({"default": {"llamacpp": {"hbm_bandwidth_fraction": 0.3}}})
        expected = math.log(_speed(model, "llamacpp", prior) / _speed(model, "llamacpp", truth))
        assert out[rid] == pytest.approx(expected, abs=0.03), rid
        assert expected > 0.2            # the prior is far from the truth: a leak would have shown as ~0
