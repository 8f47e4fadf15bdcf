"""The layout of an agent-session file (tokensim.scenarios.agent), checked once, and the Session it becomes.

JSONL: one call per line, {"input_tokens": 6600, "output_tokens": 523, "tool_s": 16.8}. TOML, YAML or JSON: a
table with [[calls]] entries of the same fields (and optionally the session's name and source).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from tokensim.errors import TokensimError
from tokensim.inputs.base import Count, InputModel, Name, Number, Text, validate
from tokensim.inputs.files import file_format, read_json_lines, read_mapping
from tokensim.scenarios.agent import Call, Session

MAX_CALLS = 100_000
MAX_TOKENS = 100_000_000

FreshTokens = Annotated[int, Count("fresh input tokens that must be prefilled", ge=0, le=MAX_TOKENS)]
OutputTokens = Annotated[int, Count("generated tokens", ge=1, le=MAX_TOKENS)]
ToolSeconds = Annotated[float, Number("seconds of tool execution after the call", ge=0, le=1e6)]
CachedTokens = Annotated[int, Count("prefix-cached input tokens (not prefilled; informational)", ge=0, le=MAX_TOKENS)]


class CallEntry(InputModel):
    """One model call: fresh input to prefill, tokens generated, tool time after it."""

    input_tokens: FreshTokens = 0
    output_tokens: OutputTokens
    tool_s: ToolSeconds = 0.0
    cached_tokens: CachedTokens = 0

    def to_call(self) -> Call:
        return Call(self.input_tokens, self.output_tokens, self.tool_s)


class SessionFile(InputModel):
    """A session as one document: its calls, and optionally a name and a source."""

    name: Name | None = None
    source: Text = ""
    calls: Annotated[list[CallEntry], Field(min_length=1, max_length=MAX_CALLS,
                                            description="a list of [[calls]] tables (input_tokens, output_tokens, tool_s)")]


def load_session_file(path: str | Path) -> Session:
    """A JSONL, TOML, YAML or JSON session file as a Session."""
    path = Path(path)
    if file_format(path) == "jsonl":
        calls: list[Call] = []
        for n, line in read_json_lines(path):
            if len(calls) == MAX_CALLS:
                raise TokensimError(f"{path} line {n}: more than {MAX_CALLS:,} calls: expected at most {MAX_CALLS:,}")
            calls.append(validate(CallEntry, line, f"{path} line {n}").to_call())
        if not calls:
            raise TokensimError(f"{path}: no calls: expected at least one line with a call")
        return Session(path.stem, tuple(calls), str(path))
    s = validate(SessionFile, read_mapping(path), str(path))
    return Session(s.name or path.stem, tuple(c.to_call() for c in s.calls), s.source or str(path))


__all__ = ["CallEntry", "SessionFile", "load_session_file", "MAX_CALLS"]
