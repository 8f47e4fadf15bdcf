"""`tokensim compare A B`: why is A faster than B, as a waterfall of named factors.

Starting from A, B's settings are swapped in one factor at a time, in this order: bytes touched per
token (the model), precision, memory bandwidth, compute peak, communication (links), latency floors
and achieved efficiencies (the hardware family's empirical constants), parallelism and pipeline depth,
engine and kernel fusions (the engine's constants, its release's traits, the fusions the launch runs), batch,
speculative decoding, sequence lengths. Each factor's contribution is the ratio of tokens/s per
user after and before its swap, so the contributions multiply exactly to the total ratio B / A.
Intermediate steps are hypothetical machines (A's chip with B's bandwidth, ...) and skip the memory-fit
check, since only the last step has to exist.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tokensim.deploy.deployment import Deployment
from tokensim.errors import TokensimError
from tokensim.perf.context import fusions_on
from tokensim.prediction.predictor import predict_deployment
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import ModelSpec


@dataclass(frozen=True)
class Setup:
    model: ModelSpec
    hardware: HardwareSpec
    deployment: Deployment
    label: str


@dataclass(frozen=True)
class Factor:
    name: str
    ratio: float                   # tokens/s per user after / before this swap
    detail: str


def _hardware_steps(a: HardwareSpec, b: HardwareSpec) -> list[tuple[str, HardwareSpec, str]]:
    tier_b = b.weight_tier
    bw = replace(a, memory=tuple(replace(t, bandwidth_bytes_per_s=tier_b.bandwidth_bytes_per_s,
                                         capacity_bytes=tier_b.capacity_bytes,
                                         visible_capacity_bytes=tier_b.visible_capacity_bytes)
                                 if t is a.weight_tier else t for t in a.memory))
    compute = replace(bw, flops_per_s=b.flops_per_s)
    links = replace(compute, links=b.links, chips_per_system=b.chips_per_system)
    family = replace(b)        # the whole of B: its family's constants, kind, power and price
    return [("memory bandwidth", bw, f"{a.weight_tier.bandwidth_bytes_per_s / 1e12:.3g} -> "
                                     f"{tier_b.bandwidth_bytes_per_s / 1e12:.3g} TB/s ({a.weight_tier.tier} -> {tier_b.tier})"),
            ("compute peak", compute, f"{a.peak_flops('bf16') / 1e15:.3g} -> {b.peak_flops('bf16') / 1e15:.3g} PFLOP/s bf16"),
            ("communication", links, "scale-up / scale-out links of B"),
            ("latency floors and efficiencies", family, f"empirical constants of {a.family} -> {b.family}")]


def _speed(model: ModelSpec, hw: HardwareSpec, dep: Deployment) -> float:
    """tokens/s per user of a step; a fusion the step's chip has no kernels for (A's moe_gemm1 on B's Hopper family)
    is left out, as `tokensim plan` leaves it out, and the step's detail says so."""
    return predict_deployment(model, hw, replace(dep, fusions=fusions_on(hw, dep.fusions)),
                              check_fit=False).tokens_per_s_per_user


def _dropped(hw: HardwareSpec, dep: Deployment) -> str:
    kept = fusions_on(hw, dep.fusions) or ()
    gone = [f for f in dep.fusions or () if f not in kept]
    return f" ({'+'.join(gone)} left out: no such kernels on {hw.family})" if gone else ""


def waterfall(a: Setup, b: Setup) -> tuple[list[Factor], float, float, float]:
    """(factors, tokens/s of A, tokens/s of B, total ratio B/A); product of factor ratios == total ratio."""
    da, db = a.deployment, b.deployment
    steps: list[tuple[str, ModelSpec, HardwareSpec, Deployment, str]] = []
    model, hw, dep = a.model, a.hardware, da
    steps.append(("bytes touched per token (model)", b.model, hw, dep, f"{a.model.name} -> {b.model.name}"))
    model = b.model
    dep = replace(dep, weights=db.weights, expert_weights=db.expert_weights, kv=db.kv, compute=db.compute)
    def weights(d: Deployment) -> str:
        return f"{d.weights or 'checkpoint'}" + (f" (experts {d.expert_weights})" if d.expert_weights else "")

    steps.append(("precision", model, hw, dep, f"weights {weights(da)} -> {weights(db)}, KV {da.kv} -> {db.kv}"))
    for name, h, detail in _hardware_steps(a.hardware, b.hardware):
        steps.append((name, model, h, dep, detail))
    hw = b.hardware
    dep = replace(dep, tp=db.tp, pp=db.pp, ep=db.ep, attn_dp=db.attn_dp, dp=db.dp, stage_layers=db.stage_layers,
                  redundant_experts=db.redundant_experts, overlap_comm=db.overlap_comm, micro_batches=db.micro_batches)
    steps.append(("parallelism and pipeline depth", model, hw, dep,
                  f"tp {da.tp} pp {da.pp} ep {da.ep} -> tp {db.tp} pp {db.pp} ep {db.ep}"))
    dep = replace(dep, engine=db.engine, engine_version=db.engine_version, fusions=db.fusions)

    def engine(d: Deployment) -> str:
        return (f"{d.engine}{' ' + d.engine_version if d.engine_version else ''}"
                f" ({'fused ' + '+'.join(d.fusions) if d.fusions else 'no fusions'})")

    steps.append(("engine and kernel fusions", model, hw, dep, f"{engine(da)} -> {engine(db)}"))
    dep = replace(dep, batch=db.batch)
    steps.append(("batch", model, hw, dep, f"{da.batch} -> {db.batch}"))
    dep = replace(dep, spec=db.spec)
    steps.append(("speculative decoding", model, hw, dep, f"{'on' if da.spec else 'off'} -> {'on' if db.spec else 'off'}"))
    dep = db
    steps.append(("sequence lengths", model, hw, dep,
                  f"{da.input_tokens}/{da.output_tokens} -> {db.input_tokens}/{db.output_tokens}"))

    start = _speed(a.model, a.hardware, da)
    end = predict_deployment(b.model, b.hardware, db).tokens_per_s_per_user
    factors, prev, pending, dropped = [], start, [], ""
    for i, (name, m, h, d, detail) in enumerate(steps):
        last = i == len(steps) - 1
        drop = "" if last else _dropped(h, d)
        if drop != dropped:                # said once, at the step whose chip first lacks the kernels
            detail, dropped = detail + drop, drop
        try:
            cur = end if last else _speed(m, h, d)
        except TokensimError:
            pending.append(name)           # not expressible on its own: merged into the next factor
            continue
        label = " + ".join(pending + [name])
        pending = []
        factors.append(Factor(label, cur / prev, detail))
        prev = cur
    return factors, start, end, end / start


def parse_setup(text: str) -> Setup:
    """A scenario name or path, or `model@hardware[:key=value,...]` with predict's options
    (tp, pp, ep, dp, attn_dp, batch, input_tokens, output_tokens, weights, expert_weights, kv, compute, engine,
    engine_version, fusions: names joined by '+', e.g. fusions=allreduce_norm+moe_gemm1, or none)."""
    from pathlib import Path

    from tokensim.deploy.layout import resolve_layout
    from tokensim.perf.engines import parse_fusions, parse_release
    from tokensim.scenarios.scenario import find_scenario, load_scenario, shipped_scenarios
    from tokensim.specs.hardware.catalog import load_hardware
    from tokensim.specs.model.catalog import load_model

    if "@" not in text:
        if Path(text).exists() or text in shipped_scenarios():
            s = load_scenario(find_scenario(text))
            return Setup(s.model, s.hardware, s.deployment, s.name)
        raise TokensimError(f"compare: {text!r}: expected a scenario name or file, or model@hardware[:key=value,...]")
    head, _, opts = text.partition(":")
    model_name, _, hw_name = head.partition("@")
    model, hw = load_model(model_name), load_hardware(hw_name)
    kw: dict = {}
    ints = {"chips", "tp", "pp", "ep", "dp", "attn_dp", "batch", "input_tokens", "output_tokens"}
    texts = {"weights", "expert_weights", "kv", "compute", "engine", "engine_version"}
    for item in filter(None, opts.split(",")):
        key, _, value = item.partition("=")
        key = key.strip()
        if key in ints:
            try:
                kw[key] = int(value)
            except ValueError:
                raise TokensimError(f"compare: {key} = {value!r}: expected an integer") from None
        elif key in texts:
            kw[key] = value.strip()
            if key == "engine_version" and parse_release(kw[key]) is None:
                raise TokensimError(f"compare: engine_version = {value!r}: expected a release number such as 0.6.1 "
                                    "or 1.2.0rc3")
        elif key == "fusions":
            kw[key] = parse_fusions(value, field="compare: fusions", sep="+")
        else:
            options = ", ".join(sorted(ints | texts | {"fusions"}))
            raise TokensimError(f"compare: option {key!r}: expected one of {options}")
    tp, pp, chips = kw.pop("tp", None), kw.pop("pp", None), kw.pop("chips", None)
    dep, _ = resolve_layout(model, hw, kw, chips=chips, tp=tp, pp=pp)
    return Setup(model, hw, dep, text)
