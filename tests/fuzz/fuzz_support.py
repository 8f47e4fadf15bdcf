"""Shared pieces of the input fuzz suite: a hard per-example time limit, writers for TOML/YAML/JSON, mutation
strategies over a valid document, and the checks every outcome must pass (a result that makes sense, or one
TokensimError / exit code 2 with one line, never a traceback)."""
from __future__ import annotations

import copy
import json
import math
import signal
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tokensim.cli import app

EXAMPLE_LIMIT_S = 10
REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "src" / "tokensim" / "data"

# No example database (nothing written beside the repository), a deadline per example, few examples: the
# whole suite stays under about a minute. A failure prints its @reproduce_failure blob (print_blob), so a
# failing random example found once in CI can be replayed exactly although no database keeps it.
FUZZ = settings(max_examples=150, deadline=timedelta(seconds=EXAMPLE_LIMIT_S), database=None, derandomize=False,
                print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


class ExampleTimedOut(BaseException):
    """Raised by the alarm when one example runs past EXAMPLE_LIMIT_S (a BaseException: no `except Exception`
    in the code under test can swallow it)."""


@contextmanager
def time_limit(seconds: float = EXAMPLE_LIMIT_S):
    """A hard limit on the block: SIGALRM interrupts a hang instead of letting the suite stall."""
    def on_alarm(signum, frame):
        raise ExampleTimedOut(f"example ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------ writers

def _toml_key(k: Any) -> str:
    return _toml_str(str(k))


def _toml_str(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or c == "\x7f":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if v.bit_length() < 14000 else "1" + "0" * 5000     # str() of a huge int is refused
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    return _toml_str(repr(v))


def to_toml(doc: Any) -> str:
    """TOML with inline tables (valid TOML 1.0); None values are left out (TOML has no null)."""
    if not isinstance(doc, dict):
        return f"value = {_toml_value(doc)}\n"
    return "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in doc.items() if v is not None)


def _json_safe(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 14000:
        return 10**400
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def serialize(doc: Any, fmt: str) -> str:
    if fmt == "toml":
        return to_toml(doc)
    if fmt == "yaml":
        return yaml.safe_dump(_json_safe(doc), sort_keys=False, allow_unicode=True)
    return json.dumps(_json_safe(doc))


# ------------------------------------------------------------------ strategies

BAD_NUMBERS = [math.nan, math.inf, -math.inf, 0, 0.0, -1, -2.5, 1e-300, -1e-300, 1e300, 10**30, -(10**30), 10**400, 2.5,
               True, False, "96.0e9", "1e9", "inf", "nan", "fast", "", None, [], {}, [1, 2], 1e-9, 7, 10**7]

junk = st.one_of(
    st.sampled_from(BAD_NUMBERS),
    st.none(), st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-5, 10**6), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a document: keys of tables, indexes of lists."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append(prefix + (k,))
            out.extend(paths(v, prefix + (k,)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append(prefix + (i,))
            out.extend(paths(v, prefix + (i,)))
    return out


MAX_NODES = 20_000


def _size(doc: Any) -> int:
    """Nodes in a document (tables, lists and values), counted without recursion."""
    n, stack = 0, [doc]
    while stack:
        node = stack.pop()
        n += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return n


def _container(doc: Any, path: tuple) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated(draw, base: dict, max_changes: int = 3) -> Any:
    """`base` with one to `max_changes` of: a value replaced by junk, a field removed, an unknown field added,
    a table or list replaced by a scalar, a list made long."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_changes))):
        places = paths(doc)
        if not places:
            break
        path = draw(st.sampled_from(places))
        parent = _container(doc, path)
        action = draw(st.sampled_from(["junk", "junk", "junk", "delete", "unknown", "long"]))
        if action == "junk":                    # copies: a drawn list or table is never shared or changed
            parent[path[-1]] = copy.deepcopy(draw(junk))
        elif action == "delete":
            del parent[path[-1]]
        elif action == "unknown" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = copy.deepcopy(draw(junk))
        elif action == "long":                  # a long list, but never a document of more than ~20,000 nodes
            value = parent[path[-1]]
            n = min(draw(st.sampled_from([0, 2, 50, 2000])), MAX_NODES // max(_size(doc), _size(value)))
            parent[path[-1]] = [copy.deepcopy(value) for _ in range(n)]
    return doc


@st.composite
def damaged_bytes(draw, text: str) -> bytes:
    """The file's bytes cut, or with invalid UTF-8, NUL bytes or binary junk spliced in."""
    data = text.encode("utf-8")
    at = draw(st.integers(0, len(data)))
    kind = draw(st.sampled_from(["cut", "splice", "invalid-utf8", "nul", "empty", "bom"]))
    if kind == "cut":
        return data[:at]
    if kind == "splice":
        return data[:at] + draw(st.binary(min_size=1, max_size=40)) + data[at:]
    if kind == "invalid-utf8":
        return data[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])) + data[at:]
    if kind == "nul":
        return data[:at] + b"\x00" * draw(st.integers(1, 5)) + data[at:]
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    return b""


def deep_text(fmt: str, depth: int) -> str:
    """A document nested `depth` levels deep in `fmt`."""
    if fmt == "json":
        return '{"a": ' + "[" * depth + "]" * depth + "}"
    if fmt == "toml":
        return "a = " + "[" * depth + "]" * depth + "\n" if depth % 2 else "a" + ".a" * depth + " = 1\n"
    return "a:\n" + "  " + "- " * depth + "x\n" if depth % 2 else "a: " + "[" * depth + "]" * depth + "\n"


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


def structural(fmt: str) -> st.SearchStrategy[str]:
    """Whole-file failures that are not a field's value: nesting, aliases, emptiness, a non-table top level."""
    return st.one_of(
        st.integers(33, 100_000).map(lambda d: deep_text(fmt, d)),
        st.just(ALIAS_BOMB if fmt == "yaml" else ""),
        st.sampled_from(["", " ", "\n\n", "[1, 2, 3]", "42", '"text"', "null", "- a\n- b\n", "a = [1, 2", "{", "]]]"]),
    )


# ------------------------------------------------------------------ checks

runner = CliRunner()


def cli(*args: str):
    """Run the command in-process; return the result after checking it ended as the house rules say."""
    result = runner.invoke(app, list(args))
    assert result.exit_code in (0, 2), (args, result.exit_code, result.output[-2000:], repr(result.exception))
    assert result.exception is None or (isinstance(result.exception, SystemExit) and result.exit_code == 2), \
        repr(result.exception)
    stderr = result.stderr
    assert "Traceback" not in stderr and "Traceback" not in result.stdout
    if result.exit_code == 2:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), stderr
        assert result.stdout == ""
    return result


def numbers(obj: Any, path: str = ""):
    """(path, value) for every number in a JSON document."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from numbers(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, obj


def assert_sensible_prediction(d: dict) -> None:
    """A prediction that was made is a real one: positive finite speeds and TTFT, and no negative quantity
    anywhere (price, power, energy, memory). Bounds a prediction does not define may be NaN or inf."""
    for key in ("tokens_per_s_per_user", "ttft_s", "throughput_tokens_per_s", "time_per_output_token_s"):
        assert isinstance(d.get(key), (int, float)) and math.isfinite(d[key]) and d[key] > 0, (key, d.get(key))
    for path, value in numbers(d):
        assert not value < 0, (path, value)


def repo_listing() -> set[str]:
    """Top-level entries of the repository (caches of pytest and hypothesis aside)."""
    return {p.name for p in REPO.iterdir() if p.name not in (".hypothesis", ".pytest_cache")}
