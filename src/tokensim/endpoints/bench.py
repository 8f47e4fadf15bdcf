"""A load generator for OpenAI-compatible servers: open-loop Poisson arrivals or a closed loop.

Every request streams (`stream: true` with `stream_options.include_usage`), asks for exactly its
output length (`max_tokens`; with `vllm_extensions` also `ignore_eos`, `min_tokens` and
`continuous_usage_stats`, which vLLM accepts), and is timed at the client: send, each token
(see `stream`), end. The run is bounded in count and in time (`max_duration_s`), each request
by `request_timeout_s`.

Failures: HTTP 429, 5xx, errors inside a stream and timeouts are counted as rejected and the run
goes on. A server that cannot be reached, answers garbage, cuts a stream short or refuses the
request itself (4xx) aborts the run: with nothing completed that is a TokensimError, otherwise the
partial results come back with `incomplete: true` and the reason in `error`.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

import aiohttp
import numpy as np

from tokensim.endpoints.results import BenchResult, RequestRecord, Slo, summarize
from tokensim.endpoints.stream import StreamError, StreamOutcome, read_stream
from tokensim.endpoints.workload import RequestSpec, build_prompt, load_dataset
from tokensim.errors import TokensimError, bad_value, require
from tokensim.sim.workload import check_range_ratio, drawn_lengths

ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
PREFLIGHT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class BenchConfig:
    base_url: str                              # http://host:port (a trailing /v1 is accepted)
    model: str
    num_requests: int | None = None            # None: one pass over the dataset
    request_rate_per_s: float | None = None    # Poisson arrivals (math.inf: all at once)
    concurrency: int | None = None             # closed loop, or a cap on the Poisson process
    input_tokens: int | None = None            # fixed lengths ...
    output_tokens: int | None = None
    dataset_path: str | None = None            # ... or lengths from a JSONL file
    range_ratio: float = 1.0                   # fixed lengths drawn uniformly from [range_ratio x L, L] per request
    endpoint: str = "completions"              # "completions" or "chat"
    seed: int = 0
    max_duration_s: float = 600.0
    request_timeout_s: float = 300.0
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_e2e_s: float | None = None
    vllm_extensions: bool = True
    api_key: str | None = None

    def __post_init__(self) -> None:
        require(isinstance(self.base_url, str) and self.base_url.startswith(("http://", "https://")), "base_url",
                self.base_url, "an http:// or https:// URL")
        require(isinstance(self.model, str) and bool(self.model), "model", self.model, "a model name")
        require(self.request_rate_per_s is not None or self.concurrency is not None, "request_rate_per_s",
                self.request_rate_per_s, "a rate (Poisson arrivals) or a concurrency (closed loop)")
        if self.request_rate_per_s is not None:
            rate = self.request_rate_per_s
            require(isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0, "request_rate_per_s",
                    rate, "requests per second > 0 (math.inf sends all at once)")
        if self.concurrency is not None:
            require(_is_int(self.concurrency) and self.concurrency >= 1, "concurrency", self.concurrency, "an integer >= 1")
        fixed = (self.input_tokens, self.output_tokens)
        if self.dataset_path is None:
            require(all(_is_int(n) and cast(int, n) >= 1 for n in fixed), "input_tokens, output_tokens", fixed,
                    "two integers >= 1 (or a dataset_path)")
            require(self.num_requests is not None, "num_requests", None, "a number of requests (or a dataset_path)")
        else:
            require(fixed == (None, None), "input_tokens, output_tokens", fixed, "none with a dataset_path")
        require(check_range_ratio(self.range_ratio) == 1 or self.dataset_path is None, "range_ratio", self.range_ratio,
                "1 with a dataset_path (the dataset carries each request's lengths)")
        if self.num_requests is not None:
            require(_is_int(self.num_requests) and self.num_requests >= 1, "num_requests", self.num_requests,
                    "an integer >= 1")
        require(self.endpoint in ENDPOINT_PATHS, "endpoint", self.endpoint, "completions or chat")
        for name in ("max_duration_s", "request_timeout_s", "slo_ttft_s", "slo_tpot_s", "slo_e2e_s"):
            value = getattr(self, name)
            if value is not None or name in ("max_duration_s", "request_timeout_s"):
                require(isinstance(value, (int, float)) and math.isfinite(value) and value > 0, name, value,
                        "a finite number of seconds > 0")

    @property
    def process(self) -> str:
        return "poisson" if self.request_rate_per_s is not None else "closed"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def run_bench(config: BenchConfig) -> BenchResult:
    """Run the bench to its end (or its time bound) and return the results."""
    return asyncio.run(bench_async(config))


async def bench_async(config: BenchConfig) -> BenchResult:
    """`run_bench` inside a running event loop."""
    specs = _workload(config)
    base_url = config.base_url.rstrip("/").removesuffix("/v1")
    conditions = {"url": base_url, "model": config.model, "endpoint": config.endpoint, "process": config.process,
                  "request_rate_per_s": config.request_rate_per_s, "concurrency": config.concurrency,
                  "num_requests": len(specs), "input_tokens": config.input_tokens,
                  "output_tokens": config.output_tokens, "range_ratio": config.range_ratio,
                  "dataset": config.dataset_path, "seed": config.seed,
                  "max_duration_s": config.max_duration_s, "request_timeout_s": config.request_timeout_s,
                  "vllm_extensions": config.vllm_extensions,
                  "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
                  "client_load_average_before": _load_average(), "client_cpus": len(os.sched_getaffinity(0))}
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    connector = aiohttp.TCPConnector(limit=0)          # the default cap of 100 would throttle the load silently
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        await _preflight(session, base_url, config.model)
        run = _Run(config, specs, session, base_url + ENDPOINT_PATHS[config.endpoint])
        duration_s = await run.execute()
    conditions.update(finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
                      client_load_average_after=_load_average())
    records = run.records()
    summary = summarize(records, len(specs), duration_s, Slo(config.slo_ttft_s, config.slo_tpot_s, config.slo_e2e_s))
    if summary["completed"] == 0 and (run.abort_reason or summary["rejected"]["total"] == len(specs)):
        reason = run.abort_reason or _most_common_error(records)
        raise TokensimError(f"bench against {base_url}: no request completed: {reason}")
    error = run.abort_reason or run.cut_reason
    summary.update(incomplete=error is not None or summary["not_arrived"] > 0, error=error, conditions=conditions)
    return BenchResult(summary, tuple(records))


def _workload(config: BenchConfig) -> list[RequestSpec]:
    if config.dataset_path is None:          # then all three are set: checked when the config was built
        n, isl, osl = cast(int, config.num_requests), cast(int, config.input_tokens), cast(int, config.output_tokens)
        if config.range_ratio == 1:
            return [RequestSpec(isl, osl)] * n
        # the simulator's draw from the same seed, so that a run and its --compare simulation send the same lengths
        inputs, outputs = drawn_lengths(isl, osl, config.range_ratio, n, np.random.default_rng(config.seed))
        return [RequestSpec(int(i), int(o)) for i, o in zip(inputs, outputs, strict=True)]
    specs = load_dataset(config.dataset_path)
    count = config.num_requests or len(specs)
    return [specs[i % len(specs)] for i in range(count)]     # a short dataset is cycled


def _load_average() -> list[float] | None:
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


def _most_common_error(records: list[RequestRecord]) -> str:
    errors = [r.error for r in records if r.error]
    return max(set(errors), key=errors.count) if errors else "no request was sent"


async def _preflight(session: aiohttp.ClientSession, base_url: str, model: str) -> None:
    """Fail fast on an unreachable server or a model it does not serve; servers without /v1/models pass."""
    try:
        async with session.get(base_url + "/v1/models", timeout=aiohttp.ClientTimeout(total=PREFLIGHT_TIMEOUT_S)) as resp:
            if resp.status != 200:
                return
            body = json.loads(await resp.read())
    except (aiohttp.ClientConnectionError, TimeoutError) as exc:
        raise TokensimError(f"cannot reach {base_url}: {_one_line(exc) or type(exc).__name__}") from None
    except (ValueError, aiohttp.ClientError):
        return
    served = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)] if isinstance(body, dict) else []
    if served and model not in served:
        raise bad_value("model", model, f"one of the models {base_url} serves: {', '.join(map(str, served))}")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class _Failure(Exception):
    def __init__(self, kind: str, message: str, fatal: bool) -> None:
        super().__init__(message)
        self.kind, self.message, self.fatal = kind, message, fatal


class _Run:
    """One run's state: what was sent when, what finished, and why it stopped early (if it did)."""

    def __init__(self, config: BenchConfig, specs: list[RequestSpec], session: aiohttp.ClientSession, url: str) -> None:
        self.config, self.specs, self.session, self.url = config, specs, session, url
        self.abort_reason: str | None = None
        self.cut_reason: str | None = None
        self._sent: dict[int, float] = {}
        self._done: dict[int, RequestRecord] = {}
        self._tasks: set[asyncio.Task] = set()
        self._stop = asyncio.Event()
        self._t0 = time.perf_counter()
        self._limit = asyncio.Semaphore(config.concurrency) if config.concurrency else None

    def now_s(self) -> float:
        return time.perf_counter() - self._t0

    async def execute(self) -> float:
        """Dispatch every request, stop at the time bound or an abort, and return the run's duration."""
        self._t0 = time.perf_counter()
        dispatch = asyncio.create_task(self._poisson() if self.config.process == "poisson" else self._closed())
        stopped = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait({dispatch, stopped}, timeout=self.config.max_duration_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if not done:
            self.cut_reason = f"max_duration_s = {self.config.max_duration_s} reached"
        duration_s = self.now_s()
        for task in (dispatch, stopped, *self._tasks):
            task.cancel()
        await asyncio.gather(dispatch, stopped, *self._tasks, return_exceptions=True)
        ends = [r.end_s for r in self._done.values() if r.end_s is not None]
        return duration_s if self.cut_reason or self.abort_reason or not ends else max(ends)

    def records(self) -> list[RequestRecord]:
        return [self._done.get(i) or RequestRecord(i, self.specs[i].input_tokens, self.specs[i].output_tokens, send_s,
                                                   "in_flight") for i, send_s in sorted(self._sent.items())]

    async def _poisson(self) -> None:
        rng = random.Random(self.config.seed)
        rate = cast(float, self.config.request_rate_per_s)      # set: this is the Poisson process
        arrival_s = 0.0
        for index in range(len(self.specs)):
            if arrival_s > self.now_s():
                await asyncio.sleep(arrival_s - self.now_s())
            if self._stop.is_set():
                return
            self._spawn(self._limited(index))
            arrival_s += 0.0 if math.isinf(rate) else rng.expovariate(rate)
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _limited(self, index: int) -> None:
        if self._limit is None:
            return await self._one(index)
        async with self._limit:
            if not self._stop.is_set():
                await self._one(index)

    async def _closed(self) -> None:
        indices = iter(range(len(self.specs)))

        async def user() -> None:
            for index in indices:                  # one shared iterator: each index goes to one user
                if self._stop.is_set():
                    return
                await self._one(index)
        users = min(cast(int, self.config.concurrency), len(self.specs))      # set: this is the closed loop
        await asyncio.gather(*(self._spawn(user()) for _ in range(users)))

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _one(self, index: int) -> None:
        spec = self.specs[index]
        send_s = self._sent[index] = self.now_s()
        try:
            outcome = await self._request(index, spec)
        except _Failure as failure:
            self._done[index] = RequestRecord(index, spec.input_tokens, spec.output_tokens, send_s, "failed",
                                              end_s=self.now_s(), error_kind=failure.kind, error=failure.message)
            if failure.fatal and self.abort_reason is None:
                self.abort_reason = failure.message
                self._stop.set()
            return
        times = [t - self._t0 for t in outcome.token_times_s]
        self._done[index] = RequestRecord(
            index, spec.input_tokens, spec.output_tokens, send_s, "ok", first_token_s=times[0], last_token_s=times[-1],
            end_s=self.now_s(), output_tokens=outcome.output_tokens,
            itl_s=tuple(b - a for a, b in zip(times, times[1:], strict=False)), server_prompt_tokens=outcome.prompt_tokens)

    def _payload(self, index: int, spec: RequestSpec) -> dict:
        prompt = build_prompt(spec.input_tokens, seed=self.config.seed * 1_000_003 + index)
        payload: dict = {"model": self.config.model, "max_tokens": spec.output_tokens, "stream": True,
                         "stream_options": {"include_usage": True}}
        if self.config.endpoint == "chat":
            payload["messages"] = [{"role": "user", "content": prompt}]
        else:
            payload["prompt"] = prompt
        if self.config.vllm_extensions:
            payload.update(ignore_eos=True, min_tokens=spec.output_tokens)
            payload["stream_options"]["continuous_usage_stats"] = True
        return payload

    async def _request(self, index: int, spec: RequestSpec) -> StreamOutcome:
        timeout = aiohttp.ClientTimeout(total=self.config.request_timeout_s)
        answered = False
        try:
            async with self.session.post(self.url, json=self._payload(index, spec), timeout=timeout) as resp:
                answered = True
                if resp.status != 200:
                    raise _Failure(f"http {resp.status}", f"{self.url} answered HTTP {resp.status}: "
                                   f"{_error_message(await resp.read())}",
                                   fatal=400 <= resp.status < 500 and resp.status not in (408, 429))
                outcome = await read_stream(resp)
        except TimeoutError:
            raise _Failure("timeout", f"no complete answer within request_timeout_s = {self.config.request_timeout_s}",
                           fatal=False) from None
        except StreamError as exc:
            raise _Failure(exc.kind, f"{self.url}: {exc}", fatal=True) from None
        except (aiohttp.ClientError, OSError) as exc:
            kind = "stream closed early" if answered else "connection error"
            raise _Failure(kind, f"{self.url}: {kind} ({_one_line(exc) or type(exc).__name__})", fatal=True) from None
        if outcome.error_in_stream is not None:
            raise _Failure("error in stream", f"{self.url}: error in stream: {outcome.error_in_stream}", fatal=False)
        if outcome.output_tokens == 0:
            raise _Failure("bad response", f"{self.url}: the stream finished without any output token", fatal=True)
        return outcome


def _error_message(raw: bytes) -> str:
    """OpenAI's error.message when the body has one, else the body's start, on one line."""
    with suppress(ValueError, AttributeError, TypeError):
        return _one_line(str(json.loads(raw)["error"]["message"]))[:200]
    return _one_line(raw.decode("utf-8", "replace"))[:200] or "(empty body)"
