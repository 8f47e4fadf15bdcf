"""The discrete-event simulation: every piece of state of one run in one object.

Events are (time, sequence, handler, argument) in a heap; the loop pops one and calls its
handler, which may push more. Arrivals, step ends, pipeline-stage frees and KV transfers are
the only events. All randomness comes from `Simulation.rng`, seeded once.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from tokensim.errors import bad_value, require
from tokensim.sim.engine import Engine
from tokensim.sim.request import COMPLETED, REJECT_REASONS, REJECTED, ItlLog, Req, RequestLog
from tokensim.sim.results import SimulationResult, summarize
from tokensim.sim.router import ROUTERS, Router
from tokensim.sim.spec import EngineSpec
from tokensim.sim.workload import ClosedLoop, Workload

_INF = math.inf


@dataclass(frozen=True)
class Replicas:
    """`count` copies of one engine behind a router ('round_robin', 'least_outstanding',
    'prefix_aware')."""
    engine: EngineSpec
    count: int = 1
    router: str = "round_robin"

    def __post_init__(self) -> None:
        require(isinstance(self.count, int) and self.count >= 1, "count", self.count, "a whole number >= 1")
        require(self.router in ROUTERS, "router", self.router, f"one of {', '.join(ROUTERS)}")


@dataclass(frozen=True)
class Disaggregated:
    """Prefill-decode disaggregation: prefill engines compute prompts (and the first token),
    then each request's KV moves to a decode engine in
    transfer_latency_s + prompt tokens x kv_bytes_per_token / transfer_bandwidth_bytes_per_s."""
    prefill: EngineSpec
    decode: EngineSpec
    kv_bytes_per_token: float
    transfer_bandwidth_bytes_per_s: float
    transfer_latency_s: float = 0.0
    prefill_count: int = 1
    decode_count: int = 1
    router: str = "least_outstanding"

    def __post_init__(self) -> None:
        for name in ("kv_bytes_per_token", "transfer_bandwidth_bytes_per_s"):
            v = getattr(self, name)
            require(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, name, v, "a finite number > 0")
        v = self.transfer_latency_s
        require(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, "transfer_latency_s", v,
                "a finite number of seconds >= 0")
        for name in ("prefill_count", "decode_count"):
            v = getattr(self, name)
            require(isinstance(v, int) and v >= 1, name, v, "a whole number >= 1")
        require(self.router in ROUTERS, "router", self.router, f"one of {', '.join(ROUTERS)}")


class Simulation:
    """One simulated run of a deployment. `run(until_s)` may be called repeatedly."""

    def __init__(self, deployment, *, seed: int = 0, fast_forward: bool = True,
                 series_points: int = 2000) -> None:
        require(isinstance(seed, (int, np.integer)) and seed >= 0, "seed", seed, "an integer >= 0")
        self.rng = np.random.default_rng(seed)
        self.fast_forward = fast_forward
        self.series_points = series_points
        self.now = 0.0
        self.until = _INF
        self._events: list = []
        self._seq = 0
        self.log = RequestLog()
        self.itl = ItlLog()
        self.listener: Any = None          # the online mode's token stream
        self.live: dict[int, Req] = {}     # online mode: requests not yet finished, by id
        self.first_arrival_s = _INF
        self._source: object = None
        self._open_loop = False
        self._cursor: _Cursor | None = None
        self._n_source = 0
        self._next = 0
        self._think_s = 0.0
        self.not_arrived = 0
        if isinstance(deployment, EngineSpec):
            deployment = Replicas(deployment)
        self.router: Router
        self.decode_pool: list[Engine] | None
        if isinstance(deployment, Replicas):
            self.engines = [Engine(deployment.engine, self, i) for i in range(deployment.count)]
            self.entry = self.engines
            self.decode_pool = None
            self.router = ROUTERS[deployment.router]()
        elif isinstance(deployment, Disaggregated):
            d = deployment
            self.entry = [Engine(d.prefill, self, i, "prefill") for i in range(d.prefill_count)]
            self.decode_pool = [Engine(d.decode, self, i, "decode") for i in range(d.decode_count)]
            self.engines = self.entry + self.decode_pool
            self.router = ROUTERS[d.router]()
            self.decode_router = ROUTERS["least_outstanding"]()
            self.transfer = d
        else:
            raise bad_value("deployment", type(deployment).__name__,
                            "an EngineSpec, Replicas or Disaggregated")

    # -- the event loop -----------------------------------------------------------------------
    def push(self, time_s: float, handler, arg) -> None:
        heapq.heappush(self._events, (time_s, self._seq, handler, arg))
        self._seq += 1

    def horizon(self) -> float:
        """When the next thing other than the engine asking happens (or the run's end)."""
        return min(self._events[0][0], self.until) if self._events else self.until

    def run(self, until_s: float | None = None) -> None:
        self.until = _INF if until_s is None else until_s
        events, until = self._events, self.until
        while events and events[0][0] <= until:
            time_s, _, handler, arg = heapq.heappop(events)
            self.now = time_s
            handler(time_s, arg)
        if until < _INF:
            self.now = max(self.now, until)

    # -- requests in ------------------------------------------------------------------------------
    def load(self, source) -> None:
        """Queue the arrivals of a Workload or ClosedLoop."""
        require(self._source is None, "source", type(source).__name__, "one workload per simulation")
        self._source = source
        if isinstance(source, ClosedLoop):
            w = source.requests
            n = min(source.concurrency, len(w))
            for i in range(n):
                self.push(source.start_spread_s * i / n, self._arrive_next, None)
            self._think_s = source.think_s
        elif isinstance(source, Workload):
            w = source
            if len(w):
                self.push(float(w.arrival_s[0]), self._arrive_next, None)
        else:
            raise bad_value("workload", type(source).__name__, "a Workload or ClosedLoop")
        self._n_source = len(w)
        self._open_loop = isinstance(source, Workload)
        self._cursor = _Cursor(w)

    def load_online(self) -> None:
        """Requests will come one by one through `schedule_submit`."""
        require(self._source is None, "source", "online", "one workload per simulation")
        self._source = "online"

    def _arrive_next(self, now: float, _) -> None:
        """The next request of the workload arrives (with any others arriving at this instant)."""
        cursor = self._cursor
        if cursor is None:
            return
        while True:
            i = self._next
            if i >= self._n_source:          # closed loop: several clients freed at one instant asked for the last rows
                return
            self._next = i + 1
            _, inputs, outputs, pid, ptok = cursor.row(i)
            self._route(now, self._new_request(now, inputs, outputs, pid, ptok))
            if not self._open_loop or i + 1 >= self._n_source:
                return
            at = cursor.row(i + 1)[0]
            if at != now:
                self.push(at, self._arrive_next, None)
                return

    def schedule_submit(self, arrival_s: float, input_tokens: int, output_tokens: int,
                        prefix_id: int = -1, prefix_tokens: int = 0) -> Req:
        """Log a request now and have it arrive at `arrival_s` (online use)."""
        r = self._new_request(arrival_s, input_tokens, output_tokens, prefix_id, prefix_tokens)
        self.live[r.rid] = r
        self.push(arrival_s, self._route, r)
        return r

    def cancel(self, rid: int) -> None:
        """The client of request `rid` went away (online use): stop serving it."""
        r = self.live.pop(rid, None)
        if r is None:
            return
        self.log.status[rid] = REJECTED
        self.log.reason[rid] = REJECT_REASONS.index("cancelled")
        if r.engine is not None:
            r.engine.cancel(r)
        else:
            r.cancelled = True              # not arrived yet

    def _new_request(self, arrival_s: float, input_tokens: int, output_tokens: int, prefix_id: int,
                     prefix_tokens: int) -> Req:
        rid = self.log.add(arrival_s, input_tokens, output_tokens)
        if arrival_s < self.first_arrival_s:
            self.first_arrival_s = arrival_s
        return Req(rid, arrival_s, input_tokens, output_tokens, prefix_id, prefix_tokens)

    def _route(self, now: float, r: Req) -> None:
        """A request arrives: route it, and queue it there (or reject it)."""
        if r.cancelled:
            return
        entry = self.entry
        engine = entry[0] if len(entry) == 1 else self.router.pick(entry, r)
        reason = engine.reject_reason(r)
        if reason is None and self.decode_pool is not None:
            reason = self.decode_pool[0].reject_reason(r)
        if reason is not None:
            self.live.pop(r.rid, None)
            self.log.status[r.rid] = REJECTED
            self.log.reason[r.rid] = REJECT_REASONS.index(reason)
            if self.listener is not None:
                self.listener.rejected(r, now, reason)
            self._closed_loop_next(now)
            return
        engine.enqueue(r, now)

    def _closed_loop_next(self, now: float) -> None:
        if not self._open_loop and self._next < self._n_source:
            think = self.rng.exponential(self._think_s) if self._think_s else 0.0
            self.push(now + think, self._arrive_next, None)

    # -- callbacks from engines --------------------------------------------------------------------
    def on_scheduled(self, r: Req, now: float, hit_tokens: int) -> None:
        log = self.log
        if log.first_scheduled_s[r.rid] < 0:
            log.first_scheduled_s[r.rid] = now
            log.prefix_hit_tokens[r.rid] = hit_tokens

    def on_seen(self, requests: list[Req], now: float) -> None:
        """Requests an engine's scheduling pass takes in (the first pass at or after each reached it)."""
        seen = self.log.seen_s
        for r in requests:
            if seen[r.rid] < 0:
                seen[r.rid] = now

    def on_preempted(self, r: Req) -> None:
        self.log.preemptions[r.rid] += 1

    def on_token(self, r: Req, now: float) -> None:
        """A request's prefill finished and produced a token (its first, or its next after a
        preemption)."""
        if r.first_token_s < 0:
            r.first_token_s = now
            self.log.first_token_s[r.rid] = now
        else:
            self.itl.add(now - r.last_token_s, 1)
        r.last_token_s = now
        if self.listener is not None:
            self.listener.token(r, now, 1, r.output >= r.output_tokens)

    def on_finish(self, r: Req, now: float) -> None:
        if self.live:
            self.live.pop(r.rid, None)
        log = self.log
        log.last_token_s[r.rid] = now
        log.tokens[r.rid] = r.output
        log.status[r.rid] = COMPLETED
        if self.listener is not None:
            self.listener.finished(r, now)
        self._closed_loop_next(now)

    def handoff(self, src: Engine, r: Req, now: float) -> None:
        """A prefill engine finished a prompt: send its KV to a decode engine."""
        d = self.transfer
        dst = self.decode_router.pick(self.decode_pool or [], r)
        dst.incoming += 1
        seconds = d.transfer_latency_s + r.prompt_tokens * d.kv_bytes_per_token / d.transfer_bandwidth_bytes_per_s
        self.push(now + seconds, self._transferred, (src, dst, r))

    def _transferred(self, now: float, arg) -> None:
        src, dst, r = arg
        src.release_transferred(r, now)
        dst.incoming -= 1
        if r.cancelled:
            return
        r.kv_ready = True
        r.computed = r.scheduled = r.prompt_tokens + r.output - 1
        dst.enqueue(r, now)

    # -- results ----------------------------------------------------------------------------------
    def result(self, *, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> SimulationResult:
        return summarize(self, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)


class _Cursor:
    """Rows of a workload as Python numbers, converted a chunk at a time (fast to read, small
    to hold for a million requests)."""
    CHUNK = 4096

    def __init__(self, w: Workload) -> None:
        self.w = w
        self.start = -1
        self.rows: list = []

    def row(self, i: int) -> tuple:
        j = i - self.start
        if not 0 <= j < len(self.rows):
            w, a, b = self.w, i, i + self.CHUNK
            self.start = i
            pid, ptok = cast(np.ndarray, w.prefix_id), cast(np.ndarray, w.prefix_tokens)
            self.rows = list(zip(w.arrival_s[a:b].tolist(), w.input_tokens[a:b].tolist(),
                                 w.output_tokens[a:b].tolist(), pid[a:b].tolist(), ptok[a:b].tolist(),
                                 strict=True))
            j = 0
        return self.rows[j]


def simulate(workload: Workload | ClosedLoop, deployment, *, seed: int = 0, until_s: float | None = None,
             slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
             fast_forward: bool = True, series_points: int = 2000) -> SimulationResult:
    """Serve `workload` on `deployment` (an EngineSpec, Replicas or Disaggregated) and summarize.

    `until_s` stops the run at that simulated time (requests still held are `in_flight`);
    `slo_ttft_s` / `slo_tpot_s` define goodput."""
    if until_s is not None:
        require(isinstance(until_s, (int, float)) and not math.isnan(until_s) and until_s >= 0,
                "until_s", until_s, "a time in seconds >= 0")
    sim = Simulation(deployment, seed=seed, fast_forward=fast_forward, series_points=series_points)
    sim.load(workload)
    sim.run(until_s)
    sim.not_arrived = len(workload) - sim.log.n
    return sim.result(slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
