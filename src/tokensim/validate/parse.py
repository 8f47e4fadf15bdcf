"""Reading free-text cells of measurement tables: each function takes one cell and says how it read it.

A cell may state a fact ("FP8 (E4M3)", "~2k", "TP8 x EP8"), say in words that the source does not state it
("n/s", "not disclosed", "—"), or be empty. Every function returns the value it read (None when the cell does not
state the fact) with a note for the row's assumptions when the reading took interpretation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tokensim.errors import TokensimError


class Skip(Exception):
    """A row the rules cannot turn into a scenario; the message names the fact that is missing."""


# ---------------------------------------------------------------- "not stated", in its many spellings

_UNSTATED = re.compile(
    r"(?:n/?s|n/?a|unstated|undisclosed|unknown|unspecified|tbd|none stated|not (?:stated|disclosed|reported|given|"
    r"published|specified|known|available|in (?:the )?(?:excerpt|source))(?: in (?:the )?(?:excerpt|source|summary))?"
    r"|\?+|-+|\u2014|\u2013)",
    re.I,
)


def unstated(text: str) -> bool:
    """True for an empty cell and for one that only says the fact is not stated ('n/s', 'unknown', '?', '—', ...)."""
    t = text.strip().strip(".;:()[] ").strip()
    return not t or bool(_UNSTATED.fullmatch(t))


def says_unstated(text: str) -> bool:
    """True when a cell that states a value also flags it as not stated by the source ('BF16 (default; not stated)')."""
    return bool(re.search(r"not (?:stated|disclosed|reported|in (?:the )?excerpt)|unstated|undisclosed|\bdefault\b|\bassumed\b",
                          text, re.I))


# ---------------------------------------------------------------- counts: "~2k", "2,048", "1.5k", "128k", "5-10"

@dataclass(frozen=True)
class Count:
    value: int | None
    approximate: bool = False
    note: str = ""


_NUMBER = r"(\d+(?:\.\d+)?)\s*([km])?"
_APPROX = r"^(?:~|approx\.?|approximately|about|around|roughly)\s*"


def count(text: str, field: str, row_id: str = "", *, tokens: bool = False) -> Count:
    """An integer from a cell: '~2k', '2k', '2,048', '1.5k', '8K', '128k', '5-10' (midpoint), '64 users'.

    'k' is 1024 for token lengths (an 8K or 128k context is 8,192 or 131,072 tokens) and 1000 otherwise.
    A cell that says the fact is not stated, or 0, gives None; anything else that holds no number is an error."""
    if unstated(text):
        return Count(None, note=f"{field}: {text.strip()!r} read as not stated" if text.strip() else "")
    t = text.strip().replace(",", "")
    approximate = bool(re.match(_APPROX, t, re.I))
    t = re.sub(_APPROX, "", t, flags=re.I)
    kilo = 1024 if tokens else 1000

    def scaled(digits: str, suffix: str | None) -> float:
        return float(digits) * {"k": kilo, "m": kilo * kilo}.get((suffix or "").lower(), 1)

    m = re.fullmatch(_NUMBER + r"\s*(?:-|to|\u2013)\s*~?\s*" + _NUMBER, t, re.I)
    if m:
        value = int(round((scaled(m.group(1), m.group(2)) + scaled(m.group(3), m.group(4))) / 2))
        return Count(value, True, f"{field}: {text.strip()!r} read as {value}, the middle of the range")
    m = re.match(_NUMBER + r"(?![\d.])", t, re.I)
    if not m or (m.end() < len(t) and not re.match(r"\s*(?:\(|[a-z/])", t[m.end():], re.I)):
        where = f"row {row_id}: " if row_id else ""
        raise TokensimError(f"{where}{field} = {text!r}: expected a number ('~2k', '2,048', '5-10'), "
                            f"or words saying it is not stated")
    value = int(round(scaled(m.group(1), m.group(2))))
    if value == 0:
        return Count(None, note=f"{field}: {text.strip()!r} read as not stated (a count of 0 is no count)")
    notes = []
    if m.group(2):
        k_rule = " (k = 1024 for token lengths)" if tokens and m.group(2).lower() == "k" else ""
        notes.append(f"{m.group(1)}{m.group(2)} = {value}{k_rule}")
    if t[m.end():].strip():
        notes.append(f"the words after the number ({t[m.end():].strip()!r}) are not read")
    return Count(value, approximate, f"{field}: {text.strip()!r} read as {value}; " + "; ".join(notes) if notes else "")


def chips_named(text: str) -> int | None:
    """A chip count written with the chip: '8xH100', '8 x MI300X', '4× B200 node' -> 8, 8, 4."""
    m = re.search(r"(?<![\w.])(\d+)\s*[x\u00d7]\s*(?=[a-z])", text, re.I)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- precisions: "FP8 (E4M3)", "W4A16", "GPTQ int4", "Q4_K_M"

_EDGE_L, _EDGE_R = r"(?<![a-z0-9])", r"(?![a-z0-9])"
# (pattern, stored precision name in specs/precision.py), most specific first
PRECISION_WORDS: tuple[tuple[str, str], ...] = (
    (r"nv-?fp4", "nvfp4"),
    (r"mx-?fp4", "mxfp4"),
    (r"q4_k(?:_[msl])?", "q4_k_m"),            # llama.cpp k-quants: 4-bit blocks with 6-bit super-block scales
    (r"q4_0|i?q4_\w+", "int4-g32"),
    (r"q8_0|q8_k", "int8"),
    (r"gptq[-_ ]?int8|w8a16|int8|int-8", "int8"),
    (r"w4a16|w4a8|awq(?:[-_ ]?int4)?|gptq(?:[-_ ]?int4)?|int4|int-4|4-?bit", "int4"),
    (r"fp4|e2m1", "fp4"),
    (r"fp8|e4m3|e5m2|float8|w8a8|8-?bit", "fp8"),
    (r"bf16|bfloat16|fp16|float16|half|16-?bit", "bf16"),
    (r"fp32|float32|32-?bit", "fp32"),
)


def precision_word(text: str) -> str | None:
    """The stored weight precision a short text names, or None: 'FP8 (E4M3)' and 'fp8_e4m3' -> fp8, 'W4A16',
    'AWQ' and 'GPTQ int4' -> int4, 'Q4_K_M' -> q4_k_m, 'MXFP4' -> mxfp4, 'BF16/FP16' -> bf16, 'FP4' -> fp4 (generic)."""
    t = text.lower()
    found = [(m.start(), order, name) for order, (pattern, name) in enumerate(PRECISION_WORDS)
             for m in [re.search(_EDGE_L + f"(?:{pattern})" + _EDGE_R, t)] if m]
    if not found:
        return None
    word = min(found)[2]
    return "int4-g32" if word == "int4" and re.search(r"g\s*=\s*32|\bg32\b|group[-_ ]size\s*=?\s*32", t) else word


@dataclass(frozen=True)
class Weights:
    everything: str | None          # every linear weight (None: the checkpoint's own)
    experts: str | None             # routed experts only (None: as `everything`)
    note: str


def weights_cell(text: str) -> Weights:
    """'FP4 experts / FP8 other', 'FP8 MoE (BF16 attention)', 'NVFP4 (MoE+dense FFN); bf16 attention', 'W4A16', ...

    Segments naming experts or MoE set the expert precision; the first other segment sets the rest."""
    if unstated(text):
        return Weights(None, None, "weights: not stated" + (f" ({text.strip()!r})" if text.strip() else ""))
    everything = experts = None
    group_32 = bool(re.search(r"g\s*=\s*32|\bg32\b", text, re.I))
    for seg in re.split(r"[;/(]", text):
        word = precision_word(seg)
        word = "int4-g32" if word == "int4" and group_32 else word
        if not word:
            continue
        s = seg.lower()
        if re.search(r"expert|moe", s) and "dense" not in s:
            experts = experts or word
        elif everything is None:
            everything = word
    if everything is None and experts is None:
        raise Skip(f"weight precision {text!r} names no precision this reader knows")
    flag = "; the source did not state it (the cell's own guess)" if says_unstated(text) else ""
    return Weights(everything, experts, f"weights: {text!r} read as all={everything or 'checkpoint'}, "
                                        f"experts={experts or everything or 'checkpoint'}{flag}")


def kv_cell(text: str) -> tuple[str | None, str]:
    """KV-cache precision: 'FP8', 'fp8_e4m3', 'auto (bf16)', 'bf16 (default)' -> bf16 / fp8 / int8, or None if not stated."""
    if unstated(text) or text.strip().lower() == "auto":
        return None, "KV: not stated" + (f" ({text.strip()!r}: the checkpoint's dtype)" if text.strip() else "")
    word = precision_word(text)
    if word is None:
        raise Skip(f"KV precision {text!r} names no precision this reader knows")
    kv = "bf16" if word in ("bf16", "fp32") else word if word in ("fp8", "int8") else "fp8"
    return kv, f"KV: {text.strip()!r} read as {kv}"


# ---------------------------------------------------------------- layouts: "TP8 x EP8", "tp8ep8", "DP8+EP8", "PP2 TP4"

@dataclass(frozen=True)
class Layout:
    tp: int | None = None             # tensor parallel (attention; MoE too unless ep is given)
    pp: int | None = None
    dp: int | None = None             # data parallel: attention DP when `dp_attention`, else replicas
    ep: int | None = None
    dp_attention: bool = False
    dp_inside_tp: bool = False        # SGLang: '--tp 8 --dp 8 --enable-dp-attention' is 8 chips, not 64

    @property
    def layout_chips(self) -> int | None:
        """Chips the parallel degrees add up to (None when no degree is written)."""
        if self.tp is None and self.dp is None and self.ep is None and self.pp is None:
            return None
        tp, dp, pp = self.tp or 1, self.dp or 1, self.pp or 1
        width = tp if self.dp_inside_tp else tp * dp
        if self.tp is None and self.dp is None:
            width = self.ep or 1                  # 'EP8' alone: one expert-parallel group of 8
        return width * pp

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in (("tp", self.tp), ("pp", self.pp), ("dp", self.dp), ("ep", self.ep)) if v]
        if self.dp_attention:
            parts.append("DP is attention data parallel")
        return ", ".join(parts)


_DEGREE = re.compile(r"(?<![a-wyz])(?:--)?(tp|pp|dp|ep|dep|tep)(?:[-_ ]?size)?\s*[=:_ ]?\s*(\d+)(?!\d)", re.I)


def layout(text: str) -> Layout | None:
    """Parallel degrees written in free text, or None if there are none.

    'TP8 x EP8', 'TP=8,EP=8', 'tp8ep8', 'DP8+EP8', 'PP2 TP4', '--tp 4 --dp 4 --enable-dp-attention',
    'DEP8' (attention DP 8 with EP 8), 'TEP8' (TP 8 with EP 8), 'DP2 + enable_expert_parallel' (EP over the DP
    ranks). The first degree of each kind wins ('TP8 attention, TP4xEP2 MoE' is tp 8, ep 2)."""
    degrees: dict[str, int] = {}
    for m in _DEGREE.finditer(text):
        kind, n = m.group(1).lower(), int(m.group(2))
        if kind in ("dep", "tep"):
            degrees.setdefault("dp" if kind == "dep" else "tp", n)
            degrees.setdefault("ep", n)
        else:
            degrees.setdefault(kind, n)
    if not degrees:
        return None
    if "ep" not in degrees and re.search(r"expert[-_ ]parallel", text, re.I):
        degrees["ep"] = degrees.get("tp", 1) * degrees.get("dp", 1)
    dp_attention = "dp" in degrees and ("ep" in degrees or bool(re.search(r"dp[-_ ]?attention|attention[-_ ]?dp", text, re.I)))
    sglang_flags = bool(re.search(r"--tp\b", text) and re.search(r"--dp\b", text) and re.search(r"dp-attention", text))
    return Layout(tp=degrees.get("tp"), pp=degrees.get("pp"), dp=degrees.get("dp"), ep=degrees.get("ep"),
                  dp_attention=dp_attention, dp_inside_tp=sglang_flags)


def per_chip_batch(text: str) -> int | None:
    """'40 req/GPU', '64 requests per GPU', '32 seqs per chip' -> sequences per chip."""
    m = re.search(r"(\d+)\s*(?:req(?:uest)?s?|seq(?:uence)?s?|users?)\s*(?:/|per)\s*(?:gpu|chip|device)\b", text, re.I)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- speculative decoding: "MTP", "EAGLE-3 (k=3)", "n-gram"

@dataclass(frozen=True)
class Speculation:
    method: str | None       # "mtp", "eagle3", "eagle", "ngram"; None: no speculation stated
    draft_tokens: int | None
    stated: bool             # False when the cell does not say either way


def spec_cell(text: str) -> Speculation:
    """'none' / 'off' -> no speculation; '' / 'n/s' / 'not stated' -> not stated; 'MTP', 'EAGLE-3 (k=3)',
    'EAGLE/MTP steps 3, topk 1, draft tokens 4', 'n-gram', 'prompt lookup' -> method and k when written."""
    t = text.strip().lower()
    if unstated(t):
        return Speculation(None, None, False)
    if re.fullmatch(r"none|no|off|disabled|false|0", t):
        return Speculation(None, None, True)
    if "best available" in t:
        return Speculation(None, None, False)
    m = re.search(r"(?:\bk\s*=\s*|steps\s+|num[-_ ]?speculative[-_ ]?tokens\s*=?\s*|\()(\d+)", t)
    k = int(m.group(1)) if m else None
    if re.search(r"eagle-?3", t):
        method = "eagle3"
    elif "mtp" in t or "multi-token" in t:
        method = "mtp"
    elif "eagle" in t:
        method = "eagle"
    elif re.search(r"n-?gram|prompt[-_ ]lookup", t):
        method = "ngram"
    else:
        raise Skip(f"speculative decoding {text!r} names no method this reader knows (MTP, EAGLE, EAGLE-3, n-gram)")
    return Speculation(method, k, True)
