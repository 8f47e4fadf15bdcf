"""What `tokensim fit` minimizes: three kinds of evidence priced by the same step function, in one objective.

- published measurements (measurements.csv): each row's metric, as `tokensim validate` predicts it;
- measured serving runs (silicon_dev.csv): each run's time per output token, from the steady-state estimate of
  `validate.serving.steady_tpot` times the ratio of the simulated TPOT to that estimate at the sweep's constants
  (`FitData.tpot_ratio`: the estimate is the fast surrogate, the simulator what is fitted);
- the same runs' time to first token at light load (at most LIGHT_LOAD_CLIENTS clients per replica, aggregated
  serving), from `validate.serving.light_ttft`: the prompt's prefill step, the step before it and the engine's
  request path, with no queue to model.

Each kind's loss is the mean of min(|ln(predicted / measured)|, ln 4) over its rows (a row off by more than 4x is
left unexplained rather than allowed to drag every constant), and the objective is their sum, so that 126
published rows weigh as much as 2,763 serving runs. A constant moves only the rows whose lookup ends at its level
of the constants table (`affected`), which is what keeps a fit of some fifty constants to minutes.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from tokensim.errors import TokensimError
from tokensim.perf.constants import ConstantsTable, default_table, levels
from tokensim.perf.engines import canonical_engine
from tokensim.specs.hardware.catalog import catalog
from tokensim.validate.evaluate import predict_case
from tokensim.validate.rules import Case
from tokensim.validate.serving import LIGHT_LOAD_CLIENTS, ServingCase, light_ttft, steady_tpot

LOSS_CAP = math.log(4.0)
KINDS = ("published", "tpot", "ttft_light")


@dataclass(frozen=True)
class FitData:
    """The rows a fit sees, by kind."""

    published: tuple[Case, ...] = ()
    tpot: tuple[ServingCase, ...] = ()          # every laid-out serving run: time per output token
    ttft_light: tuple[ServingCase, ...] = ()    # its lightly loaded aggregated runs: time to first token
    sizes: dict = field(default_factory=dict, compare=False)   # rows of each kind in the whole data set (loss scale)
    light_steps: tuple[float, ...] = ()         # per light run, the simulator's count of steps (light_ttft); () = 1
    tpot_ratio: tuple[float, ...] = ()          # per serving run, simulated over steady-state TPOT; () = 1

    @staticmethod
    def of(published, serving) -> FitData:
        light = tuple(c for c in serving if c.prefill_in_decode and c.concurrency / c.deployment.attn_dp
                      <= LIGHT_LOAD_CLIENTS)
        data = FitData(tuple(published), tuple(serving), light)
        return FitData(data.published, data.tpot, data.ttft_light, {k: len(getattr(data, k)) for k in KINDS})

    def subset(self, keep_published, keep_serving) -> FitData:
        """The rows the two predicates keep, with the loss scale of the whole set."""
        return self.take({"published": [i for i, c in enumerate(self.published) if keep_published(c)],
                          "tpot": [i for i, c in enumerate(self.tpot) if keep_serving(c)],
                          "ttft_light": [i for i, c in enumerate(self.ttft_light) if keep_serving(c)]})

    def take(self, where) -> FitData:
        """The rows at these positions of each kind (`where`: kind -> positions, in order), with the loss scale of the
        whole set and each run's pinned simulator ratio and step count."""
        return FitData(tuple(self.published[i] for i in where["published"]), tuple(self.tpot[i] for i in where["tpot"]),
                       tuple(self.ttft_light[i] for i in where["ttft_light"]),
                       self.sizes or {k: len(getattr(self, k)) for k in KINDS},
                       tuple(self.light_steps[i] for i in where["ttft_light"]) if self.light_steps else (),
                       tuple(self.tpot_ratio[i] for i in where["tpot"]) if self.tpot_ratio else ())

    def __len__(self) -> int:
        return len(self.published) + len(self.tpot) + len(self.ttft_light)


def published_errors(cases, table: ConstantsTable) -> np.ndarray:
    """ln(predicted / measured) of each published row (NaN where it cannot be predicted)."""
    out = np.full(len(cases), np.nan)
    for i, c in enumerate(cases):
        try:
            v, _ = predict_case(c, table)
            out[i] = math.log(v / c.row.value)
        except TokensimError:
            pass
    return out


def log_errors(data: FitData, table: ConstantsTable) -> dict[str, np.ndarray]:
    """ln(predicted / measured) of every row, by kind."""
    return {"published": published_errors(data.published, table), **serving_errors(data, table)}


def serving_errors(data: FitData, table: ConstantsTable) -> dict[str, np.ndarray]:
    """ln(predicted / measured) of the serving runs: time per output token, and time to first token at light load."""
    out = {}
    tpot = np.array([c.run.tpot_s for c in data.tpot])
    ratio = np.asarray(data.tpot_ratio, dtype=float) if data.tpot_ratio else 1.0
    out["tpot"] = np.log(steady_tpot(list(data.tpot), table) * ratio / tpot) if data.tpot else np.zeros(0)
    ttft = np.array([c.run.ttft_s for c in data.ttft_light])
    out["ttft_light"] = (np.log(light_ttft(list(data.ttft_light), table, data.light_steps or None) / ttft)
                         if data.ttft_light else np.zeros(0))
    return out


def capped_sum(e: np.ndarray) -> float:
    return float(np.sum(np.minimum(np.nan_to_num(np.abs(e), nan=LOSS_CAP), LOSS_CAP)))


def kind_sum(data: FitData, sums: dict[str, float]) -> float:
    """The loss from each kind's capped sum: summed over kinds, each divided by the whole data set's rows of that kind
    (`loss`, `loss_kept` and `split_loss.SplitLoss` all end here, so that they stay the same float)."""
    sizes = data.sizes or {k: len(getattr(data, k)) for k in KINDS}
    return sum(sums[k] / max(sizes[k], 1) for k in KINDS)


def loss(data: FitData, table: ConstantsTable) -> float:
    """Sum over kinds of the mean capped |log error| (means over the whole data set's rows of each kind, so that a
    subset's loss differs from the whole one's by a constant)."""
    return kind_sum(data, {k: capped_sum(e) for k, e in log_errors(data, table).items()})


_SERVING_SUMS: dict = {}        # (rows, constants) -> the serving kinds' capped sums, kept by a process across fits
SERVING_SUMS_KEPT = 100_000     # entries before the store starts over (each two floats and its key)


def serving_rows_key(data: FitData) -> str:
    """What the serving kinds' errors depend on besides the constants: every run's id and measured figures, and the
    simulator's ratios and step counts pinned to them (a digest: runs that share an id but differ get other keys)."""
    text = repr(([(c.run.id, c.run.tpot_s, c.run.ttft_s) for c in data.tpot], data.tpot_ratio,
                 [(c.run.id, c.run.ttft_s) for c in data.ttft_light], data.light_steps))
    return hashlib.sha256(text.encode()).hexdigest()


def loss_kept(data: FitData, table: ConstantsTable, key) -> float:
    """`loss(data, table)`, the same float, with the serving kinds' capped sums kept under `key` (the rows'
    `serving_rows_key` and every constant's value: all they are a function of). The out-of-sample refits of published
    source groups each keep every serving run and start from the same constants, so the ones a process runs price
    the same serving rows at the same constants until their searches part; each then reprices only its published
    rows."""
    sums = _SERVING_SUMS.get(key)
    if sums is None:
        if len(_SERVING_SUMS) >= SERVING_SUMS_KEPT:
            _SERVING_SUMS.clear()
        errors = serving_errors(data, table)
        sums = _SERVING_SUMS[key] = {k: capped_sum(errors[k]) for k in ("tpot", "ttft_light")}
    return kind_sum(data, {"published": capped_sum(published_errors(data.published, table)), **sums})


class KeptLoss:
    """The loss of the rows each constant moves, evaluated in this process with `loss_kept`'s store: one sweep's
    evaluator where the fit runs in one process (`split_loss.SplitLoss` is the one that spreads it over several;
    both answer `loss(param, table)` with the same float as `loss(affected(param, data, levels), table)`)."""

    def __init__(self, data: FitData, levels: AbstractSet) -> None:
        self.data, self.levels = data, levels
        self._rows: dict = {}        # param -> (the rows it moves, their serving_rows_key)

    def loss(self, param, table: ConstantsTable) -> float:
        if param not in self._rows:
            rows = affected(param, self.data, self.levels)
            self._rows[param] = (rows, serving_rows_key(rows))
        rows, key = self._rows[param]
        # the overlay holds every fitted constant's value; with the rows' key it is all the serving sums depend on
        return loss_kept(rows, table, (key, repr(table.overlay)))

    def close(self) -> None:
        pass

    def __enter__(self) -> KeptLoss:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- which rows a constant moves -------------------------------------------------------------------------------

def _hardware_keys(name: str) -> tuple[str, str, str]:
    hw = catalog()[name]
    return hw.family, hw.kind, hw.vendor.lower()


def effective_level(name: str, family: str, kind: str, vendor: str, engine: str, fitted_levels: AbstractSet,
                    base: dict, chip: str = "") -> tuple[str, str]:
    """The level of the constants table whose value of `name` a row on this hardware and engine uses: the most
    specific level holding it, in the base file or among the constants being fitted."""
    found = ("default", "default")
    for level in levels(family, kind, engine, vendor, chip):
        if name in base.get(level[0], {}).get(level[1], {}) or (level[0], level[1], name) in fitted_levels:
            found = level
    return found


def affected(param, data: FitData, fitted_levels: AbstractSet) -> FitData:
    """The rows whose predictions move with `param` (its level is the one their lookup ends at)."""
    base = default_table().without_fitted().base

    def moves(hardware: str, engine: str) -> bool:
        family, kind, vendor = _hardware_keys(hardware)
        level = effective_level(param.name, family, kind, vendor, canonical_engine(engine) or "default",
                                fitted_levels, base, hardware)
        return level == (param.family, param.engine)

    return data.subset(lambda c: moves(c.hardware, c.deployment.engine),
                       lambda c: moves(c.run.system, c.deployment.engine))
