"""The shipped model catalog (data/models/catalog.toml + config files) and loading a user's config.json."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tokensim.catalog import alias_index, normalize, unknown
from tokensim.errors import TokensimError, bad_value
from tokensim.inputs.files import exists
from tokensim.specs.model.spec import ModelSpec, WeightPrecisions
from tokensim.specs.precision import get_precision


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    file: str
    source: str
    aliases: tuple[str, ...] = ()
    stated_total_params: float | None = None
    stated_active_params: float | None = None
    stated_source: str = ""
    count_note: str = ""
    weights: tuple[tuple[str, str], ...] = ()
    note: str = ""


def _data_dir() -> Path:
    return Path(str(resources.files("tokensim") / "data" / "models"))


@lru_cache(maxsize=1)
def entries() -> dict[str, CatalogEntry]:
    table = tomllib.loads((_data_dir() / "catalog.toml").read_text(encoding="utf-8"))
    out = {}
    for name, e in table.items():
        out[name] = CatalogEntry(
            name=name, file=e["file"], source=e.get("source", ""), aliases=tuple(e.get("aliases", ())),
            stated_total_params=e.get("stated_total_params"), stated_active_params=e.get("stated_active_params"),
            stated_source=e.get("stated_source", ""), count_note=e.get("count_note", ""),
            weights=tuple(sorted(e.get("weights", {}).items())), note=e.get("note", ""),
        )
    return out


@lru_cache(maxsize=1)
def _alias_index() -> dict[str, str]:
    return alias_index((name, e.aliases) for name, e in entries().items())


def find_name(text: str) -> str | None:
    """Catalog name for an exact name or a normalized alias, else None. A Hugging Face repository id
    ('meta-llama/Llama-3.1-8B') is also looked up by its name part when the whole id is not an alias."""
    if text in entries():
        return text
    found = _alias_index().get(normalize(text))
    owner, slash, repo = text.strip().partition("/")
    if found is None and slash and repo and " " not in owner and "/" not in repo:
        found = _alias_index().get(normalize(repo))
    return found


def _with_overrides(spec: ModelSpec, overrides: tuple[tuple[str, str], ...]) -> ModelSpec:
    if not overrides:
        return spec
    for group, precision in overrides:
        get_precision(precision, f"weights.{group}")
    return replace(spec, weights=replace(spec.weights, **dict(overrides)))


@lru_cache(maxsize=128)
def catalog_model(name: str) -> ModelSpec:
    from tokensim.specs.model.hf_config import read_json_document, spec_from_config

    e = entries()[name]
    config = read_json_document(_data_dir() / e.file)
    return _with_overrides(spec_from_config(config, name=name, source=e.source), e.weights)


def load_model(name_or_path: str | ModelSpec) -> ModelSpec:
    """A catalog name (exact, or an alias after normalization) or a path to a config.json."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    found = find_name(name_or_path)
    if found:
        return catalog_model(found)
    path = Path(name_or_path)
    if path.suffix == ".json" or exists(path):
        from tokensim.specs.model.hf_config import load_config_file

        if not exists(path):
            raise bad_value("model", name_or_path, "a catalog name or an existing config.json path")
        return load_config_file(path)
    raise unknown("model", name_or_path, list(entries()) + [a for e in entries().values() for a in e.aliases])


__all__ = ["CatalogEntry", "entries", "find_name", "catalog_model", "load_model", "TokensimError", "WeightPrecisions"]
