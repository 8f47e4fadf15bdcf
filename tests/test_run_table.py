"""The per-run table of `tokensim validate --serving --runs FILE.csv` (validate/run_table.py)."""
import csv
import math
from types import SimpleNamespace

import pytest

from tokensim.validate.run_table import COLUMNS, run_rows, write_runs


def _result(run_id, ttft_m, ttft_s, tpot_m, tpot_s):
    run = SimpleNamespace(id=run_id, system="h200", engine="vllm", engine_version=None, model="llama-3.1-8b",
                          harness="inferencex", mode="agg", weights="fp8", concurrency=16, isl=1024, osl=1024,
                          ttft_s=ttft_m, tpot_s=tpot_m)
    case = SimpleNamespace(run=run, deployment=SimpleNamespace(tp=2, attn_dp=1, ep=1), running_per_rank=16.0,
                           pair=("h200", "vllm"))
    return SimpleNamespace(case=case, ttft_s=ttft_s, tpot_s=tpot_s, ttft_error=ttft_s / ttft_m - 1,
                           tpot_error=tpot_s / tpot_m - 1)


def test_each_run_gets_its_figures_errors_and_constants_and_the_file_reads_back(tmp_path):
    # run a: TTFT 0.25 s simulated against 0.20 measured -> +25 %; TPOT 9 ms against 10 ms -> -10 %;
    # steady-state TPOT 11 ms -> +10 %. Run b: no finite simulated TTFT and no steady estimate -> empty cells.
    rows = run_rows([_result("a", 0.20, 0.25, 0.010, 0.009), _result("b", 0.30, math.nan, 0.020, 0.020)],
                    {"a": 0.011}, {("h200", "vllm"): "fitted without h200 / vllm"})
    path = write_runs(tmp_path / "runs.csv", rows)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        back = list(reader)
    a, b = back
    assert float(a["ttft_error"]) == pytest.approx(0.25)
    assert float(a["tpot_error"]) == pytest.approx(-0.10)
    assert float(a["steady_tpot_error"]) == pytest.approx(0.10)
    assert a["constants"] == "fitted without h200 / vllm" and a["engine_version"] == "" and a["tp"] == "2"
    assert b["simulated_ttft_s"] == b["ttft_error"] == b["steady_tpot_s"] == b["steady_tpot_error"] == ""
    assert float(b["tpot_error"]) == 0.0


def test_validate_serving_lists_every_simulated_run_with_the_held_out_constants():
    """`tokensim validate --serving` (JSON `runs`, and --runs FILE): one line per simulated run, each judged by the
    constants fitted without its own (system, engine) pair, its errors those the medians are taken over."""
    from tokensim.cli_serving import validate_serving
    from tokensim.output.progress import progress_bar

    load = validate_serving(3, progress_bar, enabled=False)
    runs = load["runs"]
    assert len(runs) == load["silicon_simulated"]["simulated"] >= 2
    for r in runs:
        assert r["constants"] == f"fitted without {r['system']} / {r['engine']}"
        assert r["ttft_error"] == pytest.approx(r["simulated_ttft_s"] / r["measured_ttft_s"] - 1)
        assert r["steady_tpot_error"] == pytest.approx(r["steady_tpot_s"] / r["measured_tpot_s"] - 1)
    errors = sorted(abs(r["ttft_error"]) for r in runs)
    assert load["silicon_simulated"]["ttft"]["median_abs_error"] == pytest.approx(float(
        (errors[(len(errors) - 1) // 2] + errors[len(errors) // 2]) / 2))
