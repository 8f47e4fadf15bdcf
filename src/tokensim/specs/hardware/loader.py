"""Load hardware specs from TOML or YAML files (safe parsers only; nothing in a file is executed).

The file's layout and every figure's type, range and unit are checked once by tokensim.inputs.hardware_file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tokensim.inputs.base import validate
from tokensim.inputs.files import read_mapping as _read_mapping
from tokensim.inputs.hardware_file import HardwareFile
from tokensim.specs.hardware.spec import HardwareSpec


def read_mapping(path: Path) -> dict[str, Any]:
    """Parse a TOML or YAML (or JSON) file into a dict, with a one-line error naming the file on failure."""
    return _read_mapping(path)


def hardware_from_dict(d: dict[str, Any], origin: str = "") -> HardwareSpec:
    """A parsed hardware file as a HardwareSpec; a bad field fails naming `origin`, the field and the value."""
    return validate(HardwareFile, d, origin or "hardware").to_spec()


def load_hardware_file(path: str | Path) -> HardwareSpec:
    path = Path(path)
    return hardware_from_dict(read_mapping(path), origin=str(path))
