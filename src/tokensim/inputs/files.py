"""One safe reader for every file a user hands tokensim: JSON, TOML or YAML in, a plain dict out.

Nothing in a file is executed (json, tomllib and a safe YAML loader only; no pickle, no eval). Every way a
file can be unreadable ends in one TokensimError naming the file: a missing path or a folder, a file over
the size limit, bytes that are not UTF-8 (with the offset of the first bad byte), a syntax error, nesting
deeper than MAX_DEPTH (refused before parsing, so no parser recurses into it), and YAML aliases (the
"billion laughs" expansion is refused outright rather than bounded).
"""
from __future__ import annotations

import json
import re
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tokensim.errors import TokensimError

MAX_FILE_BYTES = 8 * 1024 * 1024     # JSON, TOML, JSONL
MAX_YAML_BYTES = 256 * 1024          # the pure-Python safe YAML parser reads ~120 KiB/s: 256 KiB is ~2 s
MAX_DEPTH = 32                       # tables and lists inside each other; shipped files need at most 6

FORMATS = {".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".jsonl": "jsonl"}


def file_format(path: Path, default: str = "toml") -> str:
    """json, toml, yaml or jsonl, from the file's suffix (anything else is read as `default`)."""
    return FORMATS.get(path.suffix.lower(), default)


def is_file(path: Path) -> bool:
    """True for an existing regular file; False for anything else, including names the OS refuses."""
    try:
        return path.is_file()
    except (OSError, ValueError):       # a name too long, or with a NUL byte
        return False


def exists(path: Path) -> bool:
    """Path.exists() that answers False, not OSError, for a name the OS refuses."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def read_bytes(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes; a folder, a device, a FIFO (which would block) or a file over `limit` is refused."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise TokensimError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise TokensimError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise TokensimError(f"{path}: is a folder, expected a file")
    if not stat.S_ISREG(info.st_mode):
        raise TokensimError(f"{path}: not a regular file (a device, socket or pipe), expected a file")
    if info.st_size > limit:
        raise TokensimError(f"{path}: {info.st_size:,} bytes: expected a file of at most {limit:,} bytes")
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise TokensimError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:                # the file grew after stat
        raise TokensimError(f"{path}: more than {limit:,} bytes: expected a file of at most {limit:,} bytes")
    return data


def decode(data: bytes, origin: str) -> str:
    """UTF-8 text (a leading byte-order mark dropped); a bad byte is reported with its offset."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokensimError(f"{origin}: byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8: "
                            "expected a UTF-8 text file") from None
    return text.removeprefix("\ufeff")


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    return decode(read_bytes(path, limit), str(path))


# ------------------------------------------------------------------ nesting, checked before parsing

# Strings and comments are skipped so that brackets inside them do not count. Every pattern is possessive and
# its closing quote optional, so a match never fails once started: the scan is linear in the size of the file
# whatever it holds (an unclosed string runs to the end of its line, or of the file, and is skipped).
_JSON_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*+"?|(?P<open>[\[{])|(?P<close>[\]}])')
_TOML_KEY = r'''(?:[A-Za-z0-9_-]++|"(?:[^"\\\n]|\\.)*+"?|'[^'\n]*+'?)'''
_TOML_KEY_PARTS = re.compile(_TOML_KEY)
_TOML_TOKENS = re.compile(
    r"'''(?:[^']|'(?!''))*+(?:''')?"                                 # multi-line literal string
    r'|"""(?:[^"\\]|\\.|"(?!""))*+(?:""")?'                          # multi-line basic string
    r"|#[^\n]*+"                                                     # a comment
    rf"|(?P<key>{_TOML_KEY}(?:[ \t]*+\.[ \t]*+{_TOML_KEY})*+)"       # a dotted key (or a string, a number)
    r"|(?P<open>[\[{])|(?P<close>[\]}])", re.DOTALL)


def _nesting(text: str, fmt: str) -> int:
    """The deepest nesting of [ and { outside strings and comments, and for TOML of dotted keys (a.b.c nests
    as deep as three tables; tomllib needs memory quadratic in a key's length)."""
    dots = text.count(".") if fmt == "toml" else 0
    if text.count("[") + text.count("{") <= MAX_DEPTH and dots <= MAX_DEPTH:
        return 0                         # too few brackets and dots to nest too deep: nothing to scan
    depth = deepest = 0
    for m in (_TOML_TOKENS if fmt == "toml" else _JSON_TOKENS).finditer(text):
        kind = m.lastgroup
        if kind == "open":
            depth += 1
            deepest = max(deepest, depth)
        elif kind == "close":
            depth -= 1
        elif kind == "key" and depth + m.group().count(".") + 1 > deepest:   # dots in quoted parts
            deepest = max(deepest, depth + len(_TOML_KEY_PARTS.findall(m.group())))  # overcount: recount
    return deepest


def _too_deep(origin: str, depth: int | str) -> TokensimError:
    return TokensimError(f"{origin}: nesting depth = {depth}: expected tables and lists at most {MAX_DEPTH} deep")


def check_depth(data: Any, origin: str) -> None:
    """Walk the parsed data without recursion and refuse it when nested deeper than MAX_DEPTH."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(origin, f"more than {MAX_DEPTH}")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, depth + 1) for v in node)


# ------------------------------------------------------------------ YAML without aliases or deep nesting

class _SafeYamlLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases (no expansion bombs) and nesting deeper than MAX_DEPTH."""

    _depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"alias *{event.anchor} found: aliases are not allowed "
                                              "in tokensim files (write the value out)", event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nesting deeper than {MAX_DEPTH} levels",
                                              self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# ------------------------------------------------------------------ parsing

def parse(text: str, fmt: str, origin: str) -> Any:
    """Parse `text` as json, toml or yaml; any failure is one line naming `origin`."""
    if fmt in ("json", "toml"):
        depth = _nesting(text, fmt)
        if depth > MAX_DEPTH:
            raise _too_deep(origin, depth)
    try:
        if fmt == "json":
            data = json.loads(text)
        elif fmt == "yaml":
            data = yaml.load(text, Loader=_SafeYamlLoader)   # noqa: S506 - a SafeLoader subclass
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, ValueError) as exc:   # ValueError: json, and integers
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # too long to convert
        if "integer string conversion" in first:
            first = "an integer of more than 4,300 digits"
        elif isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
            mark = exc.problem_mark
            first = f"{exc.problem}" + (f", line {mark.line + 1} column {mark.column + 1}" if mark else "")
        raise TokensimError(f"{origin}: not valid {fmt.upper()} ({first})") from None
    except RecursionError:              # a backstop: the scans above should make this unreachable
        raise _too_deep(origin, f"more than {MAX_DEPTH}") from None
    check_depth(data, origin)
    return data


def _mapping(data: Any, origin: str, what: str = "the file") -> dict[str, Any]:
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        raise TokensimError(f"{origin}: {what} holds {kind}: expected a mapping of fields (a table)")
    return data


def read_mapping(path: str | Path, default_format: str = "toml") -> dict[str, Any]:
    """A JSON, TOML or YAML file (by suffix) parsed into a dict."""
    path = Path(path)
    fmt = file_format(path, default_format)
    if fmt == "jsonl":
        raise TokensimError(f"{path}: a JSON-lines file: expected one JSON, TOML or YAML document")
    limit = MAX_YAML_BYTES if fmt == "yaml" else MAX_FILE_BYTES
    return _mapping(parse(read_text(path, limit), fmt, str(path)), str(path))


def read_json_lines(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of a JSON-lines file."""
    path = Path(path)
    for n, line in enumerate(read_text(path).splitlines(), start=1):
        if line.strip():
            where = f"{path} line {n}"
            yield n, _mapping(parse(line, "json", where), where, "the line")


__all__ = ["MAX_FILE_BYTES", "MAX_YAML_BYTES", "MAX_DEPTH", "file_format", "exists", "is_file", "read_bytes", "read_text",
           "decode", "parse", "check_depth", "read_mapping", "read_json_lines"]
