"""The layout of a hardware file (data/hardware/*.toml, or a user's TOML/YAML), checked once, and the
HardwareSpec it becomes.

Every figure is per chip (a wafer: per system), in SI units, positive and finite; the bounds are far beyond
any shipped chip (the largest: 21 PB/s of wafer SRAM, 1 TB of CPU DRAM, a 120 kW rack) and only stop unit
slips (1e-300, 1e400) from producing infinite or zero speeds.
"""
from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, model_validator

from tokensim.inputs.base import Count, InputModel, Name, Number, Text, field_error
from tokensim.specs.hardware.spec import (
    LINK_MEDIA,
    VISIBLE_CAPACITY_EXPECTED,
    HardwareSpec,
    Link,
    LinkMedium,
    MemoryTier,
    visible_capacity_plausible,
)
from tokensim.specs.precision import COMPUTE_ORDER

MAX_CHIPS = 1_000_000

Bytes = Annotated[float, Number("bytes per chip", ge=1e6, le=1e18, text_ok=True)]
BytesPerS = Annotated[float, Number("bytes per second per chip, one direction", ge=1e6, le=1e18, text_ok=True)]
FlopsPerS = Annotated[float, Number("dense FLOP per second per chip", ge=1e9, le=1e21, text_ok=True)]
Seconds = Annotated[float, Number("seconds", ge=0, le=10, text_ok=True)]
Watts = Annotated[float, Number("watts", gt=0, le=1e7, text_ok=True)]
IdleWatts = Annotated[float, Number("watts", ge=0, le=1e7, text_ok=True)]
UsdPerHour = Annotated[float, Number("US dollars per chip-hour", gt=0, le=1e6, text_ok=True)]
Usd = Annotated[float, Number("US dollars per chip", gt=0, le=1e10, text_ok=True)]
DomainChips = Annotated[int, Count("chips reachable over the link; 0: unlimited", ge=0, le=MAX_CHIPS)]
SystemChips = Annotated[int, Count("chips in one system", le=MAX_CHIPS)]


def _date_text(value: Any) -> Any:
    """A date may be written 2025 or 2025-01-01 (YAML and TOML read those as numbers or dates)."""
    if isinstance(value, (datetime.date, datetime.datetime)) or (isinstance(value, int) and not isinstance(value, bool)
                                                                 and 1900 <= value <= 2200):
        return str(value)
    return value


class MemoryTable(InputModel):
    tier: Literal["sram", "hbm", "dram"] = Field(description='"sram", "hbm" or "dram"')
    capacity_bytes: Bytes
    bandwidth_bytes_per_s: BytesPerS
    holds_weights: bool = Field(True, description="true or false (false: a cache too small to plan weights around)")
    source: Text = ""
    visible_capacity_bytes: Bytes | None = None      # as the driver reports it (nvidia-smi), where it differs
    visible_source: Text = ""

    @model_validator(mode="after")
    def _visible_has_source(self) -> MemoryTable:
        if self.visible_capacity_bytes is not None and not self.visible_source.strip():
            raise field_error("visible_source", self.visible_source, "a source (URL) for visible_capacity_bytes")
        if self.visible_capacity_bytes is not None and not visible_capacity_plausible(self.capacity_bytes,
                                                                                      self.visible_capacity_bytes):
            # checked here as well as in MemoryTier, so that a file's error names the file
            raise field_error("visible_capacity_bytes", self.visible_capacity_bytes, VISIBLE_CAPACITY_EXPECTED)
        return self


class ComputeTable(InputModel):
    fp32_flops_per_s: FlopsPerS | None = None
    bf16_flops_per_s: FlopsPerS | None = None
    int8_flops_per_s: FlopsPerS | None = None
    fp8_flops_per_s: FlopsPerS | None = None
    fp4_flops_per_s: FlopsPerS | None = None
    source: Text = ""

    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler) -> ComputeTable:
        table = handler(data)
        if isinstance(data, dict):           # the formats in the file's order, as listings show them
            table._order = tuple(k.removesuffix("_flops_per_s") for k in data if k.endswith("_flops_per_s"))
        if not table.rates():
            raise field_error(None, data, "at least one dense rate: "
                              + ", ".join(f"{fmt}_flops_per_s" for fmt in COMPUTE_ORDER))
        return table

    def rates(self) -> tuple[tuple[str, float], ...]:
        """(format, FLOP/s) for every rate the file gives, in the file's order."""
        order = self._order or COMPUTE_ORDER
        return tuple((fmt, v) for fmt in order if (v := getattr(self, f"{fmt}_flops_per_s", None)) is not None)


class LinkTable(InputModel):
    name: Literal["scale_up", "scale_out"] = Field(description='"scale_up" or "scale_out"')
    bandwidth_bytes_per_s: BytesPerS
    latency_s: Seconds
    domain_chips: DomainChips = 0
    peer_bandwidth_bytes_per_s: BytesPerS | None = None
    medium: LinkMedium | None = Field(
        None, description="what carries it: " + ", ".join(LINK_MEDIA) + " (pcie: PCIe with GPU peer-to-peer, "
                          "pcie-host: without it, staged through host memory; both reach a lower share of the line "
                          "rate, pcie-host the lowest)")
    source: Text = ""


class PowerTable(InputModel):
    tdp_w: Watts
    idle_w: IdleWatts = 0.0
    source: Text = ""

    @model_validator(mode="after")
    def _idle_below_tdp(self) -> PowerTable:
        if self.idle_w > self.tdp_w:
            raise field_error("idle_w", self.idle_w, f"at most tdp_w = {self.tdp_w:g} watts")
        return self


class PriceTable(InputModel):
    usd_per_hour: UsdPerHour | None = None
    purchase_usd: Usd | None = None
    date: Annotated[Text, BeforeValidator(_date_text)] = ""
    source: Text = ""


class SystemTable(InputModel):
    chips: SystemChips = 1
    power_w: Watts | None = None
    source: Text = ""


class HardwareFile(InputModel):
    """One chip (or wafer, or LPU) and the system it sits in."""

    name: Name
    display_name: Name | None = None
    vendor: Text = ""
    kind: Literal["gpu", "wafer", "lpu", "rdu", "tpu", "cpu"] = Field(description="gpu, wafer, lpu, rdu, tpu or cpu")
    family: Name | None = Field(None, description="the family whose empirical constants apply (default: kind)")
    aliases: Annotated[list[Name], Field(max_length=100, description="a list of other names")] = []
    notes: Text = ""
    memory: Annotated[list[MemoryTable], Field(min_length=1, max_length=8,
                                               description="a list of [[memory]] tables, fastest first")]
    compute: ComputeTable
    links: Annotated[list[LinkTable], Field(max_length=2, description="a list of [[links]] tables (scale_up, scale_out)")] = []
    power: PowerTable | None = None
    price: PriceTable | None = None
    system: SystemTable | None = None
    probe: Annotated[dict[str, Any], Field(max_length=64, description="how `tokensim hardware probe` measured this machine "
                                           "(conditions and raw figures; read by people, not by the model)")] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> HardwareFile:
        if not any(m.holds_weights for m in self.memory):
            raise field_error("memory", [m.tier for m in self.memory], "at least one tier with holds_weights = true")
        names = [link.name for link in self.links]
        if len(set(names)) != len(names):
            raise field_error("links", names, "each link name (scale_up, scale_out) at most once")
        return self

    def to_spec(self) -> HardwareSpec:
        power, price, system = self.power, self.price, self.system
        sources = [("compute", self.compute.source)]
        if power:
            sources.append(("power", power.source))
        if system:
            sources.append(("system", system.source))
        if price:
            sources.append(("price", f"{price.source} ({price.date or 'date unknown'})"))
        return HardwareSpec(
            name=self.name, display_name=self.display_name or self.name, vendor=self.vendor, kind=self.kind,
            family=self.family or self.kind,
            memory=tuple(MemoryTier(m.tier, m.capacity_bytes, m.bandwidth_bytes_per_s, m.holds_weights, m.source,
                                    m.visible_capacity_bytes, m.visible_source)
                         for m in self.memory),
            flops_per_s=self.compute.rates(),
            links=tuple(Link(k.name, k.bandwidth_bytes_per_s, k.latency_s, k.domain_chips, k.source,
                             k.peer_bandwidth_bytes_per_s, k.medium or "") for k in self.links),
            tdp_w=power.tdp_w if power else 0.0, idle_w=power.idle_w if power else 0.0,
            chips_per_system=system.chips if system else 1, system_power_w=system.power_w if system else None,
            price_usd_per_hour=price.usd_per_hour if price else None, purchase_usd=price.purchase_usd if price else None,
            aliases=tuple(self.aliases), notes=self.notes.strip(), sources=tuple(sources),
        )


__all__ = ["HardwareFile", "MemoryTable", "ComputeTable", "LinkTable", "PowerTable", "PriceTable", "SystemTable"]
