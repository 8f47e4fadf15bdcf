"""Agent sessions: many model calls with tool time between them; where the wall time goes.

A call's model time is its TTFT (prefill of the fresh, uncached input) plus output_tokens / tokens-per-s.
The session's wall time adds the tool time after each call. Input may be a JSONL file (one call per line)
or a TOML file with [[calls]], each with input_tokens, output_tokens, tool_s and optionally cached_tokens.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokensim.errors import require
from tokensim.prediction.predictor import Prediction


@dataclass(frozen=True)
class Call:
    input_tokens: int         # fresh input tokens that must be prefilled (cached prefix excluded)
    output_tokens: int
    tool_s: float             # tool execution after the call (tests, builds, reads)

    def __post_init__(self) -> None:
        require(self.input_tokens >= 0, "call.input_tokens", self.input_tokens, "an integer >= 0")
        require(self.output_tokens >= 1, "call.output_tokens", self.output_tokens, "an integer >= 1")
        require(self.tool_s >= 0, "call.tool_s", self.tool_s, "zero or more seconds")


@dataclass(frozen=True)
class Session:
    name: str
    calls: tuple[Call, ...]
    source: str = ""


def coding_loop(calls: int = 74, output_tokens: int = 523, fresh_input_tokens: int = 6600, tool_s: float = 16.8) -> Session:
    """The built-in coding-agent loop (generate code, run tests, read errors, retry).

    Defaults from TraceLab's traces of real Claude Code / Codex sessions (https://tracelab.cs.washington.edu/):
    ~523 output tokens per step, ~6.6k fresh (uncached) input tokens per step of a ~154k-token context with
    96 % prefix-cache hits, tool execution 16.8 s per step on average (median 0.1 s), ~74 steps per session
    (73.6 tool-triggered steps); the defaults are these averages.
    """
    one = Call(fresh_input_tokens, output_tokens, tool_s)
    return Session(f"coding loop ({calls} calls, {output_tokens} out, {tool_s:g} s tools)", (one,) * calls,
                   "TraceLab (UW), https://tracelab.cs.washington.edu/")


def load_session(path: str | Path) -> Session:
    """A session file: JSONL (one call per line) or TOML/YAML/JSON with [[calls]]; every field checked once
    (tokensim.inputs.session_file), a bad one named with its file, line or entry, and value."""
    from tokensim.inputs.session_file import load_session_file

    return load_session_file(path)


@dataclass(frozen=True)
class SessionTime:
    deployment: str
    total_s: float
    model_s: float
    tool_s: float

    @property
    def model_share(self) -> float:
        return self.model_s / self.total_s if self.total_s else 0.0

    def to_dict(self) -> dict:
        return {"deployment": self.deployment, "total_s": self.total_s, "model_s": self.model_s, "tool_s": self.tool_s,
                "model_share": self.model_share}


def session_time(session: Session, p: Prediction, label: str, ttft_per_input_token_s: float | None = None) -> SessionTime:
    """Wall time of the session on one deployment. TTFT scales with each call's fresh input from the
    prediction's own TTFT at its input length (prefill is close to linear in tokens at these lengths)."""
    per_token = ttft_per_input_token_s if ttft_per_input_token_s is not None else p.ttft_s / max(p.deployment.input_tokens, 1)
    model = sum(c.input_tokens * per_token + c.output_tokens / p.tokens_per_s_per_user for c in session.calls)
    tools = sum(c.tool_s for c in session.calls)
    return SessionTime(label, model + tools, model, tools)
