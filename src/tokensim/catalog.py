"""Exact-name lookup shared by the model and hardware catalogs, with close matches on a miss."""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from tokensim.errors import TokensimError


def normalize(name: str) -> str:
    """Lower-case, drop vendor words and punctuation: 'NVIDIA H100 SXM5 80GB' -> 'h100sxm580gb'."""
    s = name.lower()
    s = re.sub(r"\b(nvidia|amd|google|instinct|meta|the)\b", " ", s)
    return re.sub(r"[^a-z0-9.]+", "", s).replace(".", "")


def alias_index(names_and_aliases) -> dict[str, str]:
    """normalize(alias) -> catalog name, from (name, aliases) pairs; the first entry to claim an alias keeps it."""
    index: dict[str, str] = {}
    for name, aliases in names_and_aliases:
        for alias in (name, *aliases):
            index.setdefault(normalize(alias), name)
    return index


def close_matches(name: str, candidates: Iterable[str], n: int = 5) -> list[str]:
    names = sorted(set(candidates))
    found = difflib.get_close_matches(name.lower(), names, n=n, cutoff=0.4)
    if not found:
        key = normalize(name)
        found = [c for c in names if key and (key in normalize(c) or normalize(c) in key)][:n]
    return found


def unknown(kind: str, name: str, candidates: Iterable[str]) -> TokensimError:
    matches = close_matches(name, candidates)
    hint = f"; close matches: {', '.join(matches)}" if matches else ""
    listing = {"model": "tokensim models", "hardware": "tokensim hardware", "scenario": "tokensim claims"}.get(kind)
    where = f" (list them with `{listing}`)" if listing else ""
    return TokensimError(f"{kind} = {name!r}: not in the catalog and not a file{hint}{where}")
