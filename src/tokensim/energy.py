"""Power, energy per token and cost per token from hardware figures and a step's busy fraction.

P = chips x (P_idle + u x (P_max - P_idle)) with u the busy share of the step (theory.md section 6);
P_max per chip is the system's published power divided by its chips when known (hosts, switches and
NICs included), else the chip's TDP. Prices are $ per chip-hour from the hardware file.
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware.spec import HardwareSpec

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Energy:
    power_w: float
    utilization: float
    tokens_per_joule: float
    usd_per_million_tokens: float | None


def max_power_per_chip_w(hw: HardwareSpec) -> float:
    if hw.system_power_w and hw.chips_per_system:
        return max(hw.tdp_w, hw.system_power_w / hw.chips_per_system)
    return hw.tdp_w


def idle_power_per_chip_w(hw: HardwareSpec) -> float:
    peak = max_power_per_chip_w(hw)
    return hw.idle_w * (peak / hw.tdp_w) if hw.tdp_w else 0.0


def energy(hw: HardwareSpec, chips: int, utilization: float, tokens_per_s: float) -> Energy:
    u = min(max(utilization, 0.0), 1.0)
    idle, peak = idle_power_per_chip_w(hw), max_power_per_chip_w(hw)
    power = chips * (idle + u * (peak - idle))
    price = hw.price_usd_per_hour
    usd = chips * price / SECONDS_PER_HOUR / tokens_per_s * 1e6 if price and tokens_per_s > 0 else None
    return Energy(power, u, tokens_per_s / power if power > 0 else float("inf"), usd)
