"""The OpenAI wire format as the emulator speaks it: request checks, response bodies, stream chunks.

Input tokens are counted without a tokenizer, by one rule (the bench builds prompts to match it):
- a `prompt_token_ids` list in the body, if present, counts its length (a hint a client can send);
- completions: a string prompt counts its whitespace-separated words; a prompt given as a list of
  token ids counts the ids;
- chat: the words of every message's text content (string contents and `text` parts), with no
  chat-template overhead;
- at least 1 (a begin-of-sequence token).
Output tokens are `max_completion_tokens` or `max_tokens` (or the server's default); there is no
end-of-sequence, so every response is exactly that long, as with vLLM's `ignore_eos`.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

FILLER_WORD = "token "        # one output token of emulated text
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class ApiError(Exception):
    """A request the emulator refuses, answered as OpenAI's error object with an HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


@dataclass(frozen=True)
class ParsedRequest:
    kind: str                     # "chat" or "completions"
    input_tokens: int
    output_tokens: int
    stream: bool
    include_usage: bool           # stream_options.include_usage: a last chunk with the usage
    continuous_usage: bool        # stream_options.continuous_usage_stats (vLLM): usage in every chunk


def parse_request(body: object, kind: str, model_name: str, default_max_tokens: int) -> ParsedRequest:
    """Check a decoded JSON body and return what the emulator needs; raise ApiError on a bad one."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if model is None:
        raise ApiError(400, "You must provide a model parameter.", "model", "missing_required_parameter")
    if not isinstance(model, str):
        raise ApiError(400, f"Invalid type for 'model': expected a string, but got {_kind(model)}.", "model", "invalid_type")
    if model != model_name:
        raise ApiError(404, f"The model `{model}` does not exist; this server serves `{model_name}`.", "model",
                       "model_not_found")
    n = body.get("n", 1)
    if n not in (1, None) or isinstance(n, bool):
        raise ApiError(400, f"Invalid 'n': {n!r}; the emulator returns one choice (n = 1).", "n", "invalid_value")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ApiError(400, f"Invalid type for 'stream': expected a boolean, but got {_kind(stream)}.", "stream", "invalid_type")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "Invalid type for 'stream_options': expected an object.", "stream_options", "invalid_type")
    if options and not stream:
        raise ApiError(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options",
                       "invalid_value")
    options = options or {}
    if kind == "chat":
        input_tokens = _chat_words(body.get("messages"))
        field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    else:
        input_tokens = _prompt_words(body.get("prompt"))
        field = "max_tokens"
    hint = body.get("prompt_token_ids")
    if hint is not None:
        input_tokens = len(_token_ids(hint, "prompt_token_ids"))
    output_tokens = body.get(field)
    if output_tokens is None:
        output_tokens = default_max_tokens
    if isinstance(output_tokens, bool) or not isinstance(output_tokens, int):
        raise ApiError(400, f"Invalid type for '{field}': expected an integer, but got {_kind(output_tokens)}.", field,
                       "invalid_type")
    if output_tokens < 1:
        raise ApiError(400, f"Invalid '{field}': integer below minimum value. Expected a value >= 1, but got "
                            f"{output_tokens} instead.", field, "integer_below_min_value")
    return ParsedRequest(kind, max(input_tokens, 1), output_tokens, stream,
                         bool(options.get("include_usage")), bool(options.get("continuous_usage_stats")))


def _kind(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _words(text: object, param: str) -> int:
    if not isinstance(text, str):
        raise ApiError(400, f"Invalid type for '{param}': expected a string, but got {_kind(text)}.", param, "invalid_type")
    return len(text.split())


def _token_ids(ids: object, param: str) -> list:
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ApiError(400, f"Invalid '{param}': expected an array of integer token ids.", param, "invalid_type")
    return ids


def _prompt_words(prompt: object) -> int:
    if prompt is None:
        raise ApiError(400, "You must provide a prompt parameter.", "prompt", "missing_required_parameter")
    if isinstance(prompt, str):
        return _words(prompt, "prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1:
        only = prompt[0]
        return len(_token_ids(only, "prompt")) if isinstance(only, list) else _words(only, "prompt")
    raise ApiError(400, "Invalid 'prompt': expected a string, an array of token ids, or an array holding one of them "
                        "(the emulator serves one prompt per request).", "prompt", "invalid_value")


def _chat_words(messages: object) -> int:
    if messages is None:
        raise ApiError(400, "You must provide a messages parameter.", "messages", "missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "Invalid 'messages': expected a non-empty array of message objects.", "messages", "invalid_value")
    words = 0
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"Invalid type for '{param}': expected an object, but got {_kind(message)}.", param,
                           "invalid_type")
        if message.get("role") not in CHAT_ROLES:
            raise ApiError(400, f"Invalid value for '{param}.role': {message.get('role')!r}; expected one of "
                                f"{', '.join(CHAT_ROLES)}.", f"{param}.role", "invalid_value")
        content = message.get("content")
        if isinstance(content, list):
            words += sum(_words(part.get("text"), f"{param}.content") for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
        elif content is not None:
            words += _words(content, f"{param}.content")
    return words


def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex


def usage(input_tokens: int, output_tokens: int) -> dict:
    return {"prompt_tokens": input_tokens, "completion_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}


def stream_chunk(kind: str, response_id: str, created: int, model: str, text: str | None,
                 finish_reason: str | None = None, role: bool = False) -> dict:
    """One `data:` chunk with one choice; `text` None gives an empty delta (the finishing chunk)."""
    if kind == "chat":
        delta: dict = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": None, "choices": [choice]}
    choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
    return {"id": response_id, "object": "text_completion", "created": created, "model": model,
            "system_fingerprint": None, "choices": [choice]}


def usage_chunk(kind: str, response_id: str, created: int, model: str, input_tokens: int, output_tokens: int) -> dict:
    return {"id": response_id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
            "created": created, "model": model, "system_fingerprint": None, "choices": [],
            "usage": usage(input_tokens, output_tokens)}


def full_response(kind: str, response_id: str, created: int, model: str, input_tokens: int, output_tokens: int) -> dict:
    text = FILLER_WORD * output_tokens
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                  "logprobs": None, "finish_reason": "length"}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        obj = "text_completion"
    return {"id": response_id, "object": obj, "created": created, "model": model, "system_fingerprint": None,
            "choices": [choice], "usage": usage(input_tokens, output_tokens)}


def sse(payload: dict | str) -> bytes:
    """One server-sent event: `data: <json>` and a blank line."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()
