"""Reading one OpenAI streaming response at the client: when each output token arrived.

Token counting: a chunk whose `usage.completion_tokens` is present (vLLM's continuous usage stats)
carries the increase since the previous chunk; otherwise each chunk with non-empty text (content,
reasoning_content or, for completions, text) carries one token. All tokens of a chunk arrive at the
time its bytes were read. If the final usage reports more tokens than were counted, the surplus is
placed at the last chunk's time, so the output count and TPOT follow the server's usage.
"""
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")


class StreamError(Exception):
    """The response is not a well-formed OpenAI stream; `kind` is the short reason that gets counted."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class StreamOutcome:
    token_times_s: tuple[float, ...]     # perf_counter time of each output token, in order
    output_tokens: int
    prompt_tokens: int | None            # the server's usage.prompt_tokens, when it sent usage
    error_in_stream: str | None          # an error object the server sent inside the stream


async def _events(content: aiohttp.StreamReader) -> AsyncIterator[tuple[float, str]]:
    """(read time, data) for every server-sent event; raises StreamError on a line that is not SSE."""
    buffer = bytearray()
    data: list[str] = []
    async for piece in content.iter_any():
        now = time.perf_counter()
        buffer += piece
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[:end + 1]
            if not line:
                if data:
                    yield now, "\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].decode("utf-8", "replace").strip())
            elif not line.startswith(SSE_FIELDS):
                raise StreamError("bad response", f"not a server-sent event stream: {_clip(line)}")
    if buffer.strip() and not bytes(buffer).startswith(SSE_FIELDS):
        raise StreamError("bad response", f"not a server-sent event stream: {_clip(bytes(buffer))}")
    if data:
        yield time.perf_counter(), "\n".join(data)


def _clip(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").replace("\n", " ")
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def _chunk_text(chunk: dict) -> str:
    text = ""
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("content", "reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    text += delta[key]
        if isinstance(choice.get("text"), str):
            text += choice["text"]
    return text


async def read_stream(response: aiohttp.ClientResponse) -> StreamOutcome:
    """Read a 200 streaming response to its end; StreamError if it is garbage or stops before `[DONE]`."""
    times: list[float] = []
    usage_tokens = 0                 # completion_tokens of the last usage seen
    prompt_tokens = None
    done = finished = False
    async for now, data in _events(response.content):
        if data == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            raise StreamError("bad response", f"a stream chunk is not JSON: {_clip(data.encode())}") from None
        if not isinstance(chunk, dict):
            raise StreamError("bad response", f"a stream chunk is not a JSON object: {_clip(data.encode())}")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            return StreamOutcome(tuple(times), len(times), prompt_tokens, str(message))
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            tokens = max(usage["completion_tokens"] - usage_tokens, 0)
            usage_tokens = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                prompt_tokens = usage["prompt_tokens"]
            if not chunk.get("choices"):           # the closing usage-only chunk carries no new tokens
                tokens = 0
        else:
            tokens = 1 if _chunk_text(chunk) else 0
        times.extend([now] * tokens)
        finished = finished or any(isinstance(c, dict) and c.get("finish_reason") for c in chunk.get("choices") or ())
    if not (done or finished):
        raise StreamError("stream closed early", f"the stream ended after {len(times)} tokens without [DONE]")
    if times and usage_tokens > len(times):
        times.extend([times[-1]] * (usage_tokens - len(times)))
    return StreamOutcome(tuple(times), max(len(times), usage_tokens if times else 0), prompt_tokens, None)
