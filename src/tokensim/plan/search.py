"""`tokensim plan`: enumerate the deployments that fit, evaluate them all at once, keep the Pareto front.

Enumerated: pipeline depth, tensor parallelism, attention data parallelism, expert parallelism,
replicas, batch, stored weight precision, KV precision, speculative decoding (EAGLE-style heads with
the defaults in constants.toml) and prefill-decode disaggregation. Aggregated serving pays the
prefill of every prompt inside the decode pool (the other users' prefills slow each decode step);
disaggregated serving adds a prefill pool sized to keep up and a KV transfer to TTFT.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tokensim.deploy.deployment import Deployment, SpecDecode, checked_launch
from tokensim.deploy.layout import valid_tp_degrees
from tokensim.errors import TokensimError
from tokensim.perf.context import fusions_on
from tokensim.perf.memory import kv_bytes_per_token
from tokensim.plan.pareto import pareto_front
from tokensim.plan.vector import Group, evaluate_group
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.spec import ModelSpec, MoE
from tokensim.validate.rules import speculative_defaults

POWERS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
FIELDS = ("tokens_per_s_per_user", "time_per_output_token_s", "ttft_s", "throughput_tokens_per_s",
          "throughput_tokens_per_s_per_chip", "chips", "memory_per_chip_bytes", "power_w", "tokens_per_joule",
          "usd_per_million_tokens")


@dataclass(frozen=True)
class PlanRequest:
    model: ModelSpec
    hardware: tuple[HardwareSpec, ...]
    max_chips: int = 64
    min_tps_user: float = 0.0
    max_ttft_s: float = math.inf
    input_tokens: int = 1024
    output_tokens: int = 256
    objective: str = "cost"          # cost | throughput | speed
    engine: str = "default"
    batches: tuple[int, ...] = POWERS
    speculative: bool = True
    disaggregation: bool = True
    engine_version: str | None = None
    fusions: tuple[str, ...] | None = None   # kernel fusions the launch runs, on each chip as far as it has them

    def __post_init__(self) -> None:
        object.__setattr__(self, "fusions", checked_launch(self.engine, self.engine_version, self.fusions))


@dataclass(frozen=True)
class PlanResult:
    points: dict                      # column -> array over every evaluated deployment
    evaluated: int
    feasible: np.ndarray              # bool: fits and meets the limits
    front: np.ndarray                 # indices: tokens/s per user against throughput per chip
    cost_front: np.ndarray            # indices: tokens/s per user against $ per Mtok
    best: int | None
    note: str = ""
    spec: SpecDecode | None = field(default=None, repr=False)

    def to_pandas(self):
        """Every evaluated deployment, one row each, as a pandas DataFrame."""
        from tokensim.output.frames import to_pandas
        return to_pandas(self)

    def deployment(self, i: int) -> dict:
        p = self.points
        return {"hardware": str(p["hardware"][i]), "tp": int(p["tp"][i]), "pp": int(p["pp"][i]), "ep": int(p["ep"][i]),
                "attn_dp": int(p["attn_dp"][i]), "dp": int(p["dp"][i]), "batch": int(p["batch"][i]),
                "weights": str(p["weights"][i]), "kv": str(p["kv"][i]), "speculative": bool(p["spec_on"][i]),
                "disaggregated": bool(p["disaggregated"][i]), "prefill_chips": int(p["prefill_chips"][i]),
                "fusions": [f for f in str(p["fusions"][i]).split("+") if f != "none"]}

    def point(self, i: int) -> dict:
        usd = float(self.points["usd_per_million_tokens"][i])
        return {"tokens_per_s_per_user": float(self.points["tokens_per_s_per_user"][i]),
                "throughput_tokens_per_s_per_chip": float(self.points["throughput_tokens_per_s_per_chip"][i]),
                "usd_per_million_tokens": None if math.isnan(usd) else usd,
                "ttft_s": float(self.points["ttft_s"][i]), "chips": int(self.points["chips"][i]),
                "deployment": self.deployment(i)}


def _experts(model: ModelSpec) -> int:
    return next((layer.ffn.n_experts for layer in model.layers if isinstance(layer.ffn, MoE)), 0)


def _pp_options(model: ModelSpec, hw: HardwareSpec, max_chips: int) -> list[int]:
    steps = sorted({1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128} | {model.n_layers})
    return [p for p in steps if p <= min(model.n_layers, max_chips)]


def _weight_options(model: ModelSpec, hw: HardwareSpec) -> list[tuple[str | None, str | None]]:
    opts: list[tuple[str | None, str | None]] = [(None, None), ("fp8", None), ("int4", None)]
    if hw.supports("fp4"):
        opts.append(("nvfp4", None))
    return opts


def candidate_groups(req: PlanRequest, hw: HardwareSpec) -> list[Group]:
    model = req.model
    E = _experts(model)
    tps = valid_tp_degrees(model, req.max_chips, POWERS)
    layouts = []                                     # (tp, attn_dp, ep) of one pipeline stage
    for tp in tps:
        for adp in POWERS:
            stage = tp * adp
            if stage > req.max_chips:
                break
            eps = {1}
            if E:
                eps |= {e for e in (tp, stage) if e > 1 and E % e == 0}
            elif adp > 1:
                continue                             # attention DP only pays off with shared experts
            layouts += [(tp, adp, ep) for ep in sorted(eps)]
    groups = []
    for pp in _pp_options(model, hw, req.max_chips):
        rows = [(tp, adp, ep, dp, b * dp * adp, s)
                for tp, adp, ep in layouts for dp in POWERS if tp * adp * pp * dp <= req.max_chips
                for b in req.batches for s in ((False, True) if req.speculative else (False,))]
        if not rows:
            continue
        a = np.array(rows, dtype=np.int64)
        tp_a, adp_a, ep_a, dp_a, batch_a, spec_a = (a[:, i] for i in range(6))
        for weights, experts in _weight_options(model, hw):
            for kv in ("bf16", "fp8"):
                groups.append(Group(pp, weights, experts, kv, tp=tp_a, ep=ep_a, dp=dp_a, attn_dp=adp_a, batch=batch_a,
                                    spec_on=spec_a.astype(bool)))
    return groups


def _serving(model, hw, g: Group, r: dict, req: PlanRequest) -> dict:
    """Aggregated and disaggregated serving numbers from a group's decode and batch-prefill times."""
    prefill_batch_s = r["prefill_batch_s"]
    decode_s = req.output_tokens * r["time_per_output_token_s"]
    agg_tput = g.batch * req.output_tokens / (decode_s + prefill_batch_s)
    prefill_chips = np.ceil(r["chips"] * prefill_batch_s / decode_s)
    link = hw.link("scale_out") or hw.link("scale_up")
    # the KV leaves the prefill pool over its chips' links, as predict_pd moves it
    kv_s = (req.input_tokens * kv_bytes_per_token(model, g.kv) / (link.bandwidth_bytes_per_s * np.maximum(prefill_chips, 1))
            + link.latency_s) if link else 0.0
    return {"agg_tput": agg_tput, "prefill_chips": prefill_chips, "kv_transfer_s": kv_s}


def plan(req: PlanRequest, progress=None) -> PlanResult:
    cols: dict[str, list] = {}
    spec_d = speculative_defaults()
    spec = SpecDecode("eagle", 3, tuple(spec_d["eagle3_acceptance"][:3])) if req.speculative else None
    evaluated = 0
    for hw in req.hardware:
        fusions = fusions_on(hw, req.fusions)
        for g in candidate_groups(req, hw):
            r = evaluate_group(req.model, hw, g, req.input_tokens, req.output_tokens, spec, req.engine,
                               engine_version=req.engine_version, fusions=fusions)
            srv = _serving(req.model, hw, g, r, req)
            n = len(g.tp)
            for disagg in ((False, True) if req.disaggregation else (False,)):
                out = dict(r)
                if disagg:
                    total = r["chips"] + srv["prefill_chips"]
                    out["ttft_s"] = r["ttft_s"] + srv["kv_transfer_s"] + r["time_per_output_token_s"]   # as predict_pd
                    out["throughput_tokens_per_s_per_chip"] = r["throughput_tokens_per_s"] / total
                    out["chips"] = total
                    out["usd_per_million_tokens"] = r["usd_per_million_tokens"] * total / r["chips"]
                    out["power_w"] = r["power_w"] * total / r["chips"]
                    out["tokens_per_joule"] = r["throughput_tokens_per_s"] / out["power_w"]
                else:
                    tput = srv["agg_tput"]
                    out["throughput_tokens_per_s"] = tput
                    out["tokens_per_s_per_user"] = tput / g.batch
                    out["time_per_output_token_s"] = g.batch / tput
                    out["throughput_tokens_per_s_per_chip"] = tput / r["chips"]
                    out["usd_per_million_tokens"] = r["usd_per_million_tokens"] * r["throughput_tokens_per_s"] / tput
                    out["tokens_per_joule"] = tput / r["power_w"]
                for key in FIELDS:
                    cols.setdefault(key, []).append(np.broadcast_to(out[key], (n,)).astype(float))
                cols.setdefault("fits", []).append(r["fits"])
                for key, value in (("tp", g.tp), ("ep", g.ep), ("dp", g.dp), ("attn_dp", g.attn_dp), ("batch", g.batch),
                                   ("spec_on", g.spec_on)):
                    cols.setdefault(key, []).append(value)
                cols.setdefault("pp", []).append(np.full(n, g.pp))
                cols.setdefault("prefill_chips", []).append(srv["prefill_chips"] if disagg else np.zeros(n))
                cols.setdefault("disaggregated", []).append(np.full(n, disagg))
                for key, text in (("hardware", hw.name), ("weights", g.weights or "checkpoint"), ("kv", g.kv),
                                  ("fusions", "+".join(fusions or ()) or "none")):
                    cols.setdefault(key, []).append(np.full(n, text, dtype=object))
                evaluated += n
            if progress:
                progress()
    if not cols:
        raise TokensimError(f"plan: no layout of {req.model.name} is possible on up to {req.max_chips} chips")
    points = {k: np.concatenate(v) for k, v in cols.items()}
    feasible = (points["fits"] & (points["tokens_per_s_per_user"] >= req.min_tps_user)
                & (points["ttft_s"] <= req.max_ttft_s) & (points["chips"] <= req.max_chips))
    idx = np.flatnonzero(feasible)
    front = idx[pareto_front(points["tokens_per_s_per_user"][idx], points["throughput_tokens_per_s_per_chip"][idx])]
    cost = points["usd_per_million_tokens"][idx]
    cost_front = idx[pareto_front(points["tokens_per_s_per_user"][idx], -cost)] if np.isfinite(cost).any() else idx[:0]
    best, note = None, ""
    if idx.size:
        score = {"cost": -np.nan_to_num(points["usd_per_million_tokens"][idx], nan=np.inf),
                 "throughput": points["throughput_tokens_per_s_per_chip"][idx],
                 "speed": points["tokens_per_s_per_user"][idx]}.get(req.objective)
        if score is None:
            raise TokensimError(f"objective = {req.objective!r}: expected cost, throughput or speed")
        best = int(idx[int(np.argmax(score))])
    else:
        note = explain_infeasible(req, points)
    return PlanResult(points, evaluated, feasible, front, cost_front, best, note, spec)


def explain_infeasible(req: PlanRequest, p: dict) -> str:
    """Name the smallest change of one limit that would let a deployment through."""
    fits = p["fits"] & (p["chips"] <= req.max_chips)
    if not fits.any():
        from tokensim.deploy.layout import fewest_chips
        for hw in req.hardware:
            try:
                base = Deployment(input_tokens=req.input_tokens, output_tokens=req.output_tokens)
                need = fewest_chips(req.model, hw, base).chips
                return (f"{req.model.name} fits nowhere within {req.max_chips} chips: it needs at least {need} x {hw.name} "
                        f"(raise --max-chips to {need})")
            except TokensimError:
                continue
        return f"{req.model.name} fits on none of the given hardware within 4096 chips"
    speed_ok = fits & (p["tokens_per_s_per_user"] >= req.min_tps_user)
    if not speed_ok.any():
        top = p["tokens_per_s_per_user"][fits].max()
        return (f"no deployment reaches {req.min_tps_user:g} tokens/s per user; "
                f"the fastest that fits reaches {top:.1f} (lower --min-tps-user to {top:.1f})")
    ttft = p["ttft_s"][speed_ok].min()
    return (f"no deployment meets TTFT <= {req.max_ttft_s:g} s at that speed; "
            f"the lowest is {ttft:.3g} s (raise --max-ttft to {ttft:.3g})")
