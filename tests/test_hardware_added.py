"""The added catalog chips (RTX PRO 6000, L40S, L4, A10G, MI250X, Gaudi 3, Trainium2): each loads, a few figures
match the datasheet value they were taken from (URL in the comment), and every table carries a source."""
from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

try:
    from tokensim.specs.hardware.loader import load_hardware_file
except ImportError:  # the older package layout
    from tokensim.hardware.loader import load_hardware_file

HW_DIR = Path(str(resources.files("tokensim") / "data" / "hardware"))
ADDED = ["rtx-pro-6000", "l40s", "l4", "a10g", "mi250x", "gaudi-3", "trainium-2"]
FAMILY = {
    "rtx-pro-6000": "nvidia-blackwell-rtx", "l40s": "nvidia-ada", "l4": "nvidia-ada", "a10g": "nvidia-ampere",
    "mi250x": "amd-cdna2", "gaudi-3": "intel-gaudi", "trainium-2": "aws-trainium",
}


def _raw(name: str) -> dict:
    return tomllib.loads((HW_DIR / f"{name}.toml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def specs():
    return {name: load_hardware_file(HW_DIR / f"{name}.toml") for name in ADDED}


def test_added_files_load_with_their_name_family_and_a_known_kind(specs):
    for name, spec in specs.items():
        assert spec.name == name
        assert spec.family == FAMILY[name]
        assert spec.kind == "gpu"


def test_every_table_of_the_added_files_has_a_source():
    """Each [[memory]], [compute], [[links]] and [power] table (and [system]/[price] where present) has a
    non-empty source naming a URL or an assumption."""
    for name in ADDED:
        d = _raw(name)
        tables = [("memory", m) for m in d["memory"]] + [("compute", d["compute"]), ("power", d["power"])]
        tables += [("links", link) for link in d["links"]]
        tables += [(key, d[key]) for key in ("system", "price") if key in d]
        for what, table in tables:
            src = str(table.get("source", "")).strip()
            assert src, f"{name}.toml: [{what}] has no source"
            assert "http" in src or "assumption" in src.lower(), f"{name}.toml: [{what}] source names no URL"


def test_multi_chip_parts_have_a_scale_up_link(specs):
    for spec in specs.values():
        assert spec.link("scale_up") is not None, spec.name
        assert spec.link("scale_up").domain_chips >= 2, spec.name


def test_no_sparse_or_fp32_keys():
    for name in ADDED:
        keys = set(_raw(name)["compute"]) - {"source"}
        assert all(k.endswith("_flops_per_s") for k in keys), name
        assert "fp32_flops_per_s" not in keys, name


def test_rtx_pro_6000(specs):
    s = specs["rtx-pro-6000"]
    # 96 GB GDDR7 at 1,597 GB/s (Server Edition): https://www.nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/
    assert s.capacity_bytes == 96e9
    assert s.weight_tier.tier == "dram"
    assert s.weight_tier.bandwidth_bytes_per_s == pytest.approx(1.597e12)
    # dense BF16 503.8 TF on the Workstation card (https://hmc-tech.com/gpu/nvidia-rtx-pro-6000-blackwell-vs-amd-radeon-pro-duo-polaris)
    # x 120/125.95 (Server Edition datasheet FP32 ratio) = ~480 TF; FP4 dense = 4x BF16, never the 4 PF sparse figure
    assert s.peak_flops("bf16") == pytest.approx(503.8e12 * 120 / 125.95, rel=0.01)
    assert s.peak_flops("fp4") == pytest.approx(4 * s.peak_flops("bf16"))
    assert s.peak_flops("fp4") < 3e15
    # 600 W (configurable up to 600 W): https://dam-cdn.nvd.orangelogic.com/AssetLink/707m1632ypg4du1fj3ci1jo3h4w1k78j.pdf
    assert s.tdp_w == 600
    # PCIe 5.0 x16, no NVLink: 64 GB/s per direction
    assert s.link("scale_up").bandwidth_bytes_per_s == 64e9
    for alias in ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000", "RTXPRO6000",
                  "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"):
        assert alias in s.aliases


def test_l40s(specs):
    s = specs["l40s"]
    # BF16 362.05 TF dense (733 sparse), FP8 733 dense, 48 GB at 864 GB/s, 350 W:
    # https://www.mullet.se/product.html?product_id=355414 (NVIDIA L40/L40S datasheet table)
    assert s.peak_flops("bf16") == pytest.approx(362e12, rel=0.01)
    assert s.peak_flops("fp8") == pytest.approx(733e12, rel=0.01)
    assert s.capacity_bytes == 48e9
    assert s.weight_tier.bandwidth_bytes_per_s == 864e9
    assert s.tdp_w == 350


def test_l4(specs):
    s = specs["l4"]
    # 24 GB at 300 GB/s; BF16 242 TF and FP8 485 TF with sparsity -> 121 / 242.5 dense; 72 W:
    # https://grokipedia.com/page/NVIDIA_L4_vs_L40S , https://www.yobitel.com/knowledge-base/nvidia-l4
    assert s.capacity_bytes == 24e9
    assert s.weight_tier.bandwidth_bytes_per_s == 300e9
    assert s.peak_flops("bf16") == pytest.approx(242e12 / 2, rel=0.01)
    assert s.peak_flops("fp8") == pytest.approx(485e12 / 2, rel=0.01)
    assert s.tdp_w == 72


def test_a10g(specs):
    s = specs["a10g"]
    # 24 GB GDDR6 at 600 GB/s: https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/
    assert s.capacity_bytes == 24e9
    assert s.weight_tier.tier == "dram"
    assert s.weight_tier.bandwidth_bytes_per_s == 600e9
    # ~70 TF dense BF16 (measured 69.47 TF: https://github.com/zzc0721/torch-performance-test-data/issues/126); no FP8 on Ampere
    assert s.peak_flops("bf16") == pytest.approx(70e12, rel=0.02)
    assert not s.supports("fp8")
    # 300 W from nvidia-smi: https://gist.github.com/shashankprasanna/10ebe6dc1ba1d8d93db17da4e2cc890e
    assert s.tdp_w == 300


def test_mi250x_is_one_gcd(specs):
    s = specs["mi250x"]
    # package 128 GB HBM2e, 3.2768 TB/s, 383 TF FP16/BF16, 560 W; one GCD is half of each:
    # https://docs.olcf.ornl.gov/systems/frontier_user_guide.html (8 GCDs per node, 64 GB each)
    assert s.capacity_bytes == 64e9
    assert s.weight_tier.bandwidth_bytes_per_s == pytest.approx(3.2768e12 / 2)
    assert s.peak_flops("bf16") == pytest.approx(383e12 / 2)
    assert not s.supports("fp8")
    assert s.tdp_w == 560 / 2
    assert s.chips_per_system == 8


def test_gaudi_3(specs):
    s = specs["gaudi-3"]
    # 128 GB HBM2e at 3.67 TB/s, BF16 = FP8 = 1,835 TF, 900 W air OAM: https://www.sgpjbg.com/baogao/465025.html (Hot Chips 2024)
    assert s.capacity_bytes == 128e9
    assert s.weight_tier.bandwidth_bytes_per_s == pytest.approx(3.67e12)
    assert s.peak_flops("bf16") == 1835e12
    assert s.peak_flops("fp8") == 1835e12
    assert s.tdp_w == 900
    # 21 x 200 GbE scale-up = 525 GB/s per direction, 3 x 200 GbE scale-out = 75 GB/s:
    # https://docs.habana.ai/en/latest/Management_and_Monitoring/Network_Configuration/index.html
    assert s.link("scale_up").bandwidth_bytes_per_s == 525e9
    assert s.link("scale_up").peer_bandwidth_bytes_per_s == 75e9
    assert s.link("scale_out").bandwidth_bytes_per_s == 75e9


def test_trainium_2(specs):
    s = specs["trainium-2"]
    # 96 GiB at 2.9 TB/s, 667 BF16 / 1,299 FP8 dense TFLOPS:
    # https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.0/_sources/about-neuron/arch/neuron-hardware/trainium2.rst
    assert s.capacity_bytes == pytest.approx(96 * 2**30, rel=1e-3)
    assert s.weight_tier.bandwidth_bytes_per_s == 2.9e12
    assert s.peak_flops("bf16") == 667e12
    assert s.peak_flops("fp8") == 1299e12
    # 16 chips per trn2.48xlarge: https://glennklockwood.com/garden/processors/trainium2
    assert s.link("scale_up").domain_chips == 16
    assert s.chips_per_system == 16
