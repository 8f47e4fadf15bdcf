"""Results as pandas DataFrames, for notebooks: a prediction (one row, or its per-op breakdown), a plan (every
evaluated deployment) and validation results (one row per measurement).

pandas is optional: it is imported on the first call, and its absence is an ImportError that says
`pip install pandas`. Column names keep the library's units (`ttft_s`, `memory_per_chip_bytes`); nested
fields are flattened with dots (`deployment.tp`) and a 10th-90th percentile range becomes two columns
(`ttft_s_p10`, `ttft_s_p90`).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

VALIDATION_COLUMNS = ("id", "metric", "measured", "predicted", "error", "family", "skipped_reason", "assumptions",
                      "source_url")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise ImportError("tokensim's to_pandas needs pandas, which is not installed: pip install pandas") from exc
    return pandas


def to_pandas(obj: Any, breakdown: bool = False) -> pd.DataFrame:
    """A DataFrame of `obj`:

    - a Prediction: one row of every scalar field (`breakdown=True`: one row per op instead, decode step
      then prefill, with the op's share of its phase);
    - a list of Predictions: one row each (`breakdown=True`: every op of every prediction, numbered);
    - a PlanResult: one row per evaluated deployment, with `feasible`, `front`, `cost_front` and `best` columns;
    - validation results (a validate.run.Result, or the list `validate` returns): one row per measurement.
    """
    from tokensim.plan.search import PlanResult
    from tokensim.prediction.predictor import Prediction
    from tokensim.validate.run import Result

    pd = _pandas()
    if isinstance(obj, Prediction):
        return pd.DataFrame(_breakdown_rows(obj) if breakdown else [prediction_row(obj)])
    if isinstance(obj, PlanResult):
        return _plan_frame(pd, obj)
    if isinstance(obj, Result):
        obj = [obj]
    items = list(obj) if isinstance(obj, (list, tuple)) else None
    if items and all(isinstance(x, Prediction) for x in items):
        if breakdown:
            return pd.DataFrame([dict(prediction=i, **row) for i, p in enumerate(items) for row in _breakdown_rows(p)])
        return pd.DataFrame([prediction_row(p) for p in items])
    if items and all(isinstance(x, Result) for x in items):
        return pd.DataFrame([_validation_row(r) for r in items])
    raise TypeError(f"to_pandas: expected a Prediction, a list of them, a PlanResult or validation results "
                    f"(validate.run.Result), got {type(obj).__name__}" + (" (empty)" if items == [] else ""))


def prediction_row(p: Any) -> dict[str, Any]:
    """The prediction's scalar fields as one flat dict (the row `to_pandas` makes)."""
    d = p.to_dict()
    for key in ("breakdown", "prefill_breakdown"):
        d.pop(key, None)
    return _flatten(d)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        elif key.endswith("_range") and isinstance(value, (list, tuple)) and len(value) == 2:
            base = name.removesuffix("_range")
            out[f"{base}_p10"], out[f"{base}_p90"] = value
        elif isinstance(value, tuple):
            out[name] = list(value)
        else:
            out[name] = value
    return out


def _breakdown_rows(p: Any) -> list[dict[str, Any]]:
    rows = []
    for phase, ops in (("decode", p.breakdown), ("prefill", p.prefill_breakdown)):
        total = sum(op.time_s for op in ops)
        for op in ops:
            rows.append({"phase": phase, **op.to_dict(), "share": op.time_s / total if total > 0 else float("nan")})
    return rows


def _plan_frame(pd: Any, r: Any) -> pd.DataFrame:
    frame = pd.DataFrame({name: _column(values) for name, values in r.points.items()})
    n = len(frame)
    flags = {"feasible": r.feasible, "front": _mask(n, r.front), "cost_front": _mask(n, r.cost_front),
             "best": _mask(n, [] if r.best is None else [r.best])}
    for name, values in flags.items():
        frame[name if name not in frame else f"plan_{name}"] = list(map(bool, values))
    return frame


def _column(values: Any) -> Any:
    return values.tolist() if getattr(values, "dtype", None) is not None and values.dtype == object else values


def _mask(n: int, indices: Iterable[int]) -> list[bool]:
    mask = [False] * n
    for i in indices:
        mask[int(i)] = True
    return mask


def _validation_row(r: Any) -> dict[str, Any]:
    d = r.to_dict()
    d.setdefault("family", r.family or None)
    d.setdefault("predicted", r.predicted)
    d.setdefault("error", r.error)
    d.setdefault("assumptions", list(r.assumptions))
    d.setdefault("skipped_reason", None)
    return {key: d.get(key) for key in VALIDATION_COLUMNS} | {k: v for k, v in d.items() if k not in VALIDATION_COLUMNS}


__all__ = ["prediction_row", "to_pandas"]
