"""`tokensim claims`: each public claim against the prediction of its shipped scenario, with a verdict.

The verdict rule (one for every claim; README "How claims are judged"):
  - The base case follows the claim's stated conditions (its [[claims]] `conditions`); where the source leaves a
    condition open, the scenario's `assumptions` say what the base takes.
  - The base case's calibrated range decides: the claim is *consistent* when it lies in the range, else
    *inconsistent*, with the claim above or below the range and by how much (verdict_kind `consistent`,
    `claim_above_range`, `claim_below_range`).
  - An alternative, declared in the scenario with its `source` before any comparison, can only add to that:
    "also consistent if X" when its range holds the claim. An alternative that `breaks` one of the claim's stated
    conditions is reported apart: "consistent only outside the stated conditions: X".
  - Alternatives are labelled from what they change, in the model's own numbers (never typed).
Ranges: speed and TTFT are the calibrated estimate and 10th-90th percentile range of the prediction
(validate/uncertainty.py); arithmetic quantities (bytes per token, chip counts) +-10 %; power +-30 %; a ratio
combines its two sides' ranges as independent (log half-widths added in quadrature).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from importlib import resources
from pathlib import Path

from tokensim.deploy.layout import fit_error
from tokensim.errors import TokensimError, bad_value
from tokensim.perf.constants import for_hardware
from tokensim.perf.context import make_context
from tokensim.perf.energy import max_power_per_chip_w
from tokensim.perf.memory import bytes_per_token
from tokensim.prediction.predictor import Prediction, decode_context, predict_deployment, prefill_run_s
from tokensim.scenarios.agent import coding_loop, session_time
from tokensim.scenarios.scenario import Scenario, load_scenario, run_scenario, scenario_constants
from tokensim.specs.hardware.loader import read_mapping
from tokensim.specs.precision import get_precision

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
    predicted_value: float              # the calibrated central estimate (speed, TTFT) or the model's figure
    predicted_range: tuple[float, float]
    ratio: float                        # claim / predicted
    verdict: str                        # the generated message
    verdict_kind: str
    assumptions: tuple[str, ...]
    conditions: tuple[str, ...] = ()    # what the claim's source states (speculation, precision, model size, ...)
    alternatives: tuple[dict, ...] = field(default_factory=tuple)
    source: str = ""
    study: tuple[dict, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "scenario": self.scenario, "quantity": self.quantity, "unit": self.unit,
                "claim_value": self.claim_value, "predicted_value": self.predicted_value,
                "predicted_range": list(self.predicted_range), "ratio": self.ratio, "verdict": self.verdict,
                "verdict_kind": self.verdict_kind, "conditions": list(self.conditions),
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
        return Value(p.tokens_per_s_per_user_estimate, *p.tokens_per_s_per_user_range, _limit(p))
    if q == "ttft_s":
        return Value(p.ttft_s_estimate, *p.ttft_s_range, "prefill")
    if q == "throughput_tokens_per_s":
        lo, hi = p.tokens_per_s_per_user_range
        f = p.throughput_tokens_per_s / p.tokens_per_s_per_user
        return Value(p.tokens_per_s_per_user_estimate * f, lo * f, hi * f, _limit(p))
    if q == "bytes_per_token":
        table = for_hardware(s.hardware, s.deployment.engine, scenario_constants(s))
        ctx = make_context(s.model, s.hardware, s.deployment, table)
        verified = 1.0 + (s.deployment.spec.draft_tokens if s.deployment.spec else 0)
        v = bytes_per_token(ctx, s.deployment.batch, decode_context(s.deployment), p.tokens_per_step, verified)
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
            return Value(p.ttft_s_estimate, *p.ttft_s_range, "prefill through every stage")
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
        model_at = lambda speed: t.model_s * p.tokens_per_s_per_user / speed  # noqa: E731  model time at another speed
        return Value((model_at(p.tokens_per_s_per_user_estimate) + t.tool_s) / 60, (model_at(hi) + t.tool_s) / 60,
                     (model_at(lo) + t.tool_s) / 60, f"{t.model_share:.0%} of the session waits on the model; {session.name}")
    raise bad_value("claim.quantity", q, "tokens_per_s_per_user, ttft_s, throughput_tokens_per_s, bytes_per_token, "
                    "min_chips, latency_s, sequences_per_s, power_kw, sequences_per_s_per_kw, session_minutes or ratio")


class VerdictKind(StrEnum):
    CONSISTENT = "consistent"
    CLAIM_ABOVE_RANGE = "claim_above_range"
    CLAIM_BELOW_RANGE = "claim_below_range"


@dataclass(frozen=True)
class Alt:
    """An alternative: its generated label, its value and range, the claim conditions it breaks, its source."""

    label: str
    value: Value
    breaks: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    message: str
    off_by: float                       # claim / nearest edge of the base range - 1 (0 inside)
    also_consistent_if: tuple[str, ...] = ()
    outside_conditions: tuple[str, ...] = ()


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def verdict(claim: float, q: str, base: Value, alts: list[Alt]) -> Verdict:
    """The base case's range decides; alternatives can only add 'also consistent if'."""
    if q in AT_LEAST:
        inside = lambda v: claim >= v.low  # noqa: E731
    else:
        inside = lambda v: v.low <= claim <= v.high  # noqa: E731
    alts = [a for a in alts if not math.isclose(a.value.value, base.value, rel_tol=1e-9)]   # ones that change this quantity
    within = tuple(a.label for a in alts if inside(a.value) and not a.breaks)
    outside = tuple(f"{a.label} (breaks: {', '.join(a.breaks)})" for a in alts if inside(a.value) and a.breaks)
    where = f"predicted {_fmt(base.value)}, range {_fmt(base.low)}-{_fmt(base.high)}"
    if inside(base):
        kind, off = VerdictKind.CONSISTENT, 0.0
        message = f"consistent: the claim lies in the base case's range ({where})"
    elif claim > base.high:
        kind, off = VerdictKind.CLAIM_ABOVE_RANGE, claim / base.high - 1
        message = f"inconsistent: the claim is {off:.0%} above the top of the base case's range ({where})"
    else:
        kind, off = VerdictKind.CLAIM_BELOW_RANGE, claim / base.low - 1
        message = f"inconsistent: the claim is {-off:.0%} below the bottom of the base case's range ({where})"
    if kind is not VerdictKind.CONSISTENT and base.limit:
        message += f"; {base.limit}"
    if within:
        message += "; also consistent if " + " or ".join(within)
    if outside:
        message += "; consistent only outside the claim's stated conditions: " + " or ".join(outside)
    return Verdict(kind, message, off, within, outside)


def _assumptions(s: Scenario) -> tuple[str, ...]:
    d = s.deployment
    out = [f"{s.model.name} on {d.chips} x {s.hardware.name} (tp {d.tp}, pp {d.pp}, ep {d.ep}, attn_dp {d.attn_dp}); "
           f"batch {d.batch}; {d.input_tokens} in / {d.output_tokens} out; weights {d.weights or 'checkpoint'}"
           f"{'/' + d.expert_weights if d.expert_weights else ''}; KV {d.kv}"
           + (f"; speculative {d.spec.method} k={d.spec.draft_tokens} E={d.spec.expected_tokens_per_step:.2f}" if d.spec else "")]
    out += [str(a) for a in s.raw.get("assumptions", [])]
    return tuple(out)


def _seconds(x: float) -> str:
    return f"{x * 1e6:.3g} us" if x < 1e-3 else f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"


def describe(change: dict, alt: Scenario, base: Scenario) -> str:
    """A label for an alternative generated from what it changes, in the model's own numbers."""
    parts = []
    if "model" in change or "model_config" in change:
        parts.append(f"model {alt.model.name} ({alt.model.total_params / 1e9:.3g}B parameters, "
                     f"{alt.model.active_params / 1e9:.3g}B active)")
    if "hardware" in change:
        parts.append(f"hardware {alt.hardware.name}")
    a, b = alt.deployment, base.deployment
    if "speculative" in change:
        if a.spec is None:
            parts.append("no speculative decoding")
        else:
            rates = "/".join(f"{r:g}" for r in a.spec.rates())
            parts.append(f"speculative decoding ({a.spec.method}, k={a.spec.draft_tokens}, acceptance {rates}: "
                         f"{a.spec.expected_tokens_per_step:.2f} tokens per step)")
    if "deployment" in change or "model" in change:
        diffs = [f"{name} {getattr(b, name)} -> {getattr(a, name)}" for name in
                 ("tp", "pp", "ep", "attn_dp", "dp", "batch", "weights", "expert_weights", "compute", "kv",
                  "input_tokens", "output_tokens") if getattr(a, name) != getattr(b, name)]
        if a.chips != b.chips:
            diffs.insert(0, f"{a.chips} x {alt.hardware.name}")
        if diffs:
            parts.append(", ".join(diffs))
    for name, value in sorted((change.get("constants") or {}).items()):
        parts.append(f"{name} = {_seconds(value) if name.endswith('_s') else f'{value:g}'}")
    for name, value in sorted((change.get("session") or {}).items()):
        parts.append(f"session {name} = {value:g}" + (" s per call" if name == "tool_s" else ""))
    return "; ".join(parts) or "no change"


def _alternatives(s: Scenario) -> list[tuple[str, Scenario, dict]]:
    """(id, scenario, raw table) of every non-study alternative."""
    # paired by position with the tables they come from, and judged by the table's own `study` flag (a merged
    # scenario also carries every top-level key, so its flag is not the alternative's)
    pairs = zip(s.alternatives(), s.raw.get("alternatives", []), strict=True)
    return [(name, alt, raw) for (name, alt), raw in pairs if not raw.get("study")]


def _alt_values(s: Scenario, q: str) -> list[Alt]:
    out = []
    for _, alt, raw in _alternatives(s):
        change = {k: v for k, v in raw.items() if k not in ("name", "source", "breaks")}
        out.append(Alt(describe(change, alt, s), quantity(alt, q), tuple(raw.get("breaks", ())), str(raw.get("source", ""))))
    return out


def _alt_dicts(alts: list[Alt]) -> tuple[dict, ...]:
    return tuple({"label": a.label, "predicted_value": a.value.value, "range": [a.value.low, a.value.high],
                  "breaks": list(a.breaks), "source": a.source} for a in alts)


def evaluate_file(path: Path) -> list[ClaimResult]:
    raw = read_mapping(path)
    claims = raw.get("claims") or ([raw["claim"]] if "claim" in raw else [])
    s = load_scenario(path)
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
        alts = _alt_values(s, q)
        v = verdict(value, q, base, alts)
        results.append(ClaimResult(
            id=str(c["id"]), text=str(c.get("text", "")), scenario=s.name, quantity=q, unit=str(c.get("unit", "")),
            claim_value=value, predicted_value=base.value, predicted_range=(base.low, base.high),
            ratio=value / base.value if base.value else math.inf, verdict=v.message, verdict_kind=v.kind.value,
            assumptions=_assumptions(s), conditions=tuple(c.get("conditions", ())), alternatives=_alt_dicts(alts),
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
    """a / b with the two sides' uncertainties taken as independent: the log half-widths add in quadrature."""
    a, b = quantity(num, q), quantity(den, q)
    c = math.log(a.value / b.value)
    down = math.hypot(math.log(a.value / a.low), math.log(b.high / b.value))
    up = math.hypot(math.log(a.high / a.value), math.log(b.value / b.low))
    return Value(math.exp(c), math.exp(c - down), math.exp(c + up), f"{num.name}: {a.limit}; {den.name}: {b.limit}")


def _ratio(c: dict, path: Path) -> ClaimResult:
    """A claimed ratio between two scenarios' values of one quantity; `pairs` names alternatives of the two
    scenarios (by their `name`) to combine as the ratio's own alternatives."""
    num, den = (load_scenario(path.parent / f"{name}.toml") for name in c["of"])
    q = str(c.get("of_quantity", "tokens_per_s_per_user"))
    band = _ratio_value(num, den, q)
    num_alts = {n: (a, raw) for n, a, raw in _alternatives(num)}
    den_alts = {n: (a, raw) for n, a, raw in _alternatives(den)}
    alts = []
    for a_name, b_name in c.get("pairs", []):
        if a_name not in num_alts or b_name not in den_alts:
            raise bad_value("claims.pairs", [a_name, b_name], f"alternative names of {num.name} and {den.name}")
        (a, a_raw), (b, b_raw) = num_alts[a_name], den_alts[b_name]
        label = (f"{num.name}: {describe({k: v for k, v in a_raw.items() if k not in ('name', 'source', 'breaks')}, a, num)}"
                 f" / {den.name}: {describe({k: v for k, v in b_raw.items() if k not in ('name', 'source', 'breaks')}, b, den)}")
        alts.append(Alt(label, _ratio_value(a, b, q), tuple(a_raw.get("breaks", ())) + tuple(b_raw.get("breaks", ())),
                        "; ".join(x for x in (str(a_raw.get("source", "")), str(b_raw.get("source", ""))) if x)))
    claim = float(c["value"])
    v = verdict(claim, "ratio", band, alts)
    return ClaimResult(
        id=str(c["id"]), text=str(c.get("text", "")), scenario=f"{num.name} / {den.name}", quantity=f"ratio of {q}",
        unit="x", claim_value=claim, predicted_value=band.value, predicted_range=(band.low, band.high), ratio=claim / band.value,
        verdict=v.message, verdict_kind=v.kind.value, assumptions=_assumptions(num) + _assumptions(den),
        conditions=tuple(c.get("conditions", ())), alternatives=_alt_dicts(alts), source=str(c.get("source", "")))


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
