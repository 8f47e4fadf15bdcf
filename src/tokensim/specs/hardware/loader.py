"""Load hardware specs from TOML or YAML files (safe parsers only; nothing in a file is executed)."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from tokensim.errors import TokensimError, bad_value
from tokensim.specs.hardware.spec import HardwareSpec, Link, MemoryTier


def read_mapping(path: Path) -> dict[str, Any]:
    """Parse a TOML or YAML file into a dict, with a one-line error naming the file on failure."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokensimError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0]
        raise TokensimError(f"{path}: not valid {path.suffix.lstrip('.').upper()} ({first})") from None
    if not isinstance(data, dict):
        raise bad_value(str(path), type(data).__name__, "a mapping of fields")
    return data


def _number(d: dict, key: str, where: str, default: float | None = None) -> float:
    value = d.get(key, default)
    if value is None:
        raise bad_value(f"{where}.{key}", None, "a number (field missing)")
    if isinstance(value, str):
        try:                # YAML 1.1 reads 96.0e9 (no exponent sign) as a string; float() parses it, nothing runs
            return float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_value(f"{where}.{key}", value, "a number")
    return float(value)


def hardware_from_dict(d: dict[str, Any], origin: str = "") -> HardwareSpec:
    where = d.get("name", origin) or origin
    for key in ("name", "kind", "memory", "compute"):
        if key not in d:
            raise bad_value(f"{where}.{key}", None, "a value (field missing)")
    memory = tuple(
        MemoryTier(
            tier=str(m.get("tier", "")),
            capacity_bytes=_number(m, "capacity_bytes", f"{where}.memory"),
            bandwidth_bytes_per_s=_number(m, "bandwidth_bytes_per_s", f"{where}.memory"),
            holds_weights=bool(m.get("holds_weights", True)),
            source=str(m.get("source", "")),
        )
        for m in d["memory"]
    )
    compute = d["compute"]
    flops = tuple(
        (key.removesuffix("_flops_per_s"), _number(compute, key, f"{where}.compute"))
        for key in compute
        if key.endswith("_flops_per_s")
    )
    links = tuple(
        Link(
            name=str(l.get("name", "")),
            bandwidth_bytes_per_s=_number(l, "bandwidth_bytes_per_s", f"{where}.links"),
            latency_s=_number(l, "latency_s", f"{where}.links"),
            domain_chips=int(_number(l, "domain_chips", f"{where}.links", 0)),
            source=str(l.get("source", "")),
            peer_bandwidth_bytes_per_s=_number(l, "peer_bandwidth_bytes_per_s", f"{where}.links")
            if "peer_bandwidth_bytes_per_s" in l else None,
        )
        for l in d.get("links", [])
    )
    power = d.get("power", {})
    price = d.get("price", {})
    system = d.get("system", {})
    sources = [("compute", str(compute.get("source", "")))]
    if power:
        sources.append(("power", str(power.get("source", ""))))
    if system:
        sources.append(("system", str(system.get("source", ""))))
    if price:
        sources.append(("price", f"{price.get('source', '')} ({price.get('date', 'date unknown')})"))
    return HardwareSpec(
        name=str(d["name"]),
        display_name=str(d.get("display_name", d["name"])),
        vendor=str(d.get("vendor", "")),
        kind=str(d["kind"]),
        family=str(d.get("family", d["kind"])),
        memory=memory,
        flops_per_s=flops,
        links=links,
        tdp_w=_number(power, "tdp_w", f"{where}.power", 0.0),
        idle_w=_number(power, "idle_w", f"{where}.power", 0.0),
        chips_per_system=int(_number(system, "chips", f"{where}.system", 1)),
        system_power_w=_number(system, "power_w", f"{where}.system") if "power_w" in system else None,
        price_usd_per_hour=price.get("usd_per_hour"),
        purchase_usd=price.get("purchase_usd"),
        aliases=tuple(d.get("aliases", ())),
        notes=str(d.get("notes", "")).strip(),
        sources=tuple(sources),
    )


def load_hardware_file(path: str | Path) -> HardwareSpec:
    path = Path(path)
    return hardware_from_dict(read_mapping(path), origin=path.name)
