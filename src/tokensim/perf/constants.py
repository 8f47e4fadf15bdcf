"""Empirical constants: achieved fractions of datasheet peaks and latency floors, by hardware family and engine.

They live in data/constants.toml with the evidence for each; `tokensim fit` writes data/fitted.toml,
whose values take precedence. Lookup order, most specific first: [family.engine], [family.default], [vendor.engine],
[vendor.default], [kind.engine], [kind.default], [default.engine], [default.default]. Nothing here is a datasheet figure.
"""
from __future__ import annotations

import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tokensim.errors import bad_value

ENGINES = ("default", "basic")   # serving engines (vLLM, SGLang, TensorRT-LLM, APIs) and llama.cpp-class ones


@dataclass(frozen=True)
class Constants:
    hbm_bandwidth_fraction: float    # achieved / peak bandwidth of the tier holding the weights
    gemm_flops_fraction: float       # achieved / peak dense FLOP/s of a large GEMM
    gemm_half_rows: float            # token rows at which a GEMM reaches half that rate
    prefill_flops_fraction: float    # achieved / peak dense FLOP/s over a whole prefill
    kernel_gap_s: float              # idle time per kernel launch
    layer_latency_s: float           # dataflow floor per layer (wafers, LPUs)
    host_overhead_s: float           # per decode step, outside the accelerator
    host_overhead_per_seq_s: float   # per running sequence per step: scheduling, sampling, detokenization
    request_overhead_s: float        # per request served over HTTP/API: tokenization, scheduling, transport
    collective_latency_s: float      # one small all-reduce
    all_to_all_latency_s: float      # one EP dispatch or combine
    link_bandwidth_fraction: float
    moe_load_imbalance: float
    dequant_overhead: float
    stage_hop_latency_s: float       # pipeline stage to stage, beyond the link's own latency
    usable_memory_fraction: float    # of the weight tier's capacity, for weights + KV


def _read(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


@lru_cache(maxsize=1)
def _tables() -> tuple[dict, dict]:
    data = resources.files("tokensim") / "data"
    return _read(Path(str(data / "constants.toml"))), _read(Path(str(data / "fitted.toml")))


_OVERLAY: dict = {}      # set only by `overridden`, for fitting
_USE_FITTED: bool = True   # cleared only by `overridden(..., use_fitted=False)`, so a fit starts from constants.toml


def _levels(family: str, kind: str, engine: str, vendor: str = "") -> tuple[tuple[str, str], ...]:
    return (("default", "default"), ("default", engine), (kind, "default"), (kind, engine),
            (vendor, "default"), (vendor, engine), (family, "default"), (family, engine))


def _lookup(family: str, kind: str, engine: str, vendor: str = "") -> dict:
    """Most specific level wins; within a level, fitted values (and a fitting overlay) beat the base file."""
    base, fitted = _tables()
    merged: dict = {}
    for fam, eng in _levels(family, kind, engine, vendor):
        merged.update(base.get(fam, {}).get(eng, {}))
        if _USE_FITTED:
            merged.update(fitted.get("constants", {}).get(fam, {}).get(eng, {}))
        merged.update(_OVERLAY.get(fam, {}).get(eng, {}))
    return merged


@contextmanager
def overridden(values: dict, use_fitted: bool = True):
    """Temporarily set constants, as {family: {engine: {name: value}}}; used by `tokensim fit`."""
    global _OVERLAY, _USE_FITTED
    saved = _OVERLAY, _USE_FITTED
    _OVERLAY, _USE_FITTED = values, use_fitted
    constants_for.cache_clear()
    try:
        yield
    finally:
        _OVERLAY, _USE_FITTED = saved
        constants_for.cache_clear()


def reload() -> None:
    """Forget cached tables (after `tokensim fit` rewrote fitted.toml)."""
    _tables.cache_clear()
    constants_for.cache_clear()


@lru_cache(maxsize=256)
def constants_for(family: str, kind: str = "", engine: str = "default", vendor: str = "") -> Constants:
    if engine not in ENGINES:
        raise bad_value("engine", engine, f"one of {', '.join(ENGINES)}")
    values = _lookup(family, kind, engine, vendor.lower())
    return Constants(**{f.name: float(values[f.name]) for f in fields(Constants)})


def evidence(family: str, kind: str = "", engine: str = "default", vendor: str = "") -> dict[str, str]:
    """The evidence line behind each constant as used for this family, kind, engine and vendor."""
    base, fitted = _tables()
    values = _lookup(family, kind, engine, vendor.lower())
    out = {f.name: str(values.get(f"{f.name}_evidence", "")) for f in fields(Constants)}
    for fam, eng in _levels(family, kind, engine, vendor.lower()):
        for name in fitted.get("constants", {}).get(fam, {}).get(eng, {}):
            out[name] = f"fitted by `tokensim fit` on {fitted.get('date', '?')} ({fitted.get('rows', '?')} rows)"
    return out


def fitted_table() -> dict:
    """The whole fitted.toml (constants, residuals, error report); empty before the first fit."""
    return _tables()[1]


def for_hardware(hw, engine: str = "default") -> Constants:
    """The constants for a HardwareSpec (its family, kind and vendor) and an engine class."""
    return constants_for(hw.family, hw.kind, engine, hw.vendor)
