"""The stored precision of each weight group, read from a config's quantization block.

- No block: every group in `torch_dtype` / `dtype` (bf16 when neither is given).
- `quant_method: fp8` with `weight_block_size` (DeepSeek, Kimi K2, MiniMax): every linear group
  fp8 except those in `modules_to_not_convert`; the embedding and LM head stay in the base dtype.
  DeepSeek V4's `expert_dtype: fp4` makes routed experts "mxfp4" (blocks of 32 with a UE8M0
  scale, the layout its reference dequantizer reads).
- `quant_method: mxfp4` (gpt-oss): routed experts "mxfp4" unless listed in `modules_to_not_convert`.
- `compressed-tensors`: 4-bit int with group 32 -> "int4-g32" (group 128 -> "int4"), 4-bit float
  in an mxfp4 format -> "mxfp4", 4-bit float group 16 -> "nvfp4", 8-bit float -> "fp8"; on the
  linear groups that `ignore` does not list.
- `modelopt` (`quant_algo` NVFP4 / FP8): "nvfp4" / "fp8" on the linear groups not in `ignore`.
- DeepSeek reference-code configs (`dtype: fp8`): every linear group fp8.

A group counts as ignored when a representative module name of it (the HF names, with the usual
`model.`, `language_model.model.` and `model.language_model.` prefixes) matches an ignore entry:
`re:` entries as regular expressions, others as shell patterns or as whole dotted components,
matched against the name and each of its parent modules.
"""
from __future__ import annotations

import fnmatch
import re

from tokensim.errors import bad_value
from tokensim.specs.model.hf_fields import Fields
from tokensim.specs.model.spec import WeightPrecisions
from tokensim.specs.precision import get_precision

_PREFIXES = ("model.layers", "language_model.model.layers", "model.language_model.layers")
_LAYER_GROUPS = ("attention", "dense_ffn", "shared_experts", "routed_experts")
_GROUP_MODULES = {
    "attention": ("self_attn.q_proj", "self_attn.o_proj", "self_attn.q_a_proj", "self_attn.kv_b_proj", "attn.wq_a",
                  "mixer.in_proj", "linear_attn.out_proj", "attention.wqkv"),
    "dense_ffn": ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "feed_forward.gate_proj", "mixer.up_proj"),
    "shared_experts": ("mlp.shared_experts.gate_proj", "mlp.shared_expert.gate_proj",
                       "feed_forward.shared_expert.gate_proj", "block_sparse_moe.shared_experts.gate_proj",
                       "mixer.shared_experts.up_proj", "ffn.shared_experts.w1"),
    "router": ("mlp.gate", "mlp.router", "block_sparse_moe.gate", "feed_forward.router", "mixer.gate", "ffn.gate"),
    "routed_experts": ("mlp.experts.0.gate_proj", "mlp.experts.gate_up_proj", "block_sparse_moe.experts.0.w1",
                       "feed_forward.experts.gate_up_proj", "mixer.experts.0.up_proj", "ffn.experts.0.w1"),
}
_MODELOPT = {"NVFP4": "nvfp4", "FP8": "fp8", "W4A16_AWQ": "int4", "W4A8_AWQ": "int4"}
_HEADS = ("lm_head", "language_model.lm_head", "model.lm_head")


MAX_PATTERNS = 1_000            # wildcard and re: entries of one ignore list (plain names: any number)
MAX_REGEXES = 100
_REPEATED_GROUP = re.compile(r"\)[*+{]")                 # (...)* : backtracking that can take exponential time
_UNBOUNDED = re.compile(r"(?<!\\)(?:[*+]|\{\d*,\})")      # *, + and {n,} outside escapes


def _regex(pattern: str, field: str) -> re.Pattern:
    """An ignore entry's `re:` pattern, compiled; refused when it is not a regular expression or could take
    more than polynomial time on a module name (a repeated group, more than two unbounded repeats)."""
    body = pattern[3:]
    if _REPEATED_GROUP.search(body) or len(_UNBOUNDED.findall(body)) > 2:
        raise bad_value(field, pattern, "a re: pattern without repeated groups and with at most two unbounded "
                        "repeats (*, +, {n,})")
    try:
        return re.compile(body)
    except (re.error, RecursionError, OverflowError) as exc:
        raise bad_value(field, pattern, f"a regular expression after re: ({exc})") from None


def _matches(pattern: str, name: str) -> bool:
    """A shell pattern against the name and each of its parent modules, or as whole dotted components."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if fnmatch.fnmatchcase(prefix, pattern):
            return True
    return f".{pattern}." in f".{name}."


def _ignored(names: list[str], ignore: list[str], field: str = "ignore") -> bool:
    """Whether any of `names` matches any ignore entry. Plain entries (most of a long list) are looked up in a
    set of each name's dotted runs, which is what the shell-pattern and component tests reduce to for them."""
    plain = {p for p in ignore if not p.startswith("re:") and not any(c in p for c in "*?[")}
    regexes = sorted({p for p in ignore if p.startswith("re:")})
    globs = sorted(set(ignore) - plain - set(regexes))
    if len(regexes) > MAX_REGEXES or len(regexes) + len(globs) > MAX_PATTERNS:
        raise bad_value(field, f"{len(regexes)} re: and {len(globs)} wildcard entries",
                        f"at most {MAX_REGEXES} re: entries and {MAX_PATTERNS} re: and wildcard entries together")
    for n in names:
        parts = n.split(".")
        if plain & {".".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}:
            return True
    compiled = [_regex(p, field) for p in regexes]
    return any(r.match(n) for r in compiled for n in names) or any(_matches(p, n) for p in globs for n in names)


def _layer_names(group: str, index: int) -> list[str]:
    return [f"{p}.{index}.{m}" for p in _PREFIXES for m in _GROUP_MODULES[group]]


def _base_dtype(text: Fields, outer: Fields) -> str:
    for f in (text, outer):
        for key in ("torch_dtype", "dtype"):
            if f.has(key) and f.str(key) != "fp8":
                return get_precision(f.str(key), f.name(key)).name
    return "bf16"


def _scheme(qc: Fields) -> str | None:
    """The precision a compressed-tensors or modelopt block stores its targets in."""
    if qc.str("quant_method") == "modelopt" or qc.has("quant_algo"):
        algo = qc.str("quant_algo", "NVFP4")
        if algo.upper() not in _MODELOPT:
            raise bad_value(qc.name("quant_algo"), algo, f"one of {', '.join(_MODELOPT)}")
        return _MODELOPT[algo.upper()]
    groups = qc.sub("config_groups")
    if groups is None or not groups.data:
        return None
    first_name = next(iter(groups.data))
    first = groups.sub(first_name)
    w = first.sub("weights") if first is not None else None
    if first is None or w is None:
        raise bad_value(first.name("weights") if first is not None else groups.name(first_name), None,
                        "a table with num_bits, group_size and type (the field is missing)")
    bits, size, kind = w.int("num_bits"), w.int("group_size", default=0, minimum=0), w.str("type", "int")
    fmt = (first.str("format") or qc.str("format")).lower()
    if bits == 4 and kind == "float":
        return "mxfp4" if "mxfp4" in fmt or size == 32 else "nvfp4"
    if bits == 4:
        return "int4-g32" if size == 32 else "int4"
    return "fp8" if kind == "float" else "int8"


def weights(text: Fields, outer: Fields, first_dense: int, first_moe: int, has_shared: bool) -> WeightPrecisions:
    """Precisions per group; `first_dense`/`first_moe` are layer indices used for the representative names."""
    base = _base_dtype(text, outer)
    qc = text.sub("quantization_config") or outer.sub("quantization_config")
    groups = dict.fromkeys(_LAYER_GROUPS + ("embedding", "lm_head"), base)
    if qc is None:
        if text.str("dtype") == "fp8":                               # DeepSeek reference-code config
            groups.update(dict.fromkeys(_LAYER_GROUPS, "fp8"))
        return WeightPrecisions(**groups)
    method = qc.str("quant_method")
    key: str
    scheme: str | None
    linear: tuple[str, ...]
    if method in ("fp8", "mxfp4"):
        key = "modules_to_not_convert"
        scheme, ignore = method, qc.list(key, of=str) or []
        linear = _LAYER_GROUPS if method == "fp8" else ("routed_experts",)
    else:
        scheme = _scheme(qc)
        key = "ignore" if qc.list("ignore", of=str) else "exclude_modules"
        ignore = qc.list(key, of=str) or []
        linear = _LAYER_GROUPS + ("lm_head",)
    if scheme is None:
        return WeightPrecisions(**groups)
    index = {"dense_ffn": first_dense}
    for group in linear:
        if group == "lm_head":
            names = list(_HEADS)
        else:
            looked_up = "router" if group == "shared_experts" and not has_shared else group
            names = _layer_names(looked_up, index.get(group, first_moe))
        if not _ignored(names, ignore, qc.name(key)):
            groups[group] = scheme
    if method == "fp8" and text.str("expert_dtype") == "fp4":
        groups["routed_experts"] = "mxfp4"
    return WeightPrecisions(**groups)
