"""Scenario files (TOML): a whole deployment, optionally disaggregated, with the claim it checks.

Layout (every table but [deployment] optional; see data/scenarios/*.toml for worked examples):
  name, title, model (catalog name or config path, relative to the file) or [model_config] (inline HF config),
  hardware; [deployment] tp pp ep dp attn_dp chips batch input_tokens output_tokens weights expert_weights
  compute kv engine micro_batches overlap_comm redundant_experts stage_layers | stages = ["0-3", "4-7", ...];
  [speculative] method draft_tokens acceptance draft_model; [afd] ffn_hardware ffn_deployment(table)
  link_bandwidth_bytes_per_s link_latency_s micro_batches; [prefill] hardware deployment(table)
  link_bandwidth_bytes_per_s link_latency_s; [workload] sequences (batch benchmark); [claim] id text
  quantity value unit source kind; [[alternatives]] name + any of the tables above, changing one assumption.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tokensim.deploy.deployment import Deployment, SpecDecode
from tokensim.prediction.disagg import LinkSpec, predict_afd, predict_pd
from tokensim.errors import TokensimError, bad_value, require
from tokensim.specs.hardware.catalog import load_hardware
from tokensim.specs.hardware.loader import read_mapping
from tokensim.specs.hardware.spec import HardwareSpec
from tokensim.deploy.layout import resolve_layout
from tokensim.perf.constants import NAMES as CONSTANT_NAMES, ConstantsTable, default_table
from tokensim.specs.model.catalog import load_model
from tokensim.specs.model.hf_config import spec_from_config
from tokensim.specs.model.spec import ModelSpec
from tokensim.prediction.predictor import Prediction, predict_deployment

DEPLOYMENT_KEYS = {"tp", "pp", "ep", "dp", "attn_dp", "chips", "batch", "input_tokens", "output_tokens", "weights",
                   "expert_weights", "compute", "kv", "engine", "micro_batches", "overlap_comm", "redundant_experts",
                   "stage_layers", "stages"}


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

    def alternatives(self) -> list[tuple[str, "Scenario"]]:
        """The scenario's named variants, each with one changed assumption."""
        out = []
        for i, alt in enumerate(self.raw.get("alternatives", [])):
            name = alt.get("name") or f"alternative {i + 1}"
            merged = _merge(self.raw, {k: v for k, v in alt.items() if k != "name"})
            merged.pop("alternatives", None)
            if "model" in alt:                   # a named model replaces an inline one
                merged.pop("model_config", None)
            out.append((name, scenario_from_dict(merged, self.base_dir, where=f"alternatives[{i}]")))
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
        covered.extend(range(a, b + 1))
        sizes.append(b - a + 1)
    expected = list(range(n_layers))
    if covered != expected:
        missing = sorted(set(expected) - set(covered))
        if missing:
            raise bad_value(f"{where}.stages", stages, f"every layer 0-{n_layers - 1} in exactly one stage; layer "
                            f"{missing[0]} is mapped to no stage")
        raise bad_value(f"{where}.stages", stages, f"consecutive, non-overlapping ranges covering layers 0-{n_layers - 1} in order")
    return tuple(sizes)


def deployment_from_dict(d: dict, model: ModelSpec, hw: HardwareSpec, spec: SpecDecode | None, where: str) -> Deployment:
    unknown = set(d) - DEPLOYMENT_KEYS
    if unknown:
        raise bad_value(f"{where}.{sorted(unknown)[0]}", d[sorted(unknown)[0]], f"one of the fields {', '.join(sorted(DEPLOYMENT_KEYS))}")
    stage_layers = None
    if "stages" in d:
        if not isinstance(d["stages"], list):
            raise bad_value(f"{where}.stages", d["stages"], 'a list of layer ranges like ["0-3", "4-7"]')
        stage_layers = parse_stages(d["stages"], model.n_layers, where)
    elif "stage_layers" in d:
        sl = d["stage_layers"]
        if not isinstance(sl, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in sl):
            raise bad_value(f"{where}.stage_layers", sl, "a list of layer counts, one per pipeline stage")
        stage_layers = tuple(sl)
    kw: dict[str, Any] = {k: _str(d, k, where) for k in ("weights", "expert_weights", "compute", "kv", "engine") if k in d}
    for k in ("batch", "input_tokens", "output_tokens", "ep", "dp", "attn_dp", "micro_batches", "redundant_experts"):
        if k in d:
            kw[k] = _int(d, k, where)
    if "overlap_comm" in d:
        kw["overlap_comm"] = _bool(d, "overlap_comm", where)
    tp, pp, chips = _int(d, "tp", where), _int(d, "pp", where), _int(d, "chips", where)
    if stage_layers is not None:
        pp = len(stage_layers)
    dep, _ = resolve_layout(model, hw, dict(spec=spec, **kw), chips=chips, tp=tp, pp=pp)
    if stage_layers is not None:
        dep = replace(dep, stage_layers=stage_layers, pp=len(stage_layers))
    dep.stages(model.n_layers)
    return dep


def spec_from_dict(d: dict | None, where: str = "speculative") -> SpecDecode | None:
    if not d:
        return None
    if not isinstance(d, dict):
        raise bad_value(where, d, "a table")
    acc = d.get("acceptance", [0.8])
    acc = tuple(acc) if isinstance(acc, list) else (acc,)
    for a in acc:
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a < 1.0:
            raise bad_value(f"{where}.acceptance", a, "a rate in [0, 1)")
    return SpecDecode(method=_str(d, "method", where) or "mtp", draft_tokens=_int(d, "draft_tokens", where, 1),
                      acceptance=acc, draft_model=_str(d, "draft_model", where))


def _model(d: dict, base_dir: Path) -> ModelSpec:
    if "model_config" in d:
        cfg = d["model_config"]
        return spec_from_config(cfg, name=d.get("model_name", d.get("name", "scenario model")), source=d.get("model_source", "scenario file"))
    name = d.get("model")
    if not name:
        raise bad_value("model", None, "a catalog name, a config.json path or a [model_config] table")
    path = base_dir / name
    return load_model(str(path) if path.suffix == ".json" and path.exists() else name)


def scenario_from_dict(d: dict, base_dir: Path, where: str = "scenario") -> Scenario:
    model = _model(d, base_dir)
    if "hardware" not in d:
        raise bad_value("hardware", None, "a catalog name or a hardware file")
    hw_path = base_dir / d["hardware"]
    hw = load_hardware(str(hw_path) if hw_path.suffix in (".toml", ".yaml", ".yml") and hw_path.exists() else d["hardware"])
    spec = spec_from_dict(d.get("speculative"))
    dep = deployment_from_dict(_table(d, "deployment", ""), model, hw, spec, "deployment")
    claim = None
    if "claim" in d:
        c = d["claim"]
        for key in ("id", "quantity", "value"):
            if key not in c:
                raise bad_value(f"claim.{key}", None, "a value (field missing)")
        claim = Claim(id=str(c["id"]), text=str(c.get("text", "")), quantity=str(c["quantity"]), value=float(c["value"]),
                      unit=str(c.get("unit", "")), source=str(c.get("source", "")), kind=str(c.get("kind", "")))
    return Scenario(name=str(d.get("name", "scenario")), title=str(d.get("title", d.get("name", ""))), model=model,
                    hardware=hw, deployment=dep, raw=d, base_dir=base_dir, claim=claim)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    if path.suffix != ".toml":
        raise bad_value("scenario", str(path), "a .toml scenario file")
    return scenario_from_dict(read_mapping(path), path.parent)


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
        return predict_afd(s.model, s.hardware, s.deployment, ffn_hw, ffn_dep, link, _int(a, "micro_batches", "afd", 2), table)
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
    if path.exists():
        return path
    shipped = shipped_scenarios()
    if name_or_path in shipped:
        return shipped[name_or_path]
    from tokensim.catalog import unknown
    raise unknown("scenario", name_or_path, shipped)
