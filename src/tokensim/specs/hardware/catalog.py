"""The shipped hardware catalog (one TOML per chip in data/hardware) and a user's own file."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from tokensim.catalog import alias_index, normalize, unknown
from tokensim.inputs.files import exists
from tokensim.specs.hardware.loader import load_hardware_file
from tokensim.specs.hardware.spec import HardwareSpec


def _data_dir() -> Path:
    return Path(str(resources.files("tokensim") / "data" / "hardware"))


@lru_cache(maxsize=1)
def catalog() -> dict[str, HardwareSpec]:
    specs = (load_hardware_file(p) for p in sorted(_data_dir().glob("*.toml")))
    return {h.name: h for h in specs}


@lru_cache(maxsize=1)
def _alias_index() -> dict[str, str]:
    return alias_index((name, (h.display_name, *h.aliases)) for name, h in catalog().items())


def find_name(text: str) -> str | None:
    if text in catalog():
        return text
    return _alias_index().get(normalize(text))


def load_hardware(name_or_path: str | HardwareSpec) -> HardwareSpec:
    """A catalog name (exact, or an alias after normalization) or a path to a TOML/YAML file."""
    if isinstance(name_or_path, HardwareSpec):
        return name_or_path
    found = find_name(name_or_path)
    if found:
        return catalog()[found]
    path = Path(name_or_path)
    if path.suffix in (".toml", ".yaml", ".yml") or exists(path):
        return load_hardware_file(path)
    raise unknown("hardware", name_or_path, list(catalog()) + [a for h in catalog().values() for a in h.aliases])
