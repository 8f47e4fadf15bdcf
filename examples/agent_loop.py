"""A coding-agent loop against OpenAI-compatible endpoints: what a faster model does to an agent's wall time.

Each step sends the conversation so far (the model call), waits for the answer, then "runs a tool" (sleeps); the
wall time of the whole loop is printed per endpoint. Point it at real servers, or at deployments emulated by
`tokensim serve --emulate SCENARIO`, which answer with the simulated timing of that deployment:

    tokensim serve --emulate kimi-k2.6-cs3 --port 8001 &
    tokensim serve --emulate kimi-k2.6-gpu --port 8002 &
    python examples/agent_loop.py http://127.0.0.1:8001 http://127.0.0.1:8002 --steps 5

The calls go through the official `openai` client when it is installed (`pip install openai`), else through plain
HTTP from the standard library (the same requests), so the example runs wherever tokensim does.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request


def _call(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json",
                                                          "authorization": "Bearer unused"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.load(resp)


def _openai_chat(base_url: str):
    """A chat call through the official client, or None when it is not installed."""
    try:
        from openai import OpenAI
    except ImportError:
        return None
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=600)
    model = client.models.list().data[0].id

    def chat(messages: list[dict], max_tokens: int) -> str:
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens)
        return reply.choices[0].message.content or ""
    return chat


def _http_chat(base_url: str):
    model = _call(f"{base_url}/v1/models")["data"][0]["id"]

    def chat(messages: list[dict], max_tokens: int) -> str:
        reply = _call(f"{base_url}/v1/chat/completions",
                      {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": False})
        return reply["choices"][0]["message"].get("content") or ""
    return chat


def agent_loop(base_url: str, steps: int, output_tokens: int, fresh_words: int, tool_s: float) -> float:
    chat = _openai_chat(base_url) or _http_chat(base_url)
    messages = [{"role": "system", "content": "You are a coding agent."}]
    start = time.perf_counter()
    for step in range(steps):
        messages.append({"role": "user", "content": " ".join(["error"] * fresh_words) + f" (step {step})"})
        messages.append({"role": "assistant", "content": chat(messages, output_tokens)})
        time.sleep(tool_s)                                  # the tool: run the tests, read the errors
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("urls", nargs="+", help="base URLs of OpenAI-compatible endpoints")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--output-tokens", type=int, default=523, help="tokens per answer (TraceLab's mean step: 523)")
    ap.add_argument("--fresh-words", type=int, default=600, help="new input words per step")
    ap.add_argument("--tool-s", type=float, default=0.5, help="seconds of tool time per step")
    args = ap.parse_args()
    for url in args.urls:
        try:
            wall = agent_loop(url.rstrip("/"), args.steps, args.output_tokens, args.fresh_words, args.tool_s)
        except Exception as e:          # any client's failure (urllib, openai's APIError family): one line, exit 1
            sys.exit(f"{url}: no OpenAI-compatible answer ({e}); start one with tokensim serve --emulate SCENARIO")
        print(f"{url}: {args.steps} steps in {wall:.1f} s ({args.steps * args.tool_s:.1f} s of it in tools)")


if __name__ == "__main__":
    main()
