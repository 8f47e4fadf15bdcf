"""Empirical constants: achieved fractions of datasheet peaks and latency floors, by hardware family and engine.

They live in data/constants.toml with the evidence for each; `tokensim fit` writes a fitted table whose values
take precedence. A `ConstantsTable` holds one set of tables (base, fitted, and an overlay for what-ifs and
fitting) and is passed explicitly to every prediction: nothing here is module state that a run could change,
so two scenarios with their own [constants] tables can run in threads of one process.

Lookup order, most specific last (it wins): [default.default], [default.engine], [kind.default], [kind.engine],
[vendor.default], [vendor.engine], [family.default], [family.engine]. Nothing here is a datasheet figure.
"""
from __future__ import annotations

import copy
import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from tokensim.errors import TokensimError, bad_value
from tokensim.perf.engines import canonical_engine, engine_names, engine_profiles

ENGINES = engine_names()   # engine profiles (data/engines) and the spellings that name them; "default" when unnamed
FITTED_ENV = "TOKENSIM_FITTED"   # a fitted table written by `tokensim fit -o FILE`, used instead of the shipped one


# achieved shares of a peak: a prediction divides by most of them, so 0 is refused here, not met as 0 / 0 later
SHARES = ("hbm_bandwidth_fraction", "attention_bandwidth_fraction", "gemm_flops_fraction", "prefill_flops_fraction",
          "link_bandwidth_fraction", "pcie_link_bandwidth_fraction", "pcie_host_link_bandwidth_fraction",
          "usable_memory_fraction", "grouped_gemm_fraction", "sustained_clock_fraction",
          "prefill_clock_fraction")


@dataclass(frozen=True)
class Constants:
    hbm_bandwidth_fraction: float    # achieved / peak bandwidth of the tier holding the weights, streaming weights
    attention_bandwidth_fraction: float   # achieved / peak bandwidth reading the paged KV cache in decode attention
    gemm_flops_fraction: float       # achieved / peak dense FLOP/s of a large GEMM
    gemm_half_rows: float            # token rows at which a GEMM reaches half that rate
    gemm_half_inner: float           # inner (reduction) dimension per chip at which a GEMM reaches half that rate
    grouped_gemm_fraction: float     # a MoE layer's grouped expert GEMMs against a dense GEMM of the same shape
    narrow_format_serial_share: float  # share of a GEMM's bf16-rate time that an fp8/fp4 format does not speed up
    sustained_clock_fraction: float  # sustained tensor throughput under the chip's power limit / the datasheet peak
    prefill_clock_fraction: float    # and, further, while a prefill keeps every tensor core busy (power-limited clocks)
    prefill_flops_fraction: float    # achieved / peak dense FLOP/s over a whole prefill
    attention_prefill_rate_ratio: float   # prefill attention (scores, values) FLOP/s as a share of that prefill rate
    mixed_step_gqa_unpacked_share: float  # a step with prompt tokens: share of GQA's extra per-query-head KV reads paid
    kernel_gap_s: float              # idle time per kernel launch
    eager_layer_overhead_s: float    # host time to dispatch one layer's kernels in a step outside CUDA graphs (prefill)
    layer_latency_s: float           # dataflow floor per layer (wafers, LPUs): its fixed part
    layer_latency_s_per_byte: float  # and its part per byte of weights the layer touches on a chip
    host_overhead_s: float           # per decode step, outside the accelerator
    host_overhead_per_seq_s: float   # per running sequence per step: scheduling, sampling, detokenization
    request_overhead_s: float        # per request served over HTTP/API: tokenization, scheduling, transport
    collective_latency_s: float      # one small all-reduce
    all_to_all_latency_s: float      # one EP dispatch or combine
    link_bandwidth_fraction: float   # achieved / line rate of a collective over a chip-to-chip link (NVLink, ...)
    pcie_link_bandwidth_fraction: float   # the same over a link whose medium is PCIe with GPU peer-to-peer
    pcie_host_link_bandwidth_fraction: float   # and over PCIe without it, staged through host memory
    expert_load_cv: float            # routing skew: coefficient of variation of the pairs each expert gets
    dequant_overhead: float
    stage_hop_latency_s: float       # pipeline stage to stage, beyond the link's own latency
    usable_memory_fraction: float    # of the weight tier's capacity, for weights + KV

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, float) and math.isfinite(v) and v >= 0):
                raise bad_value(f"constants.{f.name}", v, "a finite number >= 0")
        for name in SHARES:
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise bad_value(f"constants.{name}", v, "a share in (0, 1]")
        if self.mixed_step_gqa_unpacked_share > 1:
            raise bad_value("constants.mixed_step_gqa_unpacked_share", self.mixed_step_gqa_unpacked_share,
                            "a share in [0, 1]")
        if self.narrow_format_serial_share > 1:
            raise bad_value("constants.narrow_format_serial_share", self.narrow_format_serial_share, "a share in [0, 1]")
        if self.attention_prefill_rate_ratio <= 0:
            raise bad_value("constants.attention_prefill_rate_ratio", self.attention_prefill_rate_ratio,
                            "a number > 0 (a share of the prefill FLOP rate)")


NAMES = tuple(f.name for f in fields(Constants))


def _read(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TokensimError(f"{path}: not a readable constants table ({str(exc).splitlines()[0]})") from None


def levels(family: str, kind: str, engine: str, vendor: str, chip: str = "") -> tuple[tuple[str, str], ...]:
    """The (chip-or-family-or-kind-or-vendor, engine) levels a lookup visits, least specific first (the last one found
    wins). A chip's own level (its catalog name) holds what was measured on that chip alone (kernel profiles)."""
    out = (("default", "default"), ("default", engine), (kind, "default"), (kind, engine),
           (vendor, "default"), (vendor, engine), (family, "default"), (family, engine))
    return out + ((chip, "default"), (chip, engine)) if chip else out


@dataclass(frozen=True)
class ConstantsTable:
    """One consistent set of empirical constants: the base file, a fitted table over it, and an overlay over both."""

    base: dict
    fitted: dict = field(default_factory=dict)        # the whole fitted file: [constants], residuals, report
    overlay: dict = field(default_factory=dict)       # {family: {engine: {name: value}}}
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def merged(self, family: str, kind: str = "", engine: str = "default", vendor: str = "",
               chip: str = "") -> dict[str, Any]:
        """Most specific level wins; within a level, fitted values and then the overlay beat the base file."""
        out: dict[str, Any] = {}
        fitted = self.fitted.get("constants", {})
        for fam, eng in levels(family, kind, engine, vendor.lower(), chip):
            out.update(self.base.get(fam, {}).get(eng, {}))
            out.update(fitted.get(fam, {}).get(eng, {}))
            out.update(self.overlay.get(fam, {}).get(eng, {}))
        return out

    def constants_for(self, family: str, kind: str = "", engine: str = "default", vendor: str = "",
                      chip: str = "") -> Constants:
        name = canonical_engine(engine)
        if name is None:
            raise bad_value("engine", engine, f"one of {', '.join(sorted(engine_profiles()))} (tokensim engines)")
        engine = name
        key = (family, kind, engine, vendor, chip)
        if key not in self._cache:
            values = self.merged(family, kind, engine, vendor, chip)
            missing = [n for n in NAMES if n not in values]
            if missing:
                raise TokensimError(f"constants table: {', '.join(missing)} missing for {family}/{engine}")
            self._cache[key] = Constants(**{n: float(values[n]) for n in NAMES})
        return self._cache[key]

    def for_hardware(self, hw, engine: str = "default") -> Constants:
        """The constants for a HardwareSpec (its family, kind, vendor and own name) and an engine class."""
        return self.constants_for(hw.family, hw.kind, engine, hw.vendor, hw.name)

    def with_overlay(self, values: dict) -> ConstantsTable:
        """A new table with `values` ({family: {engine: {name: value}}}) over this one's overlay."""
        merged = {fam: {eng: dict(v) for eng, v in engines.items()} for fam, engines in self.overlay.items()}
        for fam, engines in values.items():
            for eng, v in engines.items():
                merged.setdefault(fam, {}).setdefault(eng, {}).update(v)
        return ConstantsTable(self.base, self.fitted, merged)

    def without_fitted(self) -> ConstantsTable:
        """The base file alone (with this overlay): where a fit starts, so that it is reproducible."""
        return ConstantsTable(self.base, {}, self.overlay)

    def evidence(self, family: str, kind: str = "", engine: str = "default", vendor: str = "",
                 chip: str = "") -> dict[str, str]:
        """The evidence line behind each constant as used for this family, kind, engine, vendor and chip."""
        values = self.merged(family, kind, engine, vendor, chip)
        out = {n: str(values.get(f"{n}_evidence", "")) for n in NAMES}
        for fam, eng in levels(family, kind, engine, vendor.lower(), chip):
            for name in set(self.fitted.get("constants", {}).get(fam, {}).get(eng, {})) & out.keys():
                out[name] = f"fitted by `tokensim fit` on {self.fitted.get('date', '?')} ({self.fitted.get('rows', '?')} rows)"
            for name in set(self.overlay.get(fam, {}).get(eng, {})) & out.keys():
                out[name] = "set for this run (scenario [constants] table or a fit in progress)"
        return out


def data_path(name: str) -> Path:
    return Path(str(resources.files("tokensim") / "data" / name))


@lru_cache(maxsize=1)
def default_table() -> ConstantsTable:
    """constants.toml with the shipped fitted.toml over it, or the file named by $TOKENSIM_FITTED."""
    user = os.environ.get(FITTED_ENV)
    fitted_path = Path(user) if user else data_path("fitted.toml")
    if user and not fitted_path.is_file():
        raise bad_value(FITTED_ENV, user, "the path of a fitted table written by `tokensim fit -o FILE`")
    return ConstantsTable(with_engine_priors(_read(data_path("constants.toml"))), _read(fitted_path))


def with_engine_priors(base: dict) -> dict:
    """constants.toml with each engine profile's [constants] as the [default.<engine>] level (the file's own wins)."""
    out = copy.deepcopy(base)
    for name, profile in engine_profiles().items():
        if profile.constants and name != "default":
            level = out.setdefault("default", {}).setdefault(name, {})
            for key, value in profile.constants.items():
                level.setdefault(key, value)
    return out


def table_or_default(table: ConstantsTable | None) -> ConstantsTable:
    return table if table is not None else default_table()


def for_hardware(hw, engine: str = "default", table: ConstantsTable | None = None) -> Constants:
    """The constants for a HardwareSpec and an engine class, from `table` (default: the shipped tables)."""
    return table_or_default(table).for_hardware(hw, engine)


def fitted_table() -> dict:
    """The whole fitted table in use (constants, residuals, error report); empty before the first fit."""
    return default_table().fitted


def evidence(family: str, kind: str = "", engine: str = "default", vendor: str = "",
             table: ConstantsTable | None = None, chip: str = "") -> dict[str, str]:
    """The evidence line behind each constant for this family, kind, engine, vendor and chip (default table)."""
    return table_or_default(table).evidence(family, kind, engine, vendor, chip)
