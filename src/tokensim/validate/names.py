"""Catalog names for the model and hardware cells of a measurement table, variants included.

A model cell may name a variant of a catalog model: an instruct, chat or base tune, a dated release
('-Instruct-2507', '-0905'), or a quantized checkpoint ('-FP8', '-AWQ', '-GPTQ-Int4', '-NVFP4', GGUF 'Q4_K_M').
These share the catalog model's architecture, so the tags are dropped one at a time from the end until a catalog
name matches; a quantization tag also says how the weights are stored. A hardware cell may carry a chip count
('8xH100'), memory size or words about the system; those are dropped the same way.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tokensim.specs.hardware import catalog as hw_catalog
from tokensim.specs.model import catalog as model_catalog
from tokensim.validate.parse import Skip, chips_named, precision_word, unstated

_QUANT_TAG = (r"fp8(?:[-_](?:dynamic|static|block|e4m3))?|nvfp4|mxfp4|fp4|bf16|fp16|awq(?:[-_]int4)?|gptq(?:[-_]int[48])?"
              r"|int4|int8|w4a16|w8a8|w8a16|gguf|q\d_k(?:_[msl])?|q\d_\d|iq\d_\w+|qat|dynamic|kv|quantized[.-]w\d+a\d+")
_TUNE_TAG = r"instruct|chat|base|it|hf|thinking|\d{4}|\d{6}|\d{8}|\d{4}-\d{2}-\d{2}|v\d+\.\d+"
_TAG_AT_END = re.compile(rf"[-_ .]({_QUANT_TAG}|{_TUNE_TAG})$", re.I)


@dataclass(frozen=True)
class ModelMatch:
    name: str                   # catalog name
    precision: str | None       # stored weight precision the cell names ('-FP8', '(NVFP4)', 'GGUF Q4_K_M'), else None
    note: str                   # how the cell was read, for the row's assumptions


@dataclass(frozen=True)
class HardwareMatch:
    name: str                   # catalog name
    chips: int | None           # a chip count written in the cell ('8xH100'), else None
    note: str


def strip_variant(text: str) -> tuple[str | None, tuple[str, ...]]:
    """(catalog name, variant tags dropped from the end to reach it), or (None, ()) if no prefix matches."""
    current = text.strip()
    dropped: list[str] = []
    while current:
        name = model_catalog.find_name(current)
        if name:
            return name, tuple(dropped)
        m = _TAG_AT_END.search(current)
        if not m:
            break
        dropped.insert(0, m.group(1))
        current = current[: m.start()].strip()
    return None, ()


def _parens(text: str) -> list[str]:
    return [p.strip() for p in re.findall(r"\(([^()]*)\)?", text) if p.strip()]


def _model_candidates(text: str) -> list[str]:
    outside = re.sub(r"\([^()]*\)?", " ", text).strip()
    before = re.sub(r"\(.*$", "", text).strip()
    tries = [text, outside, before]
    for inner in _parens(text):      # 'DeepSeek (V3/R1 architecture)' -> 'DeepSeek V3/R1'
        tries.append(f"{outside} {inner.split()[0].rstrip(';,:')}")
    return tries + _parens(text)


def match_model(text: str) -> ModelMatch:
    """The catalog model a free-text cell names, with the stored precision the name states, or Skip."""
    if unstated(text):
        raise Skip("model not stated")
    for candidate in _model_candidates(text):
        name, dropped = strip_variant(candidate)
        if name:
            break
    else:
        if any(unstated(p) or re.search(r"not stated|not in (?:the )?excerpt|unknown", p, re.I) for p in _parens(text)):
            raise Skip(f"model variant not stated ({text!r})")
        raise Skip(f"model {text!r} not in the catalog")
    precision = precision_word(text)
    note = f"model: {text!r} -> {name}"
    if dropped:
        note += f" (variant tags {', '.join(dropped)} dropped: the variant shares {name}'s architecture)"
    if precision:
        note += f"; the name says the weights are stored as {precision}"
    return ModelMatch(name, precision, note)


_SYSTEM_WORDS = r"\b(?:node|server|system|rack|cluster|platform|instance|pod|board)s?\b"


def _hardware_candidates(text: str) -> list[str]:
    outside = re.sub(r"\([^()]*\)?", " ", text).strip()
    before = re.sub(r"\(.*$", "", text).strip()
    tries = [text, outside, before, re.sub(r"\s*[x\u00d7]\s*\d+\s*$", "", before)]
    bare = re.sub(r"(?<![\w.])\d+\s*[x\u00d7]\s*(?=[a-z])", "", before, flags=re.I)       # '8xH100' -> 'H100'
    bare = re.sub(_SYSTEM_WORDS, " ", bare, flags=re.I)
    tries += [bare, re.sub(r"\b\d+\s*GB\b", " ", bare, flags=re.I)]                       # 'GB200 192GB' -> 'GB200'
    tries += [p.split(",")[0] for p in _parens(text)]
    return [" ".join(t.split()) for t in tries if t.strip()]


def match_hardware(text: str) -> HardwareMatch:
    """The catalog hardware a free-text cell names, with a chip count written in it ('8xH100'), or Skip."""
    if unstated(text):
        raise Skip("hardware not stated")
    if re.search(r"undisclosed|not disclosed|not stated|unknown", re.sub(r"\(.*?(variant|size|count).*?\)", "", text), re.I):
        raise Skip(f"hardware not disclosed ({text!r})")
    for candidate in _hardware_candidates(text):
        name = hw_catalog.find_name(candidate)
        if name:
            break
    else:
        raise Skip(f"hardware {text!r} not in the catalog")
    chips = chips_named(re.sub(r"\(.*?\)", "", text))
    note = f"hardware: {text!r} -> {name}" + (f"; {chips} chips named in the cell" if chips else "")
    return HardwareMatch(name, chips, note)
