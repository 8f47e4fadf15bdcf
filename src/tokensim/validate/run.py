"""Predict every row of a measurements table and summarize the error honestly."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable
from tokensim.specs.hardware.catalog import catalog
from tokensim.stats import quantile
from tokensim.validate.evaluate import predict_case_at
from tokensim.validate.rules import Case, Skip, build_case
from tokensim.validate.table import Row, read_rows
from tokensim.validate.uncertainty import band, batch_regime, shipped_residuals


def shipped_measurements() -> Path:
    return Path(str(resources.files("tokensim") / "data" / "measurements.csv"))


@dataclass(frozen=True)
class Result:
    row: Row
    predicted: float | None = None
    assumptions: tuple[str, ...] = ()
    skipped_reason: str | None = None
    family: str = ""
    engine: str = "default"
    regime: str = ""
    predicted_range: tuple[float, float] | None = None   # 10th-90th percentile, built without this row's source group

    @property
    def error(self) -> float | None:
        """Signed relative error: predicted / measured - 1."""
        return None if self.predicted is None else self.predicted / self.row.value - 1.0

    def to_dict(self) -> dict:
        d = {"id": self.row.id, "metric": self.row.metric, "measured": self.row.value, "source_url": self.row.source_url}
        if self.skipped_reason:
            d["skipped_reason"] = self.skipped_reason
        else:
            d.update(predicted=self.predicted, error=self.error, family=self.family, engine=self.engine,
                     regime=self.regime, assumptions=list(self.assumptions),
                     predicted_range=list(self.predicted_range) if self.predicted_range else None,
                     inside_range=self.inside_range)
        return d

    def to_pandas(self):
        from tokensim.output.frames import to_pandas
        return to_pandas(self)

    @property
    def inside_range(self) -> bool | None:
        if self.predicted_range is None:
            return None
        return self.predicted_range[0] <= self.row.value <= self.predicted_range[1]


def evaluate_row(row: Row, constants: ConstantsTable | None = None) -> Result:
    try:
        case: Case = build_case(row)
    except Skip as exc:
        return Result(row, skipped_reason=str(exc))
    try:
        value, extra, batch = predict_case_at(case, constants)
    except TokensimError as exc:
        return Result(row, skipped_reason=f"scenario cannot be predicted: {exc}")
    family = catalog()[case.hardware].family
    regime = batch_regime(batch)
    group = _groups().get(row.id, "src:" + row.source_key)
    b = band(shipped_residuals(), family, case.deployment.engine, row.metric, regime, value, exclude_group=group)
    return Result(row, value, case.assumptions + extra, family=family, engine=case.deployment.engine, regime=regime,
                  predicted_range=(b.low, b.high))


def _groups() -> dict[str, str]:
    """Row id -> its source group, as the fit recorded it (rows sharing an origin are left out together)."""
    return {r.id: r.group for r in shipped_residuals()}


@dataclass(frozen=True)
class Summary:
    total: int
    modelled: int
    median_abs_error: float
    p90_abs_error: float
    median_signed_error: float
    by_family: dict = field(default_factory=dict)
    by_metric: dict = field(default_factory=dict)
    coverage_80: float = float("nan")      # share of rows whose measured value lies in its out-of-source 80 % range

    def to_dict(self) -> dict:
        return {"total": self.total, "modelled": self.modelled, "modelled_fraction": self.modelled / max(self.total, 1),
                "median_abs_error": self.median_abs_error, "p90_abs_error": self.p90_abs_error,
                "median_signed_error": self.median_signed_error, "coverage_80": self.coverage_80,
                "by_family": self.by_family, "by_metric": self.by_metric}


def _group(results: list[Result], key) -> dict:
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.error is not None:
            groups.setdefault(key(r), []).append(r.error)
    return {k: {"rows": len(v), "median_abs_error": statistics.median(abs(e) for e in v),
                "p90_abs_error": quantile([abs(e) for e in v], 0.9)} for k, v in sorted(groups.items())}


def summarize(results: list[Result]) -> Summary:
    errs = [r.error for r in results if r.error is not None]
    abs_errs = [abs(e) for e in errs]
    return Summary(
        total=len(results), modelled=len(errs),
        median_abs_error=statistics.median(abs_errs) if errs else float("nan"),
        p90_abs_error=quantile(abs_errs, 0.9), median_signed_error=statistics.median(errs) if errs else float("nan"),
        by_family=_group(results, lambda r: r.family), by_metric=_group(results, lambda r: r.row.metric),
        coverage_80=_coverage(results),
    )


def _coverage(results: list[Result]) -> float:
    inside = [r.inside_range for r in results if r.inside_range is not None]
    return sum(inside) / len(inside) if inside else float("nan")


def validate(path: str | Path | None = None, progress=None,
             constants: ConstantsTable | None = None) -> tuple[list[Result], Summary]:
    rows = read_rows(path or shipped_measurements())
    results = []
    for row in rows:
        results.append(evaluate_row(row, constants))
        if progress:
            progress()
    return results, summarize(results)
