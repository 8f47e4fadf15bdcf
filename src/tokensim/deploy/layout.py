"""Checks a deployment against a model, and picks the fewest chips when the user gives no layout."""
from __future__ import annotations

import math
from dataclasses import replace

from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError, bad_value
from tokensim.perf.constants import ConstantsTable, for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.memory import memory_use
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import Attention, ModelSpec, MoE

SRAM_KINDS = ("wafer", "lpu")


def check_context(model: ModelSpec, dep: Deployment) -> None:
    """A sequence longer than the model's context window is refused."""
    length = dep.input_tokens + dep.output_tokens
    if model.max_context_tokens and length > model.max_context_tokens:
        raise bad_value("input_tokens + output_tokens", length,
                        f"at most the model's {model.max_context_tokens:,}-token context (max_position_embeddings)")


def check_against_model(model: ModelSpec, dep: Deployment) -> None:
    """Degrees that don't divide heads or experts, and sequences longer than the model's context, are refused."""
    check_context(model, dep)
    for att in {layer.mixer for layer in model.layers if isinstance(layer.mixer, Attention)}:
        if att.kind == "gqa" and att.n_kv_heads % dep.tp and dep.tp % att.n_kv_heads:
            raise bad_value("tp", dep.tp, f"a divisor or multiple of the model's {att.n_kv_heads} KV heads")
        if att.n_heads % dep.tp:
            raise bad_value("tp", dep.tp, f"a divisor of the model's {att.n_heads} attention heads")
    for moe in {layer.ffn for layer in model.layers if isinstance(layer.ffn, MoE)}:
        if (moe.n_experts + dep.redundant_experts) % dep.ep:
            raise bad_value("ep", dep.ep, f"a divisor of the model's {moe.n_experts} routed experts"
                            + (f" plus {dep.redundant_experts} redundant" if dep.redundant_experts else "")
                            + " (set redundant_experts to pad)")
    if dep.ep > 1 and not model.is_moe:
        raise bad_value("ep", dep.ep, "1 for a model without routed experts")
    dep.stages(model.n_layers)


def fit_error(model: ModelSpec, hw: HardwareSpec, dep: Deployment,
              constants: ConstantsTable | None = None) -> TokensimError | None:
    ctx = make_context(model, hw, dep, for_hardware(hw, dep.engine, constants))
    use = memory_use(ctx, dep.batch, dep.input_tokens + dep.output_tokens)
    if use.fits:
        return None
    gb = 1e9
    where = ""
    if dep.pp > 1:
        sizes = dep.stages(model.n_layers)
        first = sum(sizes[: use.stage])
        where = f" in pipeline stage {use.stage} (layers {first}-{first + sizes[use.stage] - 1})"
    return TokensimError(
        f"deployment does not fit{where}: needs {use.per_chip_bytes / gb:.1f} GB per chip "
        f"(weights {use.weights_per_chip_bytes / gb:.1f} GB + KV/state {use.kv_per_chip_bytes / gb:.1f} GB for "
        f"{use.seqs_per_chip} sequences of {dep.input_tokens + dep.output_tokens} tokens) against "
        f"{use.capacity_per_chip_bytes / gb:.1f} GB usable on {hw.name} ({dep.chips} chips, tp={dep.tp} pp={dep.pp} "
        f"ep={dep.ep} attn_dp={dep.attn_dp} dp={dep.dp}); add chips, lower the batch or context, "
        f"or store weights at lower precision"
    )


def valid_tp_degrees(model: ModelSpec, limit: int, degrees=(1, 2, 4, 8, 16, 32, 64)) -> list[int]:
    """The tensor-parallel degrees up to `limit` that divide the model's heads (and KV heads)."""
    out = []
    for tp in degrees:
        if tp > limit:
            break
        try:
            check_against_model(model, Deployment(tp=tp))
        except TokensimError:
            continue
        out.append(tp)
    return out


def _tp_options(model: ModelSpec, limit: int) -> list[int]:
    return valid_tp_degrees(model, limit) or [1]


def layout_for_chips(model: ModelSpec, hw: HardwareSpec, chips: int, base: Deployment, ep: int | None = None) -> Deployment:
    """`chips` per (replica x attention-DP rank) as tp x pp: TP inside the scale-up domain, pipeline stages beyond
    it; SRAM chips pipeline first (one layer per chip at most). dp and attn_dp come from `base` unchanged, and ep
    from `ep` (default: base's), which the chosen tp x attn_dp must be a multiple of."""
    ep = base.ep if ep is None else ep
    if hw.kind in SRAM_KINDS:
        for tp in _tp_options(model, chips):
            if chips % tp == 0 and chips // tp <= model.n_layers and (tp * base.attn_dp) % ep == 0:
                return replace(base, tp=tp, pp=chips // tp, ep=ep, stage_layers=None)
        raise bad_value("chips", chips, f"a count that splits into tp x pp with at most {model.n_layers} stages for this model")
    up = hw.link("scale_up")
    domain = up.domain_chips if up and up.domain_chips else chips
    tps = [t for t in _tp_options(model, min(chips, domain)) if chips % t == 0 and (t * base.attn_dp) % ep == 0]
    tp = max(tps) if tps else 1
    pp = chips // tp
    if pp > model.n_layers:
        raise bad_value("chips", chips,
                        f"at most {tp * model.n_layers} for this model on {hw.name} (tp {tp} x one layer per stage)")
    return replace(base, tp=tp, pp=pp, ep=ep, stage_layers=None)


def fewest_chips(model: ModelSpec, hw: HardwareSpec, base: Deployment, limit: int = 4096, ep: int | None = None) -> Deployment:
    """The smallest tp x pp (by the rules of layout_for_chips) whose weights and KV fit, keeping base's dp, attn_dp, ep."""
    check_context(model, base)
    ctx = make_context(model, hw, replace(base, dp=1, attn_dp=1, ep=1), for_hardware(hw, base.engine))
    use = memory_use(ctx, base.batch, base.input_tokens + base.output_tokens)
    estimate = max(1, math.ceil(use.per_chip_bytes / use.capacity_per_chip_bytes) // (base.attn_dp * base.dp))
    if hw.kind in SRAM_KINDS:
        tps = _tp_options(model, limit)
        candidates = sorted({tp * pp for tp in tps for pp in range(max(1, estimate // tp), model.n_layers + 1)
                             if estimate <= tp * pp <= limit})
    else:
        candidates = [2**i for i in range(13) if estimate <= 2**i <= limit]
    for chips in candidates:
        try:
            dep = layout_for_chips(model, hw, chips, base, ep)
            check_against_model(model, dep)
        except TokensimError:
            continue
        if fit_error(model, hw, dep) is None:
            return dep
    raise TokensimError(
        f"model {model.name} does not fit on up to {limit} x {hw.name}: it needs about "
        f"{use.per_chip_bytes * 1 / 1e9:.0f} GB against {use.capacity_per_chip_bytes / 1e9:.1f} GB usable per chip"
    )


def resolve_layout(model: ModelSpec, hw: HardwareSpec, fields: dict, chips: int | None = None,
                   tp: int | None = None, pp: int | None = None) -> tuple[Deployment, str]:
    """The one rule that turns a chip count into tp x pp x attn_dp x dp, for every entry point (predict, scenario
    files, compare, validation rows). `fields` are the other Deployment fields (ep, dp, attn_dp, batch, ...);
    tp and pp, when given, are taken as they are. Returns the deployment and a line saying how it was chosen."""
    if tp is not None or pp is not None:
        dep = Deployment(tp=tp or 1, pp=pp or 1, **fields)
        if chips is not None and chips != dep.chips:
            raise bad_value("chips", chips, f"tp x attn_dp x pp x dp = {dep.chips} (or leave tp and pp out)")
        return dep, ""
    ep = fields.get("ep", 1)
    base = Deployment(**{**fields, "ep": 1})
    group = base.dp * base.attn_dp
    if chips is None:
        dep = fewest_chips(model, hw, base, ep=ep)
        parts = [f"tp {dep.tp}", f"pp {dep.pp}"] + [f"{n} {getattr(dep, n)}" for n in ("attn_dp", "dp") if getattr(dep, n) > 1]
        return dep, f"fewest chips that fit ({dep.chips}: {' x '.join(parts)})"
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1 or chips % group:
        raise bad_value("chips", chips, f"a positive multiple of dp x attn_dp = {group}")
    dep = layout_for_chips(model, hw, chips // group, base, ep)
    return dep, f"{chips} chips as tp {dep.tp} x attn_dp {dep.attn_dp} x pp {dep.pp} x dp {dep.dp}"
