"""One line per simulated serving run: what was measured, what tokensim predicts and with which constants.

`tokensim validate --serving --runs FILE.csv` writes it, so that a user can find where the errors lie (by layout,
lengths, load, harness) rather than read only the medians. Each line is a run of the sample the command simulated
(all of them with `--sample 0`); its steady-state TPOT estimate is the one the fit prices. Errors are predicted /
measured - 1 (positive: predicted slower for TTFT and TPOT).
"""
from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from tokensim.output.files import atomic_open

COLUMNS = ("id", "system", "engine", "engine_version", "model", "harness", "mode", "weights", "tp", "attn_dp", "ep",
           "concurrency", "clients_per_rank", "isl", "osl", "constants", "measured_ttft_s", "simulated_ttft_s",
           "ttft_error", "measured_tpot_s", "simulated_tpot_s", "tpot_error", "steady_tpot_s", "steady_tpot_error")


def _num(x: float | None) -> float | str:
    """A figure as the CSV holds it: '' where there is none (not a number, or not predicted)."""
    return "" if x is None or not math.isfinite(x) else float(x)


def run_rows(simulated: Iterable, steady_tpot_s: Mapping[str, float], constants_of: Mapping[tuple, str]) -> list[dict]:
    """The lines for these simulated runs (`validate.load.LoadResult`s); `steady_tpot_s`: run id -> the steady-state
    TPOT estimate; `constants_of`: (system, engine) -> which constants judged that pair's runs."""
    rows = []
    for r in simulated:
        c, run, d = r.case, r.case.run, r.case.deployment
        steady = steady_tpot_s.get(run.id)
        rows.append({
            "id": run.id, "system": run.system, "engine": run.engine, "engine_version": run.engine_version or "",
            "model": run.model, "harness": run.harness or "", "mode": run.mode, "weights": run.weights or "",
            "tp": d.tp, "attn_dp": d.attn_dp, "ep": d.ep, "concurrency": run.concurrency,
            "clients_per_rank": round(c.running_per_rank, 3), "isl": run.isl, "osl": run.osl,
            "constants": constants_of.get(c.pair, ""),
            "measured_ttft_s": run.ttft_s, "simulated_ttft_s": _num(r.ttft_s), "ttft_error": _num(r.ttft_error),
            "measured_tpot_s": run.tpot_s, "simulated_tpot_s": _num(r.tpot_s), "tpot_error": _num(r.tpot_error),
            "steady_tpot_s": _num(steady),
            "steady_tpot_error": _num(None if steady is None else steady / run.tpot_s - 1),
        })
    return rows


def write_runs(path: str | Path, rows: list[dict], field: str = "--runs") -> Path:
    """The lines as a CSV with the COLUMNS header, written whole or not at all."""
    with atomic_open(path, "w", field, newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return Path(path)


__all__ = ["COLUMNS", "run_rows", "write_runs"]
