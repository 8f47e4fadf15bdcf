"""Helpers for the endpoint tests: a queueing timing source, servers in a background thread, broken servers."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from collections.abc import Awaitable, Callable

from aiohttp import web

from tokensim.endpoints import TokenEvent, start_emulator
from tokensim.endpoints.wire import sse, stream_chunk


class BatchingSource:
    """Continuous batching in miniature: iterations of step_s + per_request_s x batch + prefill_s_per_token x new
    input tokens; at most max_batch requests run, the rest wait in arrival order; every running request gets one
    token at the end of each iteration. Records what it simulated, to compare with what a client measured."""

    def __init__(self, max_batch: int = 4, step_s: float = 0.04, per_request_s: float = 0.005,
                 prefill_s_per_token: float = 1e-3) -> None:
        self.max_batch, self.step_s, self.per_request_s, self.prefill_s_per_token = (
            max_batch, step_s, per_request_s, prefill_s_per_token)
        self.waiting: deque = deque()
        self.running: dict[int, int] = {}          # request id -> tokens still to come
        self.step_end_s: float | None = None
        self.arrival_s: dict[int, float] = {}
        self.first_s: dict[int, float] = {}
        self.last_s: dict[int, float] = {}
        self.output_tokens: dict[int, int] = {}

    def submit(self, arrival_s, input_tokens, output_tokens, prefix_id=None) -> int:
        request_id = len(self.arrival_s)
        self.arrival_s[request_id] = arrival_s
        self.output_tokens[request_id] = output_tokens
        self.waiting.append((request_id, input_tokens, output_tokens))
        if self.step_end_s is None:
            self._start_step(arrival_s)
        return request_id

    def _start_step(self, start_s: float) -> None:
        prefill_tokens = 0
        while self.waiting and len(self.running) < self.max_batch:
            request_id, input_tokens, output_tokens = self.waiting.popleft()
            self.running[request_id] = output_tokens
            prefill_tokens += input_tokens
        self.step_end_s = (start_s + self.step_s + self.per_request_s * len(self.running)
                           + self.prefill_s_per_token * prefill_tokens)

    def advance(self, until_s: float) -> list[TokenEvent]:
        events = []
        while self.step_end_s is not None and self.step_end_s <= until_s:
            now_s = self.step_end_s
            for request_id in list(self.running):
                self.running[request_id] -= 1
                finished = self.running[request_id] == 0
                events.append(TokenEvent(request_id, now_s, 1, finished))
                self.first_s.setdefault(request_id, now_s)
                self.last_s[request_id] = now_s
                if finished:
                    del self.running[request_id]
            if self.running or self.waiting:
                self._start_step(now_s)
            else:
                self.step_end_s = None
        return events

    def next_event_s(self) -> float | None:
        return self.step_end_s

    def mean_ttft_s(self) -> float:
        return sum(self.first_s[r] - self.arrival_s[r] for r in self.first_s) / len(self.first_s)

    def mean_tpot_s(self) -> float:
        tpots = [(self.last_s[r] - self.first_s[r]) / (self.output_tokens[r] - 1) for r in self.last_s]
        return sum(tpots) / len(tpots)


class ChunkySource:
    """Every request: one event of `tokens_per_event` tokens every `gap_s`, the first one `gap_s` after arrival."""

    def __init__(self, tokens_per_event: int, gap_s: float) -> None:
        self.tokens_per_event, self.gap_s = tokens_per_event, gap_s
        self.due: list[list] = []                # [time_s, request_id, tokens left]

    def submit(self, arrival_s, input_tokens, output_tokens, prefix_id=None) -> int:
        self.due.append([arrival_s + self.gap_s, len(self.due), output_tokens])
        return len(self.due) - 1

    def advance(self, until_s: float) -> list[TokenEvent]:
        events = []
        for item in self.due:
            while item[2] > 0 and item[0] <= until_s:
                tokens = min(self.tokens_per_event, item[2])
                item[2] -= tokens
                events.append(TokenEvent(item[1], item[0], tokens, item[2] == 0))
                item[0] += self.gap_s
        return sorted(events, key=lambda e: e.time_s)

    def next_event_s(self) -> float | None:
        return min((item[0] for item in self.due if item[2] > 0), default=None)


class BrokenSource(ChunkySource):
    """Fails on the first advance after a request has been submitted."""

    def advance(self, until_s: float) -> list[TokenEvent]:
        if self.due:
            raise RuntimeError("the model blew up")
        return []


class ServerThread:
    """An asyncio server running in its own thread and event loop; `url` once entered."""

    def __init__(self, start: Callable[[], Awaitable[tuple[str, Callable[[], Awaitable[None]]]]]) -> None:
        self._start = start
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        self.url, self._close = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self.url

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def emulator_thread(source, **options) -> ServerThread:
    async def start():
        server = await start_emulator(source, **options)
        return server.url, server.close
    return ServerThread(start)


def app_thread(app: web.Application) -> ServerThread:
    async def start():
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}", runner.cleanup
    return ServerThread(start)


def garbage_app() -> web.Application:
    """Answers every request with 200 and a page of text that is not an event stream."""
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html>hello, I am a web page</html>\n", content_type="text/html")
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    return app


def non_json_app() -> web.Application:
    """A proper event stream whose data is not JSON."""
    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: {this is not json\n\n")
        await response.write_eof()
        return response
    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    return app


def cutting_app(good_requests: int = 0) -> web.Application:
    """Streams the first `good_requests` requests properly, then drops the connection after two tokens."""
    served = {"count": 0}

    async def stream(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        served["count"] += 1
        good = served["count"] <= good_requests
        for _ in range(body["max_tokens"] if good else 2):
            await asyncio.sleep(0.002)
            await response.write(sse(stream_chunk("completions", "cmpl-1", 0, body["model"], "token ")))
        if not good:
            request.transport.close()         # the connection drops mid-stream: no [DONE], no final chunk
            return response
        await response.write(sse(stream_chunk("completions", "cmpl-1", 0, body["model"], None, "length")))
        await response.write(sse("[DONE]"))
        await response.write_eof()
        return response
    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    return app


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_json(raw: bytes) -> dict:
    return json.loads(raw)
