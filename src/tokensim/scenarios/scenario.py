"""Scenario files (TOML): a whole deployment, optionally disaggregated, with the claim it checks.

Layout (every table but [deployment] optional; see data/scenarios/*.toml for worked examples):
  name, title, model (catalog name or config path, relative to the file) or [model_config] (inline HF config),
  hardware; [deployment] tp pp ep dp attn_dp chips batch input_tokens output_tokens weights expert_weights
  compute kv engine micro_batches overlap_comm redundant_experts stage_layers | stages = ["0-3", "4-7", ...];
  [speculative] method draft_tokens acceptance draft_model; [afd] ffn_hardware ffn_deployment(table)
  link_bandwidth_bytes_per_s link_latency_s micro_batches; [prefill] hardware deployment(table)
  link_bandwidth_bytes_per_s link_latency_s; [workload] sequences (batch benchmark); [claim] id text
  quantity value unit source kind; [[alternatives]] name + any of the tables above, changing one assumption.
Every field's type, range and unit is checked once when the file is read (tokensim.inputs.scenario_file).
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.deploy.layout import resolve_layout
from tokensim.errors import TokensimError, bad_value, require
from tokensim.inputs.base import validate
from tokensim.inputs.files import is_file, read_mapping
from tokensim.inputs.scenario_file import DeploymentTable, ScenarioFile, SpeculativeTable
from tokensim.perf.constants import NAMES as CONSTANT_NAMES
from tokensim.perf.constants import ConstantsTable, default_table
from tokensim.prediction.disagg import LinkSpec, predict_afd, predict_pd
from tokensim.prediction.predictor import Prediction, predict_deployment
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.hardware.p2p import with_peer_to_peer
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.specs.model.catalog import load_model
from tokensim.specs.model.hf_config import spec_from_config
from tokensim.specs.model.spec import ModelSpec


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    quantity: str
    value: float
    unit: str
    source: str = ""
    kind: str = ""


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    model: ModelSpec
    hardware: HardwareSpec
    deployment: Deployment
    raw: dict = field(repr=False, compare=False, default_factory=dict)
    base_dir: Path = Path(".")
    claim: Claim | None = None
    origin: str = ""                    # the file it came from, for messages

    def alternatives(self) -> list[tuple[str, Scenario]]:
        """The scenario's named variants, each with one changed assumption."""
        out = []
        for i, alt in enumerate(self.raw.get("alternatives", [])):
            name = alt.get("name") or f"alternative {i + 1}"
            merged = _merge(self.raw, {k: v for k, v in alt.items() if k not in ("name", "source", "breaks")})
            merged.pop("alternatives", None)
            if "model" in alt:                   # a named model replaces an inline one
                merged.pop("model_config", None)
            where = f"{self.origin} alternatives[{i}] ({name})" if self.origin else f"alternatives[{i}]"
            out.append((name, scenario_from_dict(merged, self.base_dir, where=where)))
        return out


def _merge(base: dict, change: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in change.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _table(d: dict, key: str, where: str) -> dict:
    v = d.get(key, {})
    if not isinstance(v, dict):
        raise bad_value(f"{where}{key}", v, "a table")
    return v


def _float(d: dict, key: str, where: str, default: float) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad_value(f"{where}.{key}", v, "a number")
    return float(v)


def _str(d: dict, key: str, where: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise bad_value(f"{where}.{key}", v, "a string")
    return v


def _bool(d: dict, key: str, where: str) -> bool | None:
    v = d.get(key)
    if v is not None and not isinstance(v, bool):
        raise bad_value(f"{where}.{key}", v, "true or false")
    return v


def _int(d: dict, key: str, where: str, default: int | None = None) -> int | None:
    v = d.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_value(f"{where}.{key}", v, "an integer")
    return v


def parse_stages(stages: list, n_layers: int, where: str) -> tuple[int, ...]:
    """["0-3", "4", "5-79"] -> stage sizes; every layer mapped to exactly one stage, in order."""
    covered: list[int] = []
    sizes = []
    for i, text in enumerate(stages):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", str(text))
        if not m:
            raise bad_value(f"{where}.stages[{i}]", text, 'a layer range like "0-3" or a single layer "4"')
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        require(a <= b, f"{where}.stages[{i}]", text, "a range whose first layer is not after its last")
        require(b < n_layers, f"{where}.stages[{i}]", text, f"layers of the model, 0-{n_layers - 1}")
        covered.extend(range(a, b + 1))
        sizes.append(b - a + 1)
    expected = list(range(n_layers))
    if covered != expected:
        missing = sorted(set(expected) - set(covered))
        if missing:
            raise bad_value(f"{where}.stages", stages, f"every layer 0-{n_layers - 1} in exactly one stage; layer "
                            f"{missing[0]} is mapped to no stage")
        raise bad_value(f"{where}.stages", stages,
                        f"consecutive, non-overlapping ranges covering layers 0-{n_layers - 1} in order")
    return tuple(sizes)


def deployment_from_dict(d: dict, model: ModelSpec, hw: HardwareSpec, spec: SpecDecode | None, where: str) -> Deployment:
    """A [deployment] table (checked by DeploymentTable) laid out on `hw` for `model`."""
    t = validate(DeploymentTable, d, "", prefix=where)
    stage_layers = None
    if t.stages is not None:
        stage_layers = parse_stages(t.stages, model.n_layers, where)
    elif t.stage_layers is not None:
        stage_layers = tuple(t.stage_layers)
    kw = t.deployment_fields()
    tp, pp, chips = t.tp, t.pp, t.chips
    if stage_layers is not None:
        pp = len(stage_layers)
    dep, _ = resolve_layout(model, hw, dict(spec=spec, **kw), chips=chips, tp=tp, pp=pp)
    if stage_layers is not None:
        dep = replace(dep, stage_layers=stage_layers, pp=len(stage_layers))
    dep.stages(model.n_layers)
    return dep


def spec_from_dict(d: dict | None, where: str = "speculative") -> SpecDecode | None:
    """A [speculative] table (checked by SpeculativeTable) as a SpecDecode; None when absent or empty."""
    if d is None or d == {}:
        return None
    return validate(SpeculativeTable, d, "", prefix=where).to_spec()      # None for method "none"


def _model(s: ScenarioFile, base_dir: Path, origin: str) -> ModelSpec:
    if s.model_config_ is not None:
        try:
            return spec_from_config(s.model_config_, name=s.model_name or s.name or "scenario model",
                                    source=s.model_source or "scenario file")
        except TokensimError as exc:
            raise TokensimError(f"{origin}: [model_config] {exc}") from None
    name = s.model or ""                  # ScenarioFile holds a model or a model_config
    path = base_dir / name
    return load_model(str(path) if path.suffix == ".json" and is_file(path) else name)


def _hardware(name: str, base_dir: Path) -> HardwareSpec:
    path = base_dir / name
    return load_hardware(str(path) if path.suffix in (".toml", ".yaml", ".yml") and is_file(path) else name)


def scenario_from_dict(d: dict, base_dir: Path, where: str = "scenario") -> Scenario:
    """A parsed scenario file as a Scenario; `where` (the file) heads every message about a bad field."""
    s = validate(ScenarioFile, d, where)
    raw = s.model_dump(by_alias=True, exclude_unset=True)      # the checked values (8.0 read as 8, and so on)
    try:                                  # names resolved, then checked against the model and chip
        model = _model(s, base_dir, where)
        hw = with_peer_to_peer(_hardware(s.hardware, base_dir), s.p2p, "p2p")
        spec = spec_from_dict(raw.get("speculative"))
        dep = deployment_from_dict(raw.get("deployment", {}), model, hw, spec, "deployment")
    except TokensimError as exc:
        message = str(exc)
        raise TokensimError(message if message.startswith(f"{where}: ") else f"{where}: {message}") from None
    claim = None
    if s.claim is not None:
        c = s.claim
        claim = Claim(id=c.id, text=c.text, quantity=c.quantity, value=c.value, unit=c.unit, source=c.source, kind=c.kind)
    return Scenario(name=s.name or "scenario", title=s.title if s.title is not None else (s.name or ""), model=model,
                    hardware=hw, deployment=dep, raw=raw, base_dir=base_dir, claim=claim, origin=where)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    if path.suffix != ".toml":
        raise bad_value("scenario", str(path), "a .toml scenario file")
    return scenario_from_dict(read_mapping(path), path.parent, where=str(path))


def scenario_constants(s: Scenario) -> ConstantsTable:
    """The constants a scenario runs with: the shipped table, with its [constants] table (a what-if) over the
    values of its hardware family. A new table object: nothing shared is changed."""
    overrides = s.raw.get("constants")
    if not overrides:
        return default_table()
    names = set(CONSTANT_NAMES)
    for key, value in overrides.items():
        if key not in names:
            raise bad_value(f"constants.{key}", value, f"one of {', '.join(sorted(names))}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise bad_value(f"constants.{key}", value, "a finite number >= 0")
    return default_table().with_overlay({s.hardware.family: {"default": {k: float(v) for k, v in overrides.items()}}})


def run_scenario(s: Scenario) -> Prediction:
    """The prediction for a scenario: plain, attention-FFN disaggregated, or prefill-decode disaggregated.
    A [constants] table overrides empirical constants for this scenario's hardware family (a what-if)."""
    return _run(s, scenario_constants(s))


def _run(s: Scenario, table: ConstantsTable) -> Prediction:
    raw = s.raw
    if "afd" in raw:
        a = raw["afd"]
        ffn_hw = load_hardware(a.get("ffn_hardware", s.hardware.name))
        ffn_dep = deployment_from_dict(_table(a, "ffn_deployment", "afd."), s.model, ffn_hw, None, "afd.ffn_deployment") \
            if "ffn_deployment" in a else Deployment()
        link = LinkSpec(_float(a, "link_bandwidth_bytes_per_s", "afd", 50e9), _float(a, "link_latency_s", "afd", 5e-6),
                        _str(a, "link_name", "afd") or "afd link")
        micro_batches = _int(a, "micro_batches", "afd", 2)
        if micro_batches is None:           # only an explicit None in a dict; a TOML file has no null
            raise bad_value("afd.micro_batches", micro_batches, "an integer >= 1")
        return predict_afd(s.model, s.hardware, s.deployment, ffn_hw, ffn_dep, link, micro_batches, table)
    if "prefill" in raw:
        p = raw["prefill"]
        phw = load_hardware(p.get("hardware", s.hardware.name))
        pdep = deployment_from_dict(_table(p, "deployment", "prefill."), s.model, phw, None, "prefill.deployment")
        link = LinkSpec(_float(p, "link_bandwidth_bytes_per_s", "prefill", 50e9), _float(p, "link_latency_s", "prefill", 10e-6),
                        "kv link")
        return predict_pd(s.model, phw, pdep, s.hardware, s.deployment, link, table)
    notes = tuple(f"scenario: {line}" for line in raw.get("assumptions", []))
    return predict_deployment(s.model, s.hardware, s.deployment, notes, constants=table)


def shipped_scenarios() -> dict[str, Path]:
    from importlib import resources
    root = Path(str(resources.files("tokensim") / "data" / "scenarios"))
    return {p.stem: p for p in sorted(root.rglob("*.toml"))}


def find_scenario(name_or_path: str) -> Path:
    """A path to a scenario file, or the name of a shipped one."""
    path = Path(name_or_path)
    try:
        exists = path.exists()
    except (OSError, ValueError):       # a name the OS refuses (too long, a NUL byte) is no file
        exists = False
    if exists:
        return path
    shipped = shipped_scenarios()
    if name_or_path in shipped:
        return shipped[name_or_path]
    from tokensim.catalog import unknown
    raise unknown("scenario", name_or_path, shipped)
