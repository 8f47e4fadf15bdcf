"""Engine profiles: what a serving engine reaches on top of the datasheet (data/engines/<name>.toml).

A profile names an engine family (vLLM, SGLang, TensorRT-LLM, llama.cpp, and `default` for an unnamed or
unknown one), the spellings that mean it, the releases it covers and, in its [constants] table, the priors of
the empirical constants where they differ from constants.toml's [default.default]; `tokensim fit` writes the
fitted values under [constants.default.<engine>] of the fitted table. A deployment or a measurement names its
engine; anything else falls back to `default` (whose prediction ranges are wider).

A profile's `releases` list says what changed between an engine's releases. An entry may carry traits that change
the physics of a step, not a fitted constant: `gqa_kv_read_per_query_head = true` (the decode attention kernel
reads a grouped-query model's KV once per query head, not once per KV head). A deployment that names its engine's
version (`engine_version`) gets the traits of the first entry whose `versions` specifier holds it.

Kernel fusions (FUSIONS) are the deployment's own (Deployment.fusions, `--fusions`), never a release default: the kernel
counts (perf/layers.py KERNELS) are vLLM's and SGLang's, and the fitted kernel gap absorbs what other engines fuse
(docs/model.md 1.4 says what a refit with TensorRT-LLM's fusions did).
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from tokensim.errors import TokensimError, bad_value

DEFAULT_ENGINE = "default"
TRAITS = ("gqa_kv_read_per_query_head",)      # release traits the cost model reads (perf/context.py)
# Kernel fusions that change how many kernels a decode step launches (perf/layers.py launch_s), each a structural fact
# of an engine's code or of a launch flag, never fitted:
FUSIONS = {
    "allreduce_norm": "each tensor-parallel all-reduce carries the residual add and the RMSNorm after it (TensorRT-LLM's "
                      "AllReduceFusionOp.RESIDUAL_RMS_NORM, vLLM's fuse_allreduce_rms pass, SGLang's "
                      "--enable-flashinfer-allreduce-fusion): one launch fewer per all-reduce",
    "moe_gemm1": "the routed experts' first grouped GEMM takes the token permute and the gated activation into it "
                 "(trtllm-gen MoE kernels on Blackwell: routing, GEMM 1, GEMM 2, finalize): two launches fewer per MoE "
                 "layer",
}


def parse_fusions(text: str | None, field: str = "--fusions", sep: str = ",") -> tuple[str, ...] | None:
    """A list of FUSIONS names as a user writes it: None (not given), 'none' (no fusion) or names joined by `sep`."""
    if text is None:
        return None
    names = tuple(p.strip() for p in text.split(sep) if p.strip())
    if names == ("none",):
        return ()
    if not names:
        raise bad_value(field, text, f"names from {', '.join(FUSIONS)} joined by {sep!r}, or none")
    for name in names:
        if name not in FUSIONS:
            raise bad_value(field, text, f"names from {', '.join(FUSIONS)} joined by {sep!r}, or none alone")
    return names


@dataclass(frozen=True)
class EngineProfile:
    name: str
    display_name: str
    aliases: tuple[str, ...]
    evidence: str
    releases: tuple[dict, ...] = ()
    constants: dict = field(default_factory=dict)     # {name: value, name_evidence: text} over [default.default]
    scheduler: dict = field(default_factory=dict)     # documented scheduler defaults, for the serving simulator


def _dir() -> Path:
    return Path(str(resources.files("tokensim") / "data" / "engines"))


@lru_cache(maxsize=1)
def engine_profiles() -> dict[str, EngineProfile]:
    out = {}
    for path in sorted(_dir().glob("*.toml")):
        try:
            d = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise TokensimError(f"{path.name}: not a readable engine profile ({str(exc).splitlines()[0]})") from None
        out[d["name"]] = EngineProfile(name=d["name"], display_name=d.get("display_name", d["name"]),
                                       aliases=tuple(d.get("aliases", ())), evidence=d.get("evidence", ""),
                                       releases=tuple(d.get("releases", ())), constants=dict(d.get("constants", {})),
                                       scheduler=dict(d.get("scheduler", {})))
    return out


def engine_names() -> tuple[str, ...]:
    """Every name a deployment may give as its engine: profile names and their aliases."""
    names: list[str] = []
    for p in engine_profiles().values():
        names += [p.name, *p.aliases]
    return tuple(dict.fromkeys(names))


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


@lru_cache(maxsize=1)
def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for p in engine_profiles().values():
        for alias in (p.name, *p.aliases):
            index.setdefault(_key(alias), p.name)
    return index


def canonical_engine(name: str) -> str | None:
    """The profile name for an engine name or alias (exact after lower-casing and dropping punctuation), else None."""
    return _alias_index().get(_key(name))


def find_engine(text: str) -> str | None:
    """The profile an engine named somewhere in free text belongs to ('vLLM 0.19.0', 'SGLang (launch_server)',
    'Dynamo + TensorRT-LLM'); the longest alias found wins, so 'vllm-cpu' is not read as 'vllm' + noise."""
    key = _key(text)
    best: tuple[int, str] | None = None
    for alias, name in _alias_index().items():
        if name == DEFAULT_ENGINE or len(alias) < 4 and alias != key:
            continue
        if alias and alias in key and (best is None or len(alias) > best[0]):
            best = (len(alias), name)
    return best[1] if best else None


def parse_release(text: str) -> Version | None:
    """A release number as an engine or its user writes it ('0.6.1', 'v0.8a', '1.2.0rc3'), else None."""
    try:
        return Version(text.strip())
    except InvalidVersion:
        return None


def version_in_text(text: str, engine: str) -> str | None:
    """The release number written right after one of `engine`'s names in free text ('TensorRT-LLM v0.6.1 (NVIDIA)'
    -> '0.6.1'); it must have a dot, so 'vLLM V1' (the engine generation) is no release."""
    profile = engine_profiles().get(engine)
    if profile is None:
        return None
    for alias in sorted({profile.name, *profile.aliases}, key=len, reverse=True):
        m = re.search(re.escape(alias) + r"\s*v?(\d+\.\d+(?:\.\d+)*(?:(?:a|b|rc)\d*)?)\b", text, re.I)
        if m:
            return m.group(1)
    return None


def release_traits(engine: str, version: str | None) -> dict[str, bool]:
    """The step-physics traits (TRAITS) of `engine` at `version`: those of the first `releases` entry whose
    `versions` specifier holds it; {} when no version is given or no entry names one."""
    v = parse_release(version) if version else None
    profile = engine_profiles().get(engine)
    if v is None or profile is None:
        return {}
    for entry in profile.releases:
        if v in _specifier(profile.name, entry.get("versions", "")):
            return {k: bool(entry[k]) for k in TRAITS if k in entry}
    return {}


@lru_cache(maxsize=64)
def _specifier(engine: str, text: str) -> SpecifierSet:
    try:
        return SpecifierSet(text, prereleases=True)
    except InvalidSpecifier:
        raise TokensimError(f"{engine}.toml: releases.versions {text!r} is not a version specifier "
                            "(expected e.g. '<0.8' or '>=0.17')") from None
