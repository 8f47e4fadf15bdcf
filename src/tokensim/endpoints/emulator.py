"""An OpenAI-compatible server whose tokens arrive when a timing source says they would.

Each request joins one simulation running in real time (simulated seconds = wall seconds since the
server started), so concurrent clients see the queueing the modelled deployment would show. One
background task, the pacer, advances the source to the wall clock, sleeping until the source's next
event or a new submission, and hands each token event to the waiting request's queue.

Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions (streamed or not), GET /health.
Text is filler ("token " per output token); see `wire` for how input tokens are counted. Every
refusal is OpenAI's error object with a 4xx status: bad JSON, missing fields, a wrong model,
max_tokens that is not a positive integer, an unknown route, and 429 beyond `max_pending_requests`.
"""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

from aiohttp import web

from tokensim.endpoints.timing import TimingSource, TokenEvent
from tokensim.endpoints.wire import (
    FILLER_WORD,
    ApiError,
    ParsedRequest,
    error_body,
    full_response,
    new_id,
    parse_request,
    sse,
    stream_chunk,
    usage,
    usage_chunk,
)
from tokensim.errors import TokensimError, require

DEFAULT_MODEL_NAME = "tokensim-emulated"
LOG = logging.getLogger(__name__)


class _Pacer:
    """Drives a timing source in real time and routes its token events to per-request queues."""

    def __init__(self, source: TimingSource, max_pending_requests: int) -> None:
        self.source = source
        self.max_pending_requests = max_pending_requests
        self.failure: str | None = None
        self._start_s = time.monotonic()
        self._advanced_to_s = 0.0
        self._queues: dict[int, asyncio.Queue] = {}
        self._wake = asyncio.Event()

    def now_s(self) -> float:
        return time.monotonic() - self._start_s

    def submit(self, input_tokens: int, output_tokens: int) -> tuple[int, asyncio.Queue]:
        if self.failure:
            raise ApiError(500, f"The timing source failed: {self.failure}", type_="server_error")
        if len(self._queues) >= self.max_pending_requests:
            raise ApiError(429, f"The emulator holds {len(self._queues)} requests, its limit "
                                f"(max_pending_requests); retry later.", code="rate_limit_exceeded", type_="requests")
        try:
            request_id = self.source.submit(max(self.now_s(), self._advanced_to_s), input_tokens, output_tokens)
        except TokensimError as exc:
            raise ApiError(400, str(exc), code="invalid_value") from None
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[request_id] = queue
        self._wake.set()
        return request_id, queue

    def release(self, request_id: int, finished: bool) -> None:
        """The request's handler is done; tell the source if the client left before the end."""
        if self._queues.pop(request_id, None) is not None and not finished and hasattr(self.source, "cancel"):
            self.source.cancel(request_id)

    async def run(self) -> None:
        while True:
            until_s = self.now_s()
            try:
                events = self.source.advance(until_s)
                next_s = self.source.next_event_s()
            except Exception as exc:            # a broken source must not leave every stream hanging
                LOG.exception("timing source failed")
                self.failure = f"{type(exc).__name__}: {exc}"
                for queue in self._queues.values():
                    queue.put_nowait(self.failure)
                return
            self._advanced_to_s = until_s
            for event in events:
                waiting = self._queues.get(event.request_id)
                if waiting is not None:
                    waiting.put_nowait(event)
            self._wake.clear()
            if next_s is None:
                delay = None
            elif next_s <= until_s:            # due but not released: do not spin on such a source
                delay = 1e-3
            else:
                delay = next_s - self.now_s()
            if delay is not None and delay <= 0:
                await asyncio.sleep(0)
                continue
            with suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()


@dataclass
class _Emulator:
    pacer: _Pacer
    model_name: str
    default_max_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))
    closing: bool = False


STATE = web.AppKey("tokensim_emulator", _Emulator)


@web.middleware
async def _openai_errors(request: web.Request, handler: Callable) -> web.StreamResponse:
    """Every refusal as OpenAI's error object; aiohttp's own 404/405/413 included."""
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = {404: f"Unknown request URL: {request.method} {request.path}.",
                   405: f"Method {request.method} is not allowed for {request.path}."}.get(exc.status, exc.reason)
        code = {404: "unknown_url", 405: "method_not_allowed"}.get(exc.status)
        return web.json_response(error_body(message, "invalid_request_error", None, code), status=exc.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:               # a fault of the emulator or its source, still in OpenAI's shape
        LOG.exception("emulator request failed")
        return web.json_response(error_body(f"Internal error: {type(exc).__name__}: {exc}", "server_error"), status=500)


async def _models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response({"object": "list", "data": [
        {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "tokensim"}]})


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _complete(request, "chat")


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, "completions")


async def _complete(request: web.Request, kind: str) -> web.StreamResponse:
    state = request.app[STATE]
    if state.closing:
        raise ApiError(503, "The server is shutting down.", type_="server_error")
    try:
        body = json.loads(await request.read())
    except (ValueError, RecursionError):
        raise ApiError(400, "We could not parse the JSON body of your request. The body must be valid JSON.",
                       code="invalid_json") from None
    parsed = parse_request(body, kind, state.model_name, state.default_max_tokens)
    request_id, queue = state.pacer.submit(parsed.input_tokens, parsed.output_tokens)
    finished = False
    try:
        if parsed.stream:
            response, finished = await _stream(request, state, parsed, queue)
            return response
        sent, finished = 0, False
        while not finished:
            event = await queue.get()
            if isinstance(event, str):
                raise ApiError(500, f"The timing source failed: {event}", type_="server_error")
            sent += event.tokens
            finished = event.finished
        return web.json_response(full_response(kind, new_id(kind), int(time.time()), state.model_name,
                                               parsed.input_tokens, sent))
    finally:
        state.pacer.release(request_id, finished)


async def _stream(request: web.Request, state: _Emulator, parsed: ParsedRequest,
                  queue: asyncio.Queue) -> tuple[web.StreamResponse, bool]:
    model = state.model_name
    response_id, created = new_id(parsed.kind), int(time.time())
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        return response, await _write_stream(response, parsed, model, response_id, created, queue)
    except ConnectionResetError:           # the client went away mid-stream
        return response, False


async def _write_stream(response: web.StreamResponse, parsed: ParsedRequest, model: str, response_id: str,
                        created: int, queue: asyncio.Queue) -> bool:
    """Write the chunks as the token events come; True when the request ran to its last token."""
    kind = parsed.kind

    def with_usage(chunk: dict, sent: int) -> dict:
        if parsed.include_usage or parsed.continuous_usage:
            chunk["usage"] = usage(parsed.input_tokens, sent) if parsed.continuous_usage else None
        return chunk

    if kind == "chat":                     # OpenAI opens a chat stream with the role and empty content
        await response.write(sse(with_usage(stream_chunk(kind, response_id, created, model, None, role=True), 0)))
    sent, finished = 0, False
    while not finished:
        event: TokenEvent | str = await queue.get()
        if isinstance(event, str):
            await response.write(sse(error_body(f"The timing source failed: {event}", "server_error")))
            break
        sent += event.tokens
        finished = event.finished
        chunk = stream_chunk(kind, response_id, created, model, FILLER_WORD * event.tokens)
        await response.write(sse(with_usage(chunk, sent)))
    if finished:
        last = stream_chunk(kind, response_id, created, model, None, finish_reason="length")
        await response.write(sse(with_usage(last, sent)))
        if parsed.include_usage:
            await response.write(sse(usage_chunk(kind, response_id, created, model, parsed.input_tokens, sent)))
    await response.write(sse("[DONE]"))
    await response.write_eof()
    return finished


async def create_app(source: TimingSource, *, model_name: str = DEFAULT_MODEL_NAME, max_pending_requests: int = 1024,
                     default_max_tokens: int = 256) -> web.Application:
    """The emulator as an aiohttp application; its pacer starts and stops with the app."""
    require(isinstance(source, TimingSource), "source", type(source).__name__,
            "an object with submit(), advance() and next_event_s()")
    require(bool(model_name) and isinstance(model_name, str), "model_name", model_name, "a non-empty string")
    require(max_pending_requests >= 1, "max_pending_requests", max_pending_requests, "1 or more")
    require(default_max_tokens >= 1, "default_max_tokens", default_max_tokens, "1 or more")
    app = web.Application(middlewares=[_openai_errors], client_max_size=64 * 2**20)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/completions", _completions)

    async def pacer_task(app: web.Application):
        state = _Emulator(_Pacer(source, max_pending_requests), model_name, default_max_tokens)
        app[STATE] = state
        task = asyncio.create_task(state.pacer.run())
        yield
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task

    async def refuse_new_requests(app: web.Application) -> None:
        app[STATE].closing = True

    app.cleanup_ctx.append(pacer_task)
    app.on_shutdown.append(refuse_new_requests)
    return app


@dataclass(frozen=True)
class RunningEmulator:
    """A started emulator: `url` is the base URL (append /v1 for the OpenAI client)."""
    url: str
    port: int
    runner: web.AppRunner

    async def close(self) -> None:
        """Stop listening, let in-flight requests finish within the grace period, cancel the rest."""
        await self.runner.cleanup()


async def start_emulator(source: TimingSource, host: str = "127.0.0.1", port: int = 0, *,
                         model_name: str = DEFAULT_MODEL_NAME, max_pending_requests: int = 1024,
                         default_max_tokens: int = 256, shutdown_grace_s: float = 5.0) -> RunningEmulator:
    """Start the emulator in the running event loop; port 0 picks a free port."""
    require(shutdown_grace_s >= 0, "shutdown_grace_s", shutdown_grace_s, "0 or more seconds")
    app = await create_app(source, model_name=model_name, max_pending_requests=max_pending_requests,
                           default_max_tokens=default_max_tokens)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_grace_s)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise TokensimError(f"emulator: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    bound_host, bound_port = runner.addresses[0][:2]
    url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
    return RunningEmulator(f"http://{url_host}:{bound_port}", bound_port, runner)


def run_emulator(source: TimingSource, host: str = "127.0.0.1", port: int = 8000, model_name: str = DEFAULT_MODEL_NAME,
                 *, max_pending_requests: int = 1024, default_max_tokens: int = 256, shutdown_grace_s: float = 5.0,
                 on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly; `on_ready(url)` runs once listening."""

    async def serve() -> None:
        server = await start_emulator(source, host, port, model_name=model_name, max_pending_requests=max_pending_requests,
                                      default_max_tokens=default_max_tokens, shutdown_grace_s=shutdown_grace_s)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if on_ready is not None:
                on_ready(server.url)
            await stop.wait()
        finally:
            await server.close()

    asyncio.run(serve())
