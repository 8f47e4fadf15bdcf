"""`tokensim claims`: each public claim against the prediction of its shipped scenario, with a verdict.

Verdict rule (the same for every claim; nothing is written to match a claim):
  1. consistent             the claimed value lies in the base scenario's 10-90 % band;
  2. consistent only if X   it lies outside, but inside the band of the named alternative(s) X, each
                            changing one assumption the source did not state;
  3. implausible because Y  it lies beyond every variant's band on the favourable side (faster, shorter);
                            Y names what caps the best variant (its largest op in the breakdown);
  4. inconsistent           it lies beyond every band on the unfavourable side (slower than any variant).
Bands: speed and TTFT from validation residuals (Prediction ranges); arithmetic quantities (bytes per
token, chip counts) +-10 %; power +-30 %; derived ratios from the bands of both sides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from tokensim.scenarios.agent import coding_loop, session_time
from tokensim.perf.energy import max_power_per_chip_w
from tokensim.errors import TokensimError, bad_value
from tokensim.specs.hardware.loader import read_mapping
from tokensim.deploy.layout import fit_error
from tokensim.specs.precision import get_precision
from tokensim.perf.constants import for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.memory import bytes_per_token
from tokensim.prediction.predictor import Prediction, decode_context, predict_deployment, prefill_run_s
from tokensim.scenarios.scenario import Scenario, load_scenario, run_scenario, scenario_constants

LOWER_IS_BETTER = {"ttft_s", "latency_s", "session_minutes", "power_kw"}
AT_LEAST = {"min_chips"}          # a capacity floor: any claim at or above it is consistent
ARITHMETIC_BAND = 0.10
POWER_BAND = 0.30


def claims_dir() -> Path:
    return Path(str(resources.files("tokensim") / "data" / "scenarios" / "claims"))


@dataclass(frozen=True)
class Value:
    value: float
    low: float
    high: float
    limit: str = ""        # what bounds it: the largest op of the step


@dataclass(frozen=True)
class ClaimResult:
    id: str
    text: str
    scenario: str
    quantity: str
    unit: str
    claim_value: float
    predicted_value: float
    predicted_range: tuple[float, float]
    ratio: float                  # claim / predicted
    verdict: str
    assumptions: tuple[str, ...]
    alternatives: tuple[dict, ...] = field(default_factory=tuple)
    source: str = ""
    study: tuple[dict, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "scenario": self.scenario, "quantity": self.quantity, "unit": self.unit,
                "claim_value": self.claim_value, "predicted_value": self.predicted_value,
                "predicted_range": list(self.predicted_range), "ratio": self.ratio, "verdict": self.verdict,
                "assumptions": list(self.assumptions), "alternatives": list(self.alternatives), "source": self.source,
                "study": list(self.study)}


def _limit(p: Prediction) -> str:
    top = max(p.breakdown, key=lambda o: o.time_s)
    total = sum(o.time_s for o in p.breakdown) or 1.0
    return f"{top.name} ({top.bound}-bound) takes {top.time_s / total:.0%} of each step"


def _band(value: float, rel: float) -> tuple[float, float]:
    return value * (1 - rel), value * (1 + rel)


def quantity(s: Scenario, q: str) -> Value:
    """The predicted value of quantity `q` for scenario `s`, with its band."""
    p = run_scenario(s)
    raw = s.raw
    if q == "tokens_per_s_per_user":
        return Value(p.tokens_per_s_per_user, *p.tokens_per_s_per_user_range, _limit(p))
    if q == "ttft_s":
        return Value(p.ttft_s, *p.ttft_s_range, "prefill")
    if q == "throughput_tokens_per_s":
        lo, hi = p.tokens_per_s_per_user_range
        f = p.throughput_tokens_per_s / p.tokens_per_s_per_user
        return Value(p.throughput_tokens_per_s, lo * f, hi * f, _limit(p))
    if q == "bytes_per_token":
        ctx = make_context(s.model, s.hardware, s.deployment, for_hardware(s.hardware, s.deployment.engine, scenario_constants(s)))
        v = bytes_per_token(ctx, s.deployment.batch, decode_context(s.deployment), p.tokens_per_step)
        return Value(v, *_band(v, ARITHMETIC_BAND), f"at batch {s.deployment.batch} the weights touched per step are "
                     "shared by every token of the batch; the whole checkpoint is read only when every expert is hit")
    if q == "min_chips":
        return Value(p.min_chips, *_band(p.min_chips, ARITHMETIC_BAND), "capacity of the weight tier")
    if q == "largest_model_params":
        width = get_precision(s.deployment.weights or "bf16").bytes_per_element
        v = p.capacity_per_chip_bytes * s.deployment.chips / width
        return Value(v, *_band(v, ARITHMETIC_BAND), f"{p.capacity_per_chip_bytes / 1e9:.1f} GB usable per chip at "
                     f"{width * 8:.3g} bits per weight, KV and activations left out")
    if q in ("latency_s", "sequences_per_s", "power_kw", "sequences_per_s_per_kw"):
        w = raw.get("workload", {})
        n = int(w.get("sequences", 1000))
        total_s = prefill_run_s(s.model, s.hardware, s.deployment, n, scenario_constants(s))
        power_kw = p.chips * max_power_per_chip_w(s.hardware) / 1e3
        lo_f, hi_f = (r / p.ttft_s for r in p.ttft_s_range) if p.ttft_s else (1.0, 1.0)
        if q == "latency_s":
            return Value(p.ttft_s, *p.ttft_s_range, "prefill through every stage")
        if q == "sequences_per_s":
            v = n / total_s
            return Value(v, v / hi_f, v / lo_f, f"{n} prompts in micro-batches of {s.deployment.batch}")
        if q == "power_kw":
            return Value(power_kw, *_band(power_kw, POWER_BAND), f"{p.chips} chips at full load")
        v = n / total_s / power_kw
        return Value(v, v / hi_f * (1 - POWER_BAND), v / lo_f * (1 + POWER_BAND), "throughput per full-load kW")
    if q == "session_minutes":
        sess = raw.get("session", {})
        session = coding_loop(**{k: sess[k] for k in ("calls", "output_tokens", "fresh_input_tokens", "tool_s") if k in sess})
        t = session_time(session, p, s.name)
        lo, hi = p.tokens_per_s_per_user_range
        model_lo = t.model_s * p.tokens_per_s_per_user / hi
        model_hi = t.model_s * p.tokens_per_s_per_user / lo
        return Value(t.total_s / 60, (model_lo + t.tool_s) / 60, (model_hi + t.tool_s) / 60,
                     f"{t.model_share:.0%} of the session waits on the model; {session.name}")
    raise bad_value("claim.quantity", q, "tokens_per_s_per_user, ttft_s, throughput_tokens_per_s, bytes_per_token, "
                    "min_chips, latency_s, sequences_per_s, power_kw, sequences_per_s_per_kw, session_minutes or ratio")


def verdict(claim: float, q: str, base: Value, alts: list[tuple[str, Value]]) -> str:
    if q in AT_LEAST:
        inside = lambda v: claim >= v.low  # noqa: E731
    else:
        inside = lambda v: v.low <= claim <= v.high  # noqa: E731
    if inside(base):
        return "consistent"
    ok = [name for name, v in alts if inside(v)]
    if ok:
        return "consistent only if " + " or ".join(ok)
    variants = [("the base scenario", base)] + alts
    if q in AT_LEAST:
        name, least = min(variants, key=lambda nv: nv[1].value)
        return f"implausible because {name} needs at least {least.low:.3g}: {least.limit}"
    lower = q in LOWER_IS_BETTER
    better = (lambda v: claim < v.low) if lower else (lambda v: claim > v.high)
    if all(better(v) for _, v in variants):
        name, best = (min if lower else max)(variants, key=lambda nv: nv[1].value)
        edge = best.low if lower else best.high
        what = "needs at least" if lower else "reaches at most"
        return f"implausible because even {name} {what} {edge:.3g} (the edge of its band): {best.limit}"
    worse = (lambda v: claim > v.high) if lower else (lambda v: claim < v.low)
    if all(worse(v) for _, v in variants):
        if q == "ratio":
            return f"inconsistent: the modelled ratio is at least {min(v.low for _, v in variants):.3g}; the claim understates it"
        return ("inconsistent: every modelled variant does better than the claim, so the claimed system runs below "
                "its modelled efficiency or at a larger batch")
    above = [n for n, v in variants if claim < v.low]
    below = [n for n, v in variants if claim > v.high]
    return (f"inconsistent with every variant as stated: the claim falls between {' and '.join(below)} "
            f"(below it) and {' and '.join(above)} (above it), so it hinges on an assumption the source did not state")


def _assumptions(s: Scenario) -> tuple[str, ...]:
    d = s.deployment
    out = [f"{s.model.name} on {d.chips} x {s.hardware.name} (tp {d.tp}, pp {d.pp}, ep {d.ep}, attn_dp {d.attn_dp}); "
           f"batch {d.batch}; {d.input_tokens} in / {d.output_tokens} out; weights {d.weights or 'checkpoint'}"
           f"{'/' + d.expert_weights if d.expert_weights else ''}; KV {d.kv}"
           + (f"; speculative {d.spec.method} k={d.spec.draft_tokens} E={d.spec.expected_tokens_per_step:.2f}" if d.spec else "")]
    out += [str(a) for a in s.raw.get("assumptions", [])]
    return tuple(out)


def evaluate_file(path: Path) -> list[ClaimResult]:
    raw = read_mapping(path)
    claims = raw.get("claims") or ([raw["claim"]] if "claim" in raw else [])
    s = load_scenario(path)
    alts = [(n, a) for n, a in s.alternatives() if not a.raw.get("study")]
    results = []
    for i, c in enumerate(claims):
        for key in ("id", "quantity", "value"):
            if key not in c:
                raise bad_value(f"claims[{i}].{key}", None, "a value (field missing)")
        if isinstance(c["value"], bool) or not isinstance(c["value"], (int, float)):
            raise bad_value(f"claims[{i}].value", c["value"], "a number")
        if c["quantity"] == "ratio" and (not isinstance(c.get("of"), list) or len(c["of"]) != 2):
            raise bad_value(f"claims[{i}].of", c.get("of"), "two scenario names")
        q, value = str(c["quantity"]), float(c["value"])
        if q == "ratio":
            results.append(_ratio(c, path))
            continue
        base = quantity(s, q)
        alt_values = [(name, quantity(a, q)) for name, a in alts]
        results.append(ClaimResult(
            id=str(c["id"]), text=str(c.get("text", "")), scenario=s.name, quantity=q, unit=str(c.get("unit", "")),
            claim_value=value, predicted_value=base.value, predicted_range=(base.low, base.high),
            ratio=value / base.value if base.value else math.inf, verdict=verdict(value, q, base, alt_values),
            assumptions=_assumptions(s),
            alternatives=tuple({"name": n, "predicted_value": v.value, "range": [v.low, v.high]} for n, v in alt_values),
            source=str(c.get("source", "")), study=tuple(study_table(s)) if c is claims[0] else ()))
    return results


def study_table(s: Scenario) -> list[dict]:
    """Design study: the base and every `study = true` alternative at each context in [report] contexts."""
    contexts = s.raw.get("report", {}).get("contexts", [])
    variants = [("base", s)] + [(n, a) for n, a in s.alternatives() if a.raw.get("study")]
    rows = []
    for name, v in variants:
        for ctx_tokens in contexts:
            dep = replace(v.deployment, input_tokens=int(ctx_tokens), output_tokens=min(v.deployment.output_tokens, 1024))
            row = {"variant": name, "context_tokens": int(ctx_tokens), "model_total_params": v.model.total_params,
                   "model_active_params": v.model.active_params}
            err = fit_error(v.model, v.hardware, dep)
            if err is not None:
                row.update(fits=False, reason=str(err))
            else:
                p = predict_deployment(v.model, v.hardware, dep, constants=scenario_constants(v))
                row.update(fits=True, tokens_per_s_per_user=p.tokens_per_s_per_user, ttft_s=p.ttft_s,
                           kv_per_chip_bytes=p.kv_per_chip_bytes, max_batch=p.max_batch, chips=p.chips)
            rows.append(row)
    return rows


def _ratio_value(num: Scenario, den: Scenario, q: str) -> Value:
    a, b = quantity(num, q), quantity(den, q)
    value = a.value / b.value
    return Value(value, a.low / b.high, a.high / b.low, f"{num.name}: {a.limit}; {den.name}: {b.limit}")


def _ratio(c: dict, path: Path) -> ClaimResult:
    """A claimed ratio between two scenarios' values of one quantity; `pairs` names alternatives of the two
    scenarios to combine as the ratio's own alternatives."""
    num, den = (load_scenario(path.parent / f"{name}.toml") for name in c["of"])
    q = str(c.get("of_quantity", "tokens_per_s_per_user"))
    band = _ratio_value(num, den, q)
    num_alts, den_alts = dict(num.alternatives()), dict(den.alternatives())
    alts = []
    for a_name, b_name in c.get("pairs", []):
        if a_name not in num_alts or b_name not in den_alts:
            raise bad_value("claims.pairs", [a_name, b_name], f"alternative names of {num.name} and {den.name}")
        alts.append((a_name if a_name == b_name else f"{a_name} / {b_name}", _ratio_value(num_alts[a_name], den_alts[b_name], q)))
    claim = float(c["value"])
    return ClaimResult(
        id=str(c["id"]), text=str(c.get("text", "")), scenario=f"{num.name} / {den.name}", quantity=f"ratio of {q}",
        unit="x", claim_value=claim, predicted_value=band.value, predicted_range=(band.low, band.high), ratio=claim / band.value,
        verdict=verdict(claim, "ratio", band, alts), assumptions=_assumptions(num) + _assumptions(den),
        alternatives=tuple({"name": n, "predicted_value": v.value, "range": [v.low, v.high]} for n, v in alts),
        source=str(c.get("source", "")))


def all_claims(directory: Path | None = None, progress=None) -> list[ClaimResult]:
    directory = directory or claims_dir()
    out = []
    for path in sorted(directory.glob("*.toml")):
        try:
            out.extend(evaluate_file(path))
        except TokensimError as exc:
            raise TokensimError(f"{path.name}: {exc}") from None
        if progress:
            progress()
    return sorted(out, key=lambda r: r.id)
