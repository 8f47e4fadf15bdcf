"""Malformed agent-session files (JSONL, TOML, YAML, JSON): a Session whose calls are sane, or one
TokensimError naming the file; `tokensim agent SCENARIO --session FILE` exits 0 with finite times or 2."""
import json
import math

from fuzz_support import FUZZ, cli, damaged_bytes, junk, mutated, serialize, structural, time_limit
from hypothesis import given, settings
from hypothesis import strategies as st

from tokensim.errors import TokensimError
from tokensim.scenarios.agent import load_session

CALLS = [{"input_tokens": 6600, "output_tokens": 523, "tool_s": 16.8}, {"input_tokens": 100, "output_tokens": 40},
         {"input_tokens": 0, "output_tokens": 1, "tool_s": 0, "cached_tokens": 150000}]
DOCUMENT = {"name": "a session", "source": "hand-written", "calls": CALLS}
FORMATS = st.sampled_from(["jsonl", "toml", "yaml", "json"])


def _write(path, doc, fmt) -> None:
    if fmt == "jsonl":
        calls = doc.get("calls") if isinstance(doc, dict) else doc
        lines = calls if isinstance(calls, list) else [calls]
        path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    else:
        path.write_text(serialize(doc, fmt), encoding="utf-8")


def _load(path):
    with time_limit():
        try:
            session = load_session(path)
        except TokensimError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc), str(exc)
            return None
    assert 1 <= len(session.calls) <= 100_000
    for c in session.calls:
        assert c.input_tokens >= 0 and c.output_tokens >= 1 and math.isfinite(c.tool_s) and c.tool_s >= 0
    return session


@FUZZ
@given(doc=mutated(DOCUMENT), fmt=FORMATS)
def test_mutated_session_loads_or_names_the_field(tmp_path, doc, fmt):
    """Junk values, missing and unknown fields, a call that is not a table, long lists."""
    path = tmp_path / f"session.{fmt}"
    _write(path, doc, fmt)
    _load(path)


@settings(FUZZ, max_examples=100)
@given(doc=mutated(DOCUMENT), fmt=FORMATS)
def test_mutated_session_through_agent(tmp_path, doc, fmt):
    """`tokensim agent cs3-capacity --session FILE --json`: finite, non-negative times, or exit 2."""
    path = tmp_path / f"session.{fmt}"
    _write(path, doc, fmt)
    with time_limit():
        result = cli("agent", "cs3-capacity", "--session", str(path), "--json")
    if result.exit_code == 0:
        for row in json.loads(result.stdout)["deployments"]:
            assert all(math.isfinite(row[k]) and row[k] >= 0 for k in ("total_s", "model_s", "tool_s")), row


@settings(FUZZ, max_examples=100)
@given(fmt=FORMATS, data=st.data())
def test_damaged_session_bytes(tmp_path, fmt, data):
    """Cut files, invalid UTF-8, NUL bytes, binary junk, deep nesting, a line that is not an object."""
    path = tmp_path / f"session.{fmt}"
    _write(path, DOCUMENT, fmt)
    text = path.read_text(encoding="utf-8")
    raw = data.draw(st.one_of(damaged_bytes(text), structural("json" if fmt == "jsonl" else fmt).map(str.encode),
                              st.lists(junk, max_size=3).map(lambda xs: "\n".join(json.dumps(x) for x in xs).encode())))
    path.write_bytes(raw)
    _load(path)
