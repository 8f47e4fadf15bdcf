"""A chip (or one wafer, or one LPU) and the system it sits in: memory tiers, compute, links, power, price.

All figures are datasheet numbers with a source each; achieved fractions of them are empirical
constants and live in tokensim/data/constants.toml, never here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from tokensim.errors import require
from tokensim.specs.precision import COMPUTE_ORDER

# what carries a link: the achieved share of its line rate differs by medium (constants link_bandwidth_fraction,
# pcie_link_bandwidth_fraction and pcie_host_link_bandwidth_fraction). "pcie" is PCIe with GPU peer-to-peer (one GPU
# writes into the other's memory); "pcie-host" is PCIe without it (GeForce drivers, most cloud VMs, NCCL across
# sockets): every transfer is staged through host memory (NCCL's SHM transport)
LinkMedium = Literal["nvlink", "pcie", "pcie-host", "xgmi", "ici", "c2c", "infiniband", "ethernet"]
LINK_MEDIA: tuple[str, ...] = get_args(LinkMedium)
# A format the chip lacks runs at the next one it has (fp8 never borrows the int8 integer rate).
FALLBACK = {"fp4": ("fp4", "fp8", "bf16", "fp32"), "fp8": ("fp8", "bf16", "fp32"), "int8": ("int8", "bf16", "fp32"),
            "bf16": ("bf16", "fp32"), "fp32": ("fp32", "bf16")}


VISIBLE_CAPACITY_EXPECTED = "within a factor 1.5 of capacity_bytes (the same memory, counted by the driver)"


def visible_capacity_plausible(capacity_bytes: float, visible_bytes: float) -> bool:
    """The driver's count of a tier's memory (MiB, usable after reservations) is the datasheet's memory, so it lies
    within a factor 1.5 of the datasheet figure; outside that, one of the two is a unit slip."""
    return capacity_bytes / 1.5 <= visible_bytes <= 1.5 * capacity_bytes


@dataclass(frozen=True)
class MemoryTier:
    tier: str                       # "sram", "hbm", "dram"
    capacity_bytes: float           # per chip
    bandwidth_bytes_per_s: float    # per chip
    holds_weights: bool = True      # False for caches too small to plan around (a GPU's L2)
    source: str = ""
    # what the driver reports (nvidia-smi, cudaMemGetInfo) where it differs from the datasheet's round figure (an
    # "80 GB" H100 shows 81,559 MiB = 85.5e9 bytes); serving engines size their KV pools from it
    visible_capacity_bytes: float | None = None
    visible_source: str = ""

    def __post_init__(self) -> None:
        require(self.tier in ("sram", "hbm", "dram"), "memory.tier", self.tier, '"sram", "hbm" or "dram"')
        require(self.capacity_bytes > 0, f"memory.{self.tier}.capacity_bytes", self.capacity_bytes, "a positive number")
        if self.visible_capacity_bytes is not None:
            require(visible_capacity_plausible(self.capacity_bytes, self.visible_capacity_bytes),
                    f"memory.{self.tier}.visible_capacity_bytes", self.visible_capacity_bytes, VISIBLE_CAPACITY_EXPECTED)
        require(self.bandwidth_bytes_per_s > 0, f"memory.{self.tier}.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s,
                "a positive number")


@dataclass(frozen=True)
class Link:
    name: str                       # "scale_up" (NVLink, xGMI, ICI, C2C) or "scale_out" (NIC, system I/O)
    bandwidth_bytes_per_s: float    # per chip, per direction
    latency_s: float                # one small message, end to end
    domain_chips: int               # chips reachable over this link without leaving it (0: unlimited)
    source: str = ""
    peer_bandwidth_bytes_per_s: float | None = None   # to ONE peer, when below the aggregate (a mesh of links)
    medium: str = ""                # LINK_MEDIA, "" unstated: "pcie" / "pcie-host" select the PCIe shares of the line rate

    def __post_init__(self) -> None:
        require(self.name in ("scale_up", "scale_out"), "links.name", self.name, '"scale_up" or "scale_out"')
        require(self.bandwidth_bytes_per_s > 0, f"links.{self.name}.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s,
                "a positive number")
        require(self.latency_s >= 0, f"links.{self.name}.latency_s", self.latency_s, "zero or more seconds")
        require(self.medium in ("", *LINK_MEDIA), f"links.{self.name}.medium", self.medium,
                "one of " + ", ".join(LINK_MEDIA) + " (or unstated)")


@dataclass(frozen=True)
class HardwareSpec:
    name: str                       # short exact catalog name, e.g. "h100-sxm"
    display_name: str
    vendor: str
    kind: str                       # "gpu", "wafer", "lpu", "rdu", "tpu", "cpu"
    family: str                     # selects the empirical constants, e.g. "nvidia-hopper", "cerebras-wafer"
    memory: tuple[MemoryTier, ...]  # fastest first
    flops_per_s: tuple[tuple[str, float], ...]  # dense peak per compute format, e.g. (("bf16", 989e12), ...)
    links: tuple[Link, ...] = ()
    tdp_w: float = 0.0              # per chip (a wafer: per system)
    idle_w: float = 0.0
    chips_per_system: int = 1       # chips in one system (a DGX: 8; an NVL72 rack: 72; a CS-3: 1)
    system_power_w: float | None = None  # whole system at load, hosts and switches included, where published
    price_usd_per_hour: float | None = None
    purchase_usd: float | None = None
    aliases: tuple[str, ...] = ()
    notes: str = ""
    sources: tuple[tuple[str, str], ...] = ()   # (what, url) for figures not carrying their own source

    def __post_init__(self) -> None:
        require(self.kind in ("gpu", "wafer", "lpu", "rdu", "tpu", "cpu"), "kind", self.kind, "gpu, wafer, lpu, rdu, tpu or cpu")
        require(len(self.memory) > 0, "memory", self.memory, "at least one memory tier")
        require(len(self.flops_per_s) > 0, "compute", self.flops_per_s, "at least one dense FLOP/s figure")
        for fmt, value in self.flops_per_s:
            require(fmt in COMPUTE_ORDER, "compute format", fmt, f"one of {COMPUTE_ORDER}")
            require(value > 0, f"compute.{fmt}_flops_per_s", value, "a positive number")

    def peak_flops(self, compute: str) -> float:
        """Dense peak at `compute`, or at the fastest slower format the chip has (fp4 falls back to fp8, then bf16)."""
        rates = dict(self.flops_per_s)
        for fmt in FALLBACK[compute]:
            if fmt in rates:
                return rates[fmt]
        return min(rates.values())

    def supports(self, compute: str) -> bool:
        return compute in dict(self.flops_per_s)

    @property
    def weight_tier(self) -> MemoryTier:
        return next(t for t in self.memory if t.holds_weights)

    def link(self, name: str) -> Link | None:
        return next((link for link in self.links if link.name == name), None)

    @property
    def capacity_bytes(self) -> float:
        return self.weight_tier.capacity_bytes

    @property
    def visible_capacity_bytes(self) -> float:
        """The weight tier as the driver reports it, else its datasheet capacity."""
        tier = self.weight_tier
        return tier.visible_capacity_bytes if tier.visible_capacity_bytes is not None else tier.capacity_bytes
