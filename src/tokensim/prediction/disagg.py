"""Disaggregated serving: attention and FFN on different pools (AFD), prefill and decode on different pools (PD).

AFD (MegaScale-Infer, Step-3): attention and its KV on pool A, FFN/experts on pool B, possibly another
kind of chip; every layer sends the tokens' activations A -> B and back over a named link. With m
micro-batches in ping-pong the three stages (attention, transfer, FFN) overlap, so a layer costs about
m x the slowest stage at batch/m plus the fill of the others; one micro-batch pays their sum.
PD: TTFT = prefill on the prefill pool + KV transfer + one decode step; decode speed from the decode pool.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tokensim.deploy.deployment import Deployment
from tokensim.deploy.layout import check_against_model
from tokensim.errors import TokensimError, require
from tokensim.perf.constants import ConstantsTable, table_or_default
from tokensim.perf.context import make_context
from tokensim.perf.energy import SECONDS_PER_HOUR, cost_assumptions, power_w, tco_usd_per_hour
from tokensim.perf.layers import Batch
from tokensim.perf.memory import kv_bytes_per_token, memory_use
from tokensim.perf.ops import OpCost, summarize
from tokensim.perf.step import step_cost
from tokensim.prediction.predictor import Prediction, decode_context, fewest_by_capacity, predict_deployment
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import Layer, ModelSpec


@dataclass(frozen=True)
class LinkSpec:
    """A link between two pools: bandwidth per sending chip and per direction, and latency."""

    bandwidth_bytes_per_s: float
    latency_s: float
    name: str = "afd link"

    def __post_init__(self) -> None:
        require(self.bandwidth_bytes_per_s > 0, "link.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, "a positive number")
        require(self.latency_s >= 0, "link.latency_s", self.latency_s, "zero or more seconds")


def attention_part(model: ModelSpec) -> ModelSpec:
    return replace(model, layers=tuple(Layer(layer.mixer, None, layer.norm_params) for layer in model.layers))


def ffn_part(model: ModelSpec) -> ModelSpec:
    return replace(model, layers=tuple(Layer(None, layer.ffn, 0) for layer in model.layers), embed_params=0, lm_head_params=0)


def _check_pool(model: ModelSpec, hw: HardwareSpec, dep: Deployment, head: bool, pool: str, table: ConstantsTable) -> None:
    ctx = make_context(model, hw, dep, table.for_hardware(hw, dep.engine))
    use = memory_use(ctx, dep.batch, dep.input_tokens + dep.output_tokens, head=head)
    if not use.fits:
        raise TokensimError(
            f"{pool} pool does not fit: needs {use.per_chip_bytes / 1e9:.1f} GB per chip (weights "
            f"{use.weights_per_chip_bytes / 1e9:.1f} GB + KV {use.kv_per_chip_bytes / 1e9:.1f} GB) against "
            f"{use.capacity_per_chip_bytes / 1e9:.1f} GB usable on {hw.name}"
            + (f", pipeline stage {use.stage}" if dep.pp > 1 else ""))


def predict_afd(model: ModelSpec, attn_hw: HardwareSpec, attn_dep: Deployment, ffn_hw: HardwareSpec,
                ffn_dep: Deployment, link: LinkSpec, micro_batches: int = 2,
                constants: ConstantsTable | None = None) -> Prediction:
    """Tokens/s per user and throughput with attention on one pool and FFN/experts on another."""
    require(micro_batches >= 1, "afd.micro_batches", micro_batches, "an integer >= 1")
    require(attn_dep.pp == 1, "attention.pp", attn_dep.pp, "1 (the attention pool holds every layer's attention)")
    ffn_dep = replace(ffn_dep, batch=attn_dep.batch, input_tokens=attn_dep.input_tokens,
                      output_tokens=attn_dep.output_tokens, spec=None)
    a_model, f_model = attention_part(model), ffn_part(model)
    check_against_model(a_model, attn_dep)
    check_against_model(f_model, replace(ffn_dep, tp=1))
    table = table_or_default(constants)
    _check_pool(a_model, attn_hw, attn_dep, True, "attention", table)
    _check_pool(f_model, ffn_hw, ffn_dep, False, "FFN", table)
    m = min(micro_batches, attn_dep.batch)
    ctx_a = make_context(a_model, attn_hw, attn_dep, table.for_hardware(attn_hw, attn_dep.engine))
    ctx_f = make_context(f_model, ffn_hw, ffn_dep, table.for_hardware(ffn_hw, ffn_dep.engine))
    seqs = attn_dep.seqs_per_rank / m
    tokens = attn_dep.batch / m                       # tokens of one micro-batch crossing per layer
    a = step_cost(ctx_a, Batch.decode(seqs, decode_context(attn_dep), moe_tokens=seqs * attn_dep.attn_dp))
    f = step_cost(ctx_f, Batch.decode(tokens / ffn_dep.dp, decode_context(attn_dep), moe_tokens=tokens / ffn_dep.dp), head=False)
    n = model.n_layers
    nbytes = tokens * model.hidden_size * ctx_a.act_bytes_per_elem / attn_dep.chips      # per sending chip, one direction
    x = link.latency_s + nbytes / link.bandwidth_bytes_per_s
    per_layer_a = sum(a.stage_s) / n                   # stage times exclude host time (added once below)
    per_layer_f = sum(f.stage_s) / n                   # activations return to the attention pool after every
    stages = (per_layer_a, x, per_layer_f, x)          # layer, so FFN stages never hand over to each other
    per_layer = m * max(stages) + sum(stages) - max(stages) if m > 1 else sum(stages)
    tpot = n * per_layer + a.host_s
    transfer = OpCost("afd.transfer", 0.0, 0.0, 2 * nbytes * n, link.name, 0.0, 0.0, 2 * x * n, 0.0)
    ops = [(o.scaled(m), c) for o, c in a.ops] + [(o.scaled(m), c) for o, c in f.ops if o.name != "pp.hop"]
    ops.append((transfer.scaled(m), 2 * n))
    base = predict_deployment(a_model, attn_hw, attn_dep, constants=table)
    chips = attn_dep.chips + ffn_dep.chips
    throughput = attn_dep.batch / tpot
    # power and cost over both pools; each pool's chips are busy m times their busy time per token step
    u_a = m * sum(a.stage_busy_s) / tpot
    u_f = m * sum(f.stage_busy_s) / (len(f.stage_busy_s) * tpot)
    power = power_w(attn_hw, attn_dep.chips, u_a) + power_w(ffn_hw, ffn_dep.chips, u_f)
    usd = None
    if attn_hw.price_usd_per_hour and ffn_hw.price_usd_per_hour:
        usd = ((attn_dep.chips * attn_hw.price_usd_per_hour + ffn_dep.chips * ffn_hw.price_usd_per_hour)
               / SECONDS_PER_HOUR / throughput * 1e6)
    tco_a, tco_f = tco_usd_per_hour(attn_hw, attn_dep.chips, 0.0), tco_usd_per_hour(ffn_hw, ffn_dep.chips, 0.0)
    tco = None
    if tco_a is not None and tco_f is not None:
        tco = (tco_a + tco_f + power / 1e3 * cost_assumptions()["pue"] * cost_assumptions()["electricity_usd_per_kwh"]) \
            / SECONDS_PER_HOUR / throughput * 1e6
    # TTFT: the prompt's attention on pool A (as predicted for it), its FFN on pool B, and 2 crossings per layer
    n_in = float(attn_dep.input_tokens)
    pre_f = step_cost(ctx_f, Batch.prefill(1.0, n_in, position=n_in / 2.0, moe_tokens=n_in), head=False)
    prompt_x = 2 * n * (link.latency_s + attn_dep.input_tokens * model.hidden_size * ctx_a.act_bytes_per_elem
                        / (attn_dep.chips * link.bandwidth_bytes_per_s))
    ttft = base.ttft_s + sum(pre_f.stage_s) + prompt_x
    r_speed = (1.0 / tpot) / base.tokens_per_s_per_user
    r_ttft = ttft / base.ttft_s
    notes = (f"attention-FFN disaggregation: attention on {attn_dep.chips} x {attn_hw.name}, FFN on "
             f"{ffn_dep.chips} x {ffn_hw.name}, {m} micro-batches; per layer attention {per_layer_a * 1e6:.1f} us, "
             f"transfer {x * 1e6:.1f} us each way, FFN {per_layer_f * 1e6:.1f} us",)
    lo, hi = base.tokens_per_s_per_user_range
    t_lo, t_hi = base.ttft_s_range     # the attention pool's calibrated ranges, scaled with the split's own figures
    return replace(base, model=model.name, hardware=f"{attn_hw.name}+{ffn_hw.name}", chips=chips,
                   tokens_per_s_per_user=1.0 / tpot, time_per_output_token_s=tpot, throughput_tokens_per_s=throughput,
                   throughput_tokens_per_s_per_chip=throughput / chips, throughput_tokens_per_s_per_system=throughput,
                   ttft_s=ttft, ttft_s_range=(t_lo * r_ttft, t_hi * r_ttft), ttft_s_estimate=base.ttft_s_estimate * r_ttft,
                   tokens_per_s_per_user_range=(lo * r_speed, hi * r_speed),
                   tokens_per_s_per_user_estimate=base.tokens_per_s_per_user_estimate * r_speed,
                   power_w=power, tokens_per_joule=throughput / power,
                   sequences_per_s_per_kw=throughput / attn_dep.output_tokens / (power / 1e3),
                   usd_per_million_tokens=usd, tco_usd_per_million_tokens=tco, breakdown=summarize(ops),
                   min_chips=base.min_chips + fewest_by_capacity(ctx_f, ctx_f.k.usable_memory_fraction * ffn_hw.capacity_bytes),
                   bandwidth_bound_tokens_per_s_per_user=math.nan, roofline_bound_tokens_per_s_per_user=math.nan,
                   assumptions=base.assumptions + notes + ("bounds: not computed for a split across two pools",))


def predict_pd(model: ModelSpec, prefill_hw: HardwareSpec, prefill_dep: Deployment, decode_hw: HardwareSpec,
               decode_dep: Deployment, link: LinkSpec, constants: ConstantsTable | None = None) -> Prediction:
    """Prefill on one pool, decode on another: TTFT adds the KV transfer; speed comes from the decode pool."""
    prefill = predict_deployment(model, prefill_hw, replace(prefill_dep, batch=1, input_tokens=decode_dep.input_tokens,
                                                             output_tokens=decode_dep.output_tokens), constants=constants)
    decode = predict_deployment(model, decode_hw, decode_dep, constants=constants)
    kv = decode_dep.input_tokens * kv_bytes_per_token(model, decode_dep.kv)
    transfer_s = link.latency_s + kv / (link.bandwidth_bytes_per_s * prefill_dep.chips)
    ttft = prefill.ttft_s + transfer_s + decode.time_per_output_token_s
    note = (f"prefill-decode disaggregation: prefill on {prefill_dep.chips} x {prefill_hw.name} "
            f"({prefill.ttft_s * 1e3:.1f} ms), KV {kv / 1e6:.1f} MB moved in {transfer_s * 1e3:.2f} ms, "
            f"decode on {decode_dep.chips} x {decode_hw.name}",)
    lo, hi = decode.ttft_s_range
    scale = ttft / decode.ttft_s if decode.ttft_s else 1.0
    return replace(decode, ttft_s=ttft, ttft_s_range=(lo * scale, hi * scale), ttft_s_estimate=decode.ttft_s_estimate * scale,
                   prefill_breakdown=prefill.prefill_breakdown,
                   hardware=f"{prefill_hw.name}->{decode_hw.name}", assumptions=decode.assumptions + note)
