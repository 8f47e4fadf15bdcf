"""Everything a cost function needs, resolved once per prediction: widths, achieved rates, links."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError, bad_value
from tokensim.perf.constants import Constants
from tokensim.perf.engines import release_traits
from tokensim.specs.hardware.spec import FALLBACK, HardwareSpec, Link
from tokensim.specs.model.spec import ModelSpec
from tokensim.specs.precision import COMPUTE_BITS, get_precision

ACTIVATION = "bf16"      # activations crossing links
STATE = "fp32"           # linear-attention / SSM recurrent state (mamba_ssm_dtype float32 in Qwen3.5 and Nemotron 3 configs)
INDEXER = "fp8"          # DSA indexer keys are cached in FP8 (docs/model.md, sparse attention)
GROUPS = ("attention", "dense_ffn", "shared_experts", "routed_experts", "embedding", "lm_head")
KV_CORE = "kv_core"      # the rate of the attention core, set by the KV cache's format (make_context)
# the constant that gives a link's achieved share of its line rate, by the medium its hardware file names
MEDIUM_SHARE = {"pcie": "pcie_link_bandwidth_fraction", "pcie-host": "pcie_host_link_bandwidth_fraction"}


@dataclass(frozen=True)
class Rate:
    """Bytes per stored weight, and seconds per FLOP at the achieved compute rate of decode and of prefill."""

    bytes_per_weight: float
    s_per_flop: float            # decode tokens (gemm_flops_fraction)
    s_per_flop_prefill: float    # prompt tokens (prefill_flops_fraction)
    compute: str


@dataclass(frozen=True)
class Context:
    model: ModelSpec
    hw: HardwareSpec
    dep: Deployment
    k: Constants
    rates: dict           # weight group -> Rate
    kv_bytes_per_elem: float
    index_bytes_per_elem: float
    state_bytes_per_elem: float
    act_bytes_per_elem: float
    bytes_per_s: float    # achieved bandwidth of the tier holding weights and KV, streaming weights
    kv_bytes_per_s: float  # achieved bandwidth reading the paged KV cache in attention
    kv_read_per_query_head: bool = False   # the engine release's decode kernel reads GQA's KV once per query head
    fusions: frozenset = frozenset()       # kernel fusions the step runs (perf.engines.FUSIONS; `step_fusions`)

    def link_for(self, group_chips: int) -> Link | None:
        """The link a collective over `group_chips` chips uses: scale-up while the group fits its domain."""
        up = self.hw.link("scale_up")
        if up is not None and (up.domain_chips == 0 or group_chips <= up.domain_chips):
            return up
        return self.hw.link("scale_out") or up

    def link_time(self, nbytes, group_chips, latency_s: float, peer=False, link_latency: bool = True) -> tuple:
        """Time of one collective over `group_chips` chips; for arrays, each element picks its own link.
        `peer` (bool or mask): a point-to-point transfer, which a mesh link serves at its one-peer bandwidth.
        `link_latency` False: `latency_s` is a small-message time measured end to end (NCCL, DeepEP on NVLink), which
        already holds the link's latency; it is then a floor of the link's own latency, never less: the same call over
        a slower link (PCIe staged through host memory, 14 us) cannot finish in NVLink's 5-11 us."""
        def over(link: Link | None):
            if link is None:
                raise TokensimError(f"hardware {self.hw.name}: no link for a collective over {group_chips} chips")
            bw: Any = link.bandwidth_bytes_per_s
            if link.peer_bandwidth_bytes_per_s is not None and np.any(peer):
                bw = np.where(peer, link.peer_bandwidth_bytes_per_s, bw)
                bw = float(bw) if np.ndim(bw) == 0 else bw
            start = latency_s + link.latency_s if link_latency else max(latency_s, link.latency_s)
            share = getattr(self.k, MEDIUM_SHARE.get(link.medium, "link_bandwidth_fraction"))
            return start + nbytes / (share * bw)

        if self.hw.link("scale_up") is None and self.hw.link("scale_out") is None:
            raise TokensimError(
                f"hardware {self.hw.name} has no chip-to-chip link in its file, so a collective over more than one "
                f"chip cannot be timed: add a [[links]] table with its bandwidth and latency (stating the source)")
        if np.ndim(group_chips) == 0:
            link = self.link_for(group_chips)
            return over(link), link.name if link else ""
        up, out = self.hw.link("scale_up"), self.hw.link("scale_out")
        if up is None or out is None or up.domain_chips == 0:
            link = up or out
            return over(link), link.name if link else ""
        return np.where(group_chips <= up.domain_chips, over(up), over(out)), "scale_up/scale_out"


def stored_precision(model: ModelSpec, dep: Deployment, group: str) -> str:
    if group == "routed_experts" and dep.expert_weights:
        return dep.expert_weights
    if dep.weights and group not in ("embedding", "lm_head"):
        return dep.weights
    return getattr(model.weights, group)


def compute_format(hw: HardwareSpec, dep: Deployment, precision_name: str) -> str:
    """The deployment's compute format, else the weights' native one if the chip has it, else the best slower one."""
    if dep.compute:
        return dep.compute
    native = get_precision(precision_name).native_compute
    for fmt in FALLBACK[native]:
        if hw.supports(fmt):
            return fmt
    return "bf16"


def seconds_per_flop(hw: HardwareSpec, fmt: str, k: Constants) -> float:
    """Seconds per FLOP at the sustained peak of compute format `fmt`, before the achieved fractions: a share
    `narrow_format_serial_share` of the time a GEMM would take at the bf16 rate does not shrink with a narrower
    format (activation quantization, scales, epilogues), and the chip holds `sustained_clock_fraction` of its
    datasheet peak under its power limit."""
    peak, wide = hw.peak_flops(fmt), hw.peak_flops("bf16")
    p = k.narrow_format_serial_share if COMPUTE_BITS[fmt] < COMPUTE_BITS["bf16"] and wide < peak else 0.0
    return ((1.0 - p) / peak + p / wide) / k.sustained_clock_fraction


def _rate(bytes_per_elem: float, per_flop: float, fmt: str, k: Constants) -> Rate:
    return Rate(bytes_per_elem, per_flop / k.gemm_flops_fraction,
                per_flop / (k.prefill_flops_fraction * k.prefill_clock_fraction), fmt)


def make_context(model: ModelSpec, hw: HardwareSpec, dep: Deployment, k: Constants) -> Context:
    rates = {}
    for group in GROUPS:
        name = stored_precision(model, dep, group)
        p = get_precision(name)
        fmt = compute_format(hw, dep, name)
        weight_only = p.value_bits < COMPUTE_BITS[fmt]
        rates[group] = _rate(p.bytes_per_element, (k.dequant_overhead if weight_only else 1.0)
                             * seconds_per_flop(hw, fmt, k), fmt, k)
    # the attention core (scores and values over the KV cache) computes in the cache's format where the chip has a
    # rate for it (FP8 attention over an FP8 cache), else in bf16, whatever the projections' weights are stored in
    kv = get_precision(dep.kv)
    narrow = kv.native_compute in ("fp8", "fp4") and hw.supports("fp8")     # an FP4 cache is read into FP8 attention
    kv_fmt = "fp8" if narrow else next((f for f in FALLBACK["bf16"] if hw.supports(f)), "bf16")
    rates[KV_CORE] = _rate(kv.bytes_per_element, seconds_per_flop(hw, kv_fmt, k), kv_fmt, k)
    return Context(
        model=model, hw=hw, dep=dep, k=k, rates=rates,
        kv_bytes_per_elem=get_precision(dep.kv).bytes_per_element,
        index_bytes_per_elem=min(get_precision(INDEXER).bytes_per_element, get_precision(dep.kv).bytes_per_element),
        state_bytes_per_elem=get_precision(STATE).bytes_per_element,
        act_bytes_per_elem=get_precision(ACTIVATION).bytes_per_element,
        bytes_per_s=k.hbm_bandwidth_fraction * hw.weight_tier.bandwidth_bytes_per_s,
        kv_bytes_per_s=k.attention_bandwidth_fraction * hw.weight_tier.bandwidth_bytes_per_s,
        kv_read_per_query_head=release_traits(dep.engine, dep.engine_version).get("gqa_kv_read_per_query_head", False),
        fusions=step_fusions(hw, dep),
    )


# the chip families whose MoE kernels fuse the permute and activation into the first grouped GEMM (trtllm-gen's MoE
# runners are built for sm100 only: cpp/tensorrt_llm/kernels/trtllmGenKernels/blockScaleMoe)
MOE_GEMM1_FAMILIES = ("nvidia-blackwell",)


def step_fusions(hw: HardwareSpec, dep: Deployment) -> frozenset:
    """The kernel fusions a step of `dep` on `hw` runs (the deployment's own; none when it states none); the MoE GEMM-1
    fusion only on the chips whose kernels have it (asking for it on others is an error)."""
    fused = dep.fusions or ()
    if fusions_on(hw, fused) != fused:          # the one fusion a chip can lack: moe_gemm1
        raise bad_value("fusions", "moe_gemm1", f"fusions that {hw.name} ({hw.family}) runs: moe_gemm1 is trtllm-gen's "
                                                f"MoE kernels, built for {', '.join(MOE_GEMM1_FAMILIES)} chips only")
    return frozenset(fused)


def fusions_on(hw: HardwareSpec, fusions: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The part of `fusions` that `hw`'s kernels run (moe_gemm1 only on MOE_GEMM1_FAMILIES chips): a search over
    several chips applies one list to each chip as far as the chip has its kernels, where `step_fusions` refuses."""
    if not fusions:
        return fusions
    return tuple(f for f in fusions if f != "moe_gemm1" or hw.family in MOE_GEMM1_FAMILIES)
