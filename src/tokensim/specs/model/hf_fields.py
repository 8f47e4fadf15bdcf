"""Typed reads from a Hugging Face config dict: every bad value fails naming the field it came from.

`Fields` wraps one level of a config (the whole file, or its `text_config`). `_source` keys are
dropped. Files that use other field names (DBRX, DeepSeek's reference-code configs) are renamed
to HF names by `hf_config`, and `origin` keeps the file's own name for messages.
"""
from __future__ import annotations

import builtins
from typing import Any

from tokensim.errors import bad_value

_MISSING = object()


class Fields:
    def __init__(self, data: dict, where: str = "", origin: dict[str, str] | None = None) -> None:
        self.data = {k: v for k, v in data.items() if k != "_source"}
        self.where = where                  # prefix for messages, e.g. "text_config."
        self.origin = origin or {}          # HF name -> the name the file used

    def name(self, key: str) -> str:
        return self.where + self.origin.get(key, key)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def first(self, *keys: str) -> str | None:
        """The first of `keys` the config sets (not null)."""
        return next((k for k in keys if self.has(k)), None)

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise bad_value(self.name(key), None, "an integer (the field is missing)")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise bad_value(self.name(key), value, "an integer")
        if value < minimum:
            raise bad_value(self.name(key), value, f"an integer >= {minimum}")
        return int(value)

    def int_of(self, *keys: str, default: Any = _MISSING, minimum: int = 1) -> int:
        """The first of `keys` that is set, read as an integer; missing ones are named together."""
        key = self.first(*keys)
        if key is None:
            if default is _MISSING:
                raise bad_value(self.where + " or ".join(keys), None, "an integer (the field is missing)")
            return default
        return self.int(key, minimum=minimum)

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad_value(self.name(key), value, "a number")
        return float(value)

    def bool(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise bad_value(self.name(key), value, "true or false")
        return value

    def str(self, key: str, default: str = "") -> str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise bad_value(self.name(key), value, "a string")
        return value

    def list(self, key: str, of: type = builtins.int, length: int | None = None) -> list | None:
        """A list of `of` (ints or strings), or None when the field is absent."""
        value = self.data.get(key)
        if value is None:
            return None
        ok = isinstance(value, list) and all(isinstance(v, of) and not isinstance(v, bool) for v in value)
        if not ok:
            raise bad_value(self.name(key), value, f"a list of {of.__name__}")
        if length is not None and len(value) < length:
            raise bad_value(self.name(key), f"{len(value)} entries", f"at least {length} entries, one per layer")
        return value

    def sub(self, key: str) -> "Fields | None":
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise bad_value(self.name(key), value, "a JSON object")
        return Fields(value, self.name(key) + ".")
