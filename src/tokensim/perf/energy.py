"""Power, energy per token and cost per token from hardware figures and a step's busy fraction.

P = chips x (P_idle + u x (P_max - P_idle)) with u the busy share of the step (docs/model.md section 6);
P_max per chip is the system's published power divided by its chips when known (hosts, switches and
NICs included), else the chip's TDP. Prices are $ per chip-hour from the hardware file.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from tokensim.specs.hardware.spec import HardwareSpec

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Energy:
    power_w: float
    utilization: float
    tokens_per_joule: float
    usd_per_million_tokens: float | None      # from the rental price per chip-hour
    tco_usd_per_million_tokens: float | None = None   # purchase amortized + energy at PUE (where a purchase price is known)


@lru_cache(maxsize=1)
def cost_assumptions() -> dict:
    path = Path(str(resources.files("tokensim") / "data" / "costs.toml"))
    return tomllib.loads(path.read_text(encoding="utf-8"))


def tco_usd_per_hour(hw: HardwareSpec, chips: int, power_w: float) -> float | None:
    """Purchase price amortized over the years in costs.toml plus electricity at PUE, for `chips` chips."""
    if not hw.purchase_usd:
        return None
    c = cost_assumptions()
    capital = chips * hw.purchase_usd / (c["amortization_years"] * 8766.0)      # purchase_usd is per chip (a wafer: per system)
    energy = power_w / 1000.0 * c["pue"] * c["electricity_usd_per_kwh"]
    return capital + energy


def max_power_per_chip_w(hw: HardwareSpec) -> float:
    if hw.system_power_w and hw.chips_per_system:
        return max(hw.tdp_w, hw.system_power_w / hw.chips_per_system)
    return hw.tdp_w


def idle_power_per_chip_w(hw: HardwareSpec) -> float:
    peak = max_power_per_chip_w(hw)
    return hw.idle_w * (peak / hw.tdp_w) if hw.tdp_w else 0.0


def power_w(hw: HardwareSpec, chips, utilization):
    """chips x (P_idle + u x (P_max - P_idle)); numbers or numpy arrays."""
    u = np.clip(utilization, 0.0, 1.0)
    idle, peak = idle_power_per_chip_w(hw), max_power_per_chip_w(hw)
    p = chips * (idle + u * (peak - idle))
    return float(p) if np.ndim(p) == 0 else p


def energy(hw: HardwareSpec, chips: int, utilization: float, tokens_per_s: float) -> Energy:
    u = float(np.clip(utilization, 0.0, 1.0))
    power = power_w(hw, chips, u)
    price = hw.price_usd_per_hour
    usd = chips * price / SECONDS_PER_HOUR / tokens_per_s * 1e6 if price and tokens_per_s > 0 else None
    tco_h = tco_usd_per_hour(hw, chips, power)
    tco = (tco_h / SECONDS_PER_HOUR / (tokens_per_s * cost_assumptions()["utilization"]) * 1e6
           if tco_h and tokens_per_s > 0 else None)
    return Energy(power, u, tokens_per_s / power if power > 0 else float("inf"), usd, tco)
