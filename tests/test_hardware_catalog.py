"""The shipped hardware catalog: every file loads, every figure carries a source, and the figures are sane."""
from __future__ import annotations

import csv
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from tokensim.catalog import normalize
from tokensim.specs.hardware.loader import load_hardware_file
from tokensim.specs.precision import COMPUTE_ORDER

DATA = Path(str(resources.files("tokensim") / "data"))
HW_DIR = DATA / "hardware"
FILES = sorted(HW_DIR.glob("*.toml"))

REQUIRED = {
    "a100-sxm", "h100-sxm", "h200", "b200", "b300", "gb200-nvl72", "gb300-nvl72",
    "mi300x", "mi325x", "mi355x", "cs-3", "cs-2", "groq-lpu", "sn40l",
    "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7", "rtx-4090", "cpu-server",
}
FAMILIES = {
    "nvidia-ampere", "nvidia-hopper", "nvidia-blackwell", "nvidia-ada", "amd-cdna3", "amd-cdna4",
    "cerebras-wafer", "groq-lpu", "sambanova-rdu", "google-tpu", "cpu",
    "nvidia-blackwell-rtx", "amd-cdna2", "intel-gaudi", "aws-trainium",
}
# measurements.csv spellings that name no single catalog chip; a prediction for those rows states its assumption.
UNMAPPABLE = {"", "NVIDIA GPU (undisclosed)", "NVIDIA Blackwell Ultra (system size not in excerpt)"}

# Sane per-chip ranges (a wafer counts as one chip). Bytes, bytes/s, FLOP/s, seconds, watts.
CAPACITY = {"sram": (1e6, 1e11), "hbm": (8e9, 5e11), "dram": (8e9, 1e13)}
BANDWIDTH = {"sram": (1e12, 1e17), "hbm": (5e11, 2e13), "dram": (1e10, 2e12)}
FLOPS = (1e11, 1e17)
LINK_BW = {"scale_up": (1e10, 2e12), "scale_out": (1e9, 5e11)}
LATENCY = (1e-7, 1e-4)
TDP = (50, 1e5)     # the L4 is a 72 W card


def _raw(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _sourced(text: object) -> bool:
    s = str(text or "").strip()
    return bool(s) and ("http" in s or "assumption" in s.lower())


@pytest.fixture(scope="module")
def specs():
    return {p.stem: load_hardware_file(p) for p in FILES}


def test_every_file_loads_and_is_named_after_its_name_field(specs):
    """Every TOML in data/hardware loads with load_hardware_file, and its file name is `name` + '.toml'."""
    assert FILES, "no hardware files found"
    for stem, spec in specs.items():
        assert spec.name == stem, f"{stem}.toml has name = {spec.name!r}"


def test_required_names_exist(specs):
    """The catalog holds at least every chip the brief names, each with a known kind and family."""
    missing = REQUIRED - set(specs)
    assert not missing, f"missing hardware files: {sorted(missing)}"
    for spec in specs.values():
        assert spec.family in FAMILIES, f"{spec.name}: unknown family {spec.family!r}"


def test_every_table_carries_a_source():
    """Each [[memory]], [compute], [[links]], [power], [system] and [price] table has a non-empty `source` that
    contains a URL ('http') or says the figure is an 'assumption'; a [price] also has a `date`."""
    for path in FILES:
        d = _raw(path)
        tables = [("memory", m) for m in d["memory"]] + [("compute", d["compute"])]
        tables += [("links", link) for link in d.get("links", [])]
        tables += [(key, d[key]) for key in ("power", "system", "price") if key in d]
        for what, table in tables:
            assert _sourced(table.get("source")), f"{path.name}: [{what}] has no usable source"
        if "price" in d:
            assert str(d["price"].get("date", "")).strip(), f"{path.name}: [price] has no date"
        assert str(d.get("notes", "")).strip(), f"{path.name}: no notes explaining the decisions"


def test_compute_keys_are_known_dense_formats_only():
    """[compute] holds only <format>_flops_per_s keys for formats the model knows, plus `source`; chips without
    a native format do not list it (no fp8 on A100, no fp4 on Hopper or CDNA3)."""
    allowed = {f"{fmt}_flops_per_s" for fmt in COMPUTE_ORDER if fmt != "fp32"} | {"source"}
    for path in FILES:
        keys = set(_raw(path)["compute"])
        assert keys <= allowed, f"{path.name}: unexpected compute keys {sorted(keys - allowed)}"
    no_fp8 = {"a100-sxm"}
    no_fp4 = {"a100-sxm", "h100-sxm", "h200", "h800", "mi300x", "mi325x"}
    for path in FILES:
        keys = set(_raw(path)["compute"])
        if path.stem in no_fp8:
            assert "fp8_flops_per_s" not in keys, f"{path.name} lists fp8"
        if path.stem in no_fp4:
            assert "fp4_flops_per_s" not in keys, f"{path.name} lists fp4"


def test_figures_are_physically_sane(specs):
    """Capacities, bandwidths, FLOP/s, link bandwidths (per chip, per direction), latencies and power sit in
    physically sane ranges; memory tiers are listed fastest first; lower precision is never slower than fp8/bf16
    (int8 excepted: Blackwell Ultra cut it); idle < TDP; a system draws at least its chips' TDP."""
    for spec in specs.values():
        bws = [t.bandwidth_bytes_per_s for t in spec.memory]
        assert bws == sorted(bws, reverse=True), f"{spec.name}: memory tiers not fastest first"
        assert any(t.holds_weights for t in spec.memory), f"{spec.name}: no tier holds weights"
        for t in spec.memory:
            lo, hi = CAPACITY[t.tier]
            assert lo <= t.capacity_bytes <= hi, f"{spec.name}: {t.tier} capacity {t.capacity_bytes:g}"
            lo, hi = BANDWIDTH[t.tier]
            assert lo <= t.bandwidth_bytes_per_s <= hi, f"{spec.name}: {t.tier} bandwidth {t.bandwidth_bytes_per_s:g}"
        rates = dict(spec.flops_per_s)
        for fmt, value in rates.items():
            assert FLOPS[0] <= value <= FLOPS[1], f"{spec.name}: {fmt} {value:g} FLOP/s"
        if "fp8" in rates:
            assert rates["fp8"] >= rates["bf16"], f"{spec.name}: fp8 slower than bf16"
        if "fp4" in rates:
            assert rates["fp4"] >= rates["fp8"], f"{spec.name}: fp4 slower than fp8"
        names = [link.name for link in spec.links]
        assert len(names) == len(set(names)), f"{spec.name}: duplicate link names"
        for link in spec.links:
            lo, hi = LINK_BW[link.name]
            assert lo <= link.bandwidth_bytes_per_s <= hi, f"{spec.name}: {link.name} {link.bandwidth_bytes_per_s:g} B/s"
            assert LATENCY[0] <= link.latency_s <= LATENCY[1], f"{spec.name}: {link.name} latency {link.latency_s:g}"
            assert link.domain_chips >= 0
            if link.name == "scale_up":
                assert link.domain_chips >= 2, f"{spec.name}: scale_up domain of {link.domain_chips}"
        up, out = spec.link("scale_up"), spec.link("scale_out")
        if up and out:
            assert up.bandwidth_bytes_per_s > out.bandwidth_bytes_per_s, f"{spec.name}: NIC faster than scale-up"
        if spec.tdp_w:
            assert TDP[0] <= spec.tdp_w <= TDP[1], f"{spec.name}: TDP {spec.tdp_w}"
            assert 0 < spec.idle_w < spec.tdp_w, f"{spec.name}: idle {spec.idle_w} vs TDP {spec.tdp_w}"
        assert spec.chips_per_system >= 1
        if spec.system_power_w and spec.tdp_w:
            assert spec.system_power_w >= spec.chips_per_system * spec.tdp_w, f"{spec.name}: system below its chips' TDP"
        if spec.price_usd_per_hour is not None:
            assert 0.1 <= spec.price_usd_per_hour <= 50, f"{spec.name}: ${spec.price_usd_per_hour}/h"


def test_weight_tier_matches_the_kind(specs):
    """Wafers and LPUs keep weights in on-chip SRAM; GPUs, TPUs and RDUs in HBM (GDDR counts as dram);
    CPUs in DRAM."""
    expected = {"wafer": {"sram"}, "lpu": {"sram"}, "gpu": {"hbm", "dram"}, "tpu": {"hbm"}, "rdu": {"hbm"}, "cpu": {"dram"}}
    for spec in specs.values():
        assert spec.weight_tier.tier in expected[spec.kind], f"{spec.name}: weights in {spec.weight_tier.tier}"


def test_no_two_files_share_an_alias(specs):
    """After the lookup's normalization (case, punctuation, vendor words), no name, display name or alias
    of one file equals one of another file."""
    owner: dict[str, str] = {}
    for spec in specs.values():
        for alias in {spec.name, spec.display_name, *spec.aliases}:
            key = normalize(alias)
            assert key, f"{spec.name}: alias {alias!r} normalizes to nothing"
            assert owner.setdefault(key, spec.name) == spec.name, (
                f"alias {alias!r} of {spec.name} collides with {owner[key]}"
            )


def test_measurement_hardware_spellings_resolve(specs):
    """Every hardware spelling in measurements.csv (except the few that name no chip) maps to exactly one
    catalog file through the normalized aliases."""
    path = DATA / "measurements.csv"
    if not path.exists():
        pytest.skip("measurements.csv not shipped")
    index = {normalize(a): s.name for s in specs.values() for a in (s.name, s.display_name, *s.aliases)}
    with path.open(encoding="utf-8") as f:
        spellings = {row["hardware"] for row in csv.DictReader(f)}
    unresolved = sorted(h for h in spellings - UNMAPPABLE if normalize(h) not in index)
    assert not unresolved, f"measurement hardware with no catalog entry: {unresolved}"
    assert index[normalize("NVIDIA B200 180GB (DGX B200)")] == "b200"
    assert index[normalize("Cerebras CS-3 (WSE-3)")] == "cs-3"
    assert index[normalize("AMD MI300X")] == "mi300x"
    assert index[normalize("NVIDIA A100 80GB SXM (power-limited 330W)")] == "a100-sxm"


def test_decided_figures(specs):
    """The ambiguous figures keep the decided convention: links per chip per direction, usable capacity,
    dense compute, rack figures divided per GPU, and the Cerebras dense rate labelled as an assumption."""
    assert specs["h100-sxm"].link("scale_up").bandwidth_bytes_per_s == 450e9  # 900 GB/s bidirectional
    assert specs["b200"].capacity_bytes == 180e9  # HGX/DGX exposes 180 of 192 GB
    assert specs["b200"].tdp_w == 1000
    assert specs["gb200-nvl72"].chips_per_system == 72
    assert specs["gb200-nvl72"].link("scale_up").domain_chips == 72
    assert specs["gb200-nvl72"].tdp_w == 1200
    assert specs["gb300-nvl72"].link("scale_up").domain_chips == 72
    cs3 = specs["cs-3"]
    assert cs3.kind == "wafer" and cs3.chips_per_system == 1
    assert cs3.weight_tier.tier == "sram" and cs3.capacity_bytes == 44e9
    assert cs3.link("scale_out").bandwidth_bytes_per_s == 150e9
    assert cs3.peak_flops("bf16") == pytest.approx(125e15 / 4)
    assert "assumption" in _raw(HW_DIR / "cs-3.toml")["compute"]["source"].lower()
    assert specs["sn40l"].weight_tier.tier == "hbm"
    assert [t.tier for t in specs["sn40l"].memory] == ["sram", "hbm", "dram"]
    assert specs["groq-lpu"].link("scale_up") is not None
    assert specs["rtx-4090"].capacity_bytes == 24e9
    assert specs["rtx-4090"].weight_tier.bandwidth_bytes_per_s == 1.008e12
