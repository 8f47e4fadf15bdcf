"""Typed reads from a Hugging Face config dict: every bad value fails naming the field it came from.

`Fields` wraps one level of a config (the whole file, or its `text_config`). `_source` keys are
dropped. Files that use other field names (DBRX, DeepSeek's reference-code configs) are renamed
to HF names by `hf_config`, and `origin` keeps the file's own name for messages.
"""
from __future__ import annotations

import builtins
import math
from typing import Any

from tokensim.errors import bad_value

_MISSING = object()

# Bounds on what a config may ask for: they keep a typo (1e7 layers, a 1e30 hidden size) from running for
# minutes or overflowing to inf, and sit far above any published model (126 layers, hidden 16,384, vocab 262,208).
MAX_LAYERS = 1_000
_LAYER_FIELDS = {"num_hidden_layers", "n_layers", "num_layers", "vt_num_hidden_layers", "depth", "mtp_num_hidden_layers",
                 "num_nextn_predict_layers", "num_mtp_modules", "mtp_transformer_layers"}
MAX_SIZE = 2**24                 # widths, head counts, experts, vocabulary
MAX_POSITIONS = 2**31            # context lengths, windows, chunks
_POSITION_WORDS = ("position", "window", "chunk")


def int_limit(key: str) -> tuple[int, str]:
    """(the largest value `key` may take, the reason for the message)."""
    if key in _LAYER_FIELDS:
        return MAX_LAYERS, f"tokensim reads models of at most {MAX_LAYERS:,} layers"
    if any(w in key for w in _POSITION_WORDS):
        return MAX_POSITIONS, "a token count below 2^31"
    return MAX_SIZE, "sizes and counts below 2^24"


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
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
            raise bad_value(self.name(key), _short(value), "an integer")
        if value < minimum:
            raise bad_value(self.name(key), _short(value), f"an integer >= {minimum}")
        limit, why = int_limit(key)
        if value > limit:
            raise bad_value(self.name(key), _short(value), f"an integer <= {limit:,} ({why})")
        return int(value)

    def int_of(self, *keys: str, default: Any = _MISSING, minimum: builtins.int = 1) -> builtins.int:
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
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not (abs(value) < 1e300 and math.isfinite(value)):        # abs() first: no OverflowError on a huge int
            raise bad_value(self.name(key), _short(value), "a finite number")
        return float(value)

    def bool(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise bad_value(self.name(key), _short(value), "true or false")
        return value

    def str(self, key: str, default: str = "") -> str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise bad_value(self.name(key), _short(value), "a string")
        return value

    def list(self, key: builtins.str, of: type = builtins.int,
             length: builtins.int | None = None) -> builtins.list | None:
        """A list of `of` (ints or strings), or None when the field is absent."""
        value = self.data.get(key)
        if value is None:
            return None
        ok = isinstance(value, list) and all(isinstance(v, of) and not isinstance(v, bool) for v in value)
        if not ok:
            raise bad_value(self.name(key), _short(value), f"a list of {of.__name__}")
        if of is builtins.int and any(abs(v) > MAX_POSITIONS for v in value):
            raise bad_value(self.name(key), _short(value), "a list of integers between -2^31 and 2^31")
        if length is not None and len(value) < length:
            raise bad_value(self.name(key), f"{len(value)} entries", f"at least {length} entries, one per layer")
        return value

    def sub(self, key: builtins.str) -> Fields | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise bad_value(self.name(key), _short(value), "a JSON object")
        return Fields(value, self.name(key) + ".")

    def table(self, key: builtins.str) -> Fields:
        """A sub-object that must be there (a missing one is named like any missing field)."""
        sub = self.sub(key)
        if sub is None:
            raise bad_value(self.name(key), None, "a JSON object (the field is missing)")
        return sub

    def list_of(self, key: builtins.str, of: type = builtins.int, length: builtins.int | None = None) -> builtins.list:
        """A list that must be there."""
        value = self.list(key, of, length)
        if value is None:
            raise bad_value(self.name(key), None, f"a list of {of.__name__} (the field is missing)")
        return value


def _short(value: Any) -> Any:
    """A value fit for a one-line message: huge integers and long lists cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    if isinstance(value, str) and len(value) > 60:
        return value[:57] + "..."
    if isinstance(value, (list, dict)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value)} entries"
    return value
