"""The simulator driven incrementally, for an emulated serving endpoint.

The caller maps wall time to simulated time: it `submit`s requests as they come, `advance`s the
simulation to the present and streams the `TokenEvent`s that came out, and can sleep until
`next_event_s()`. The same engine objects as a batch run do the work; only the skipping ahead
over runs of identical decode steps is off, so every step's tokens come out at their own time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tokensim.errors import TokensimError, require
from tokensim.sim.request import Req
from tokensim.sim.results import SimulationResult
from tokensim.sim.simulation import Simulation


@dataclass(frozen=True)
class TokenEvent:
    request_id: int
    time_s: float
    tokens: int
    finished: bool


class _Listener:
    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[TokenEvent] = []

    def token(self, r, now: float, tokens: int, finished: bool) -> None:
        self.events.append(TokenEvent(r.rid, now, tokens, finished))

    def decoded(self, dec, flight, now: float) -> None:
        tokens = flight.tokens
        for i, r in enumerate(dec.reqs):
            if r.cancelled:
                continue
            t = 1 if tokens is None else int(tokens[i])
            ctx = int(dec.base[i]) + dec.k
            self.events.append(TokenEvent(r.rid, now, t, ctx >= int(dec.end[i])))

    def finished(self, r, now: float) -> None:
        pass

    def rejected(self, r, now: float, reason: str) -> None:
        pass


class OnlineSimulation:
    """A deployment (EngineSpec, Replicas or Disaggregated) served step by step."""

    def __init__(self, deployment, *, seed: int = 0) -> None:
        self.sim = Simulation(deployment, seed=seed, fast_forward=False)
        self._listener = _Listener()
        self.sim.listener = self._listener
        self.sim.load_online()

    @property
    def now_s(self) -> float:
        return self.sim.now

    def submit(self, arrival_s: float, input_tokens: int, output_tokens: int,
               prefix_id: int | None = None, prefix_tokens: int | None = None) -> int:
        """Queue a request arriving at `arrival_s` (taken as now if earlier than the simulated
        clock: the engines cannot act in the past); returns its id. A request that can never
        be served (longer than the context limit or the KV cache) is refused."""
        ok = isinstance(arrival_s, (int, float)) and math.isfinite(arrival_s) and arrival_s >= 0
        require(ok, "arrival_s", arrival_s, "a finite time in seconds >= 0")
        for name, v in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 1, name, v, "a whole number >= 1")
        pid = -1 if prefix_id is None else prefix_id
        require(isinstance(pid, int) and pid >= -1, "prefix_id", prefix_id, "None or an id >= 0")
        ptok = (input_tokens if prefix_tokens is None else prefix_tokens) if pid >= 0 else 0
        require(isinstance(ptok, int) and 0 <= ptok <= input_tokens, "prefix_tokens", prefix_tokens,
                f"between 0 and input_tokens ({input_tokens})")
        sim = self.sim
        probe = Req(-1, 0.0, input_tokens, output_tokens)
        for engine in sim.entry[:1] + (sim.decode_pool or [])[:1]:
            reason = engine.reject_reason(probe)
            if reason is not None:
                limit = engine.max_model_len if reason == "context_limit" else engine.kv.num_blocks * engine.block_size
                raise TokensimError(f"input_tokens + output_tokens = {input_tokens + output_tokens}: "
                                    f"expected at most {limit} ({reason.replace('_', ' ')} of {engine.name})")
        rid = sim.log.n
        sim.schedule_submit(max(float(arrival_s), sim.now), input_tokens, output_tokens, pid, ptok)
        return rid

    def advance(self, until_s: float) -> list:
        """Run the simulation up to `until_s`; return the token events in time order."""
        ok = isinstance(until_s, (int, float)) and not math.isnan(until_s)
        require(ok, "until_s", until_s, "a time in seconds")
        self.sim.run(max(float(until_s), self.sim.now))
        events = self._listener.events
        self._listener.events = []
        return events

    def cancel(self, request_id: int) -> None:
        """The client went away: the request stops and its KV is freed (counted as rejected,
        reason 'cancelled'); unknown or finished ids are ignored."""
        self.sim.cancel(request_id)

    def next_event_s(self) -> float | None:
        events = self.sim._events
        return events[0][0] if events else None

    def result(self, **slo) -> SimulationResult:
        return self.sim.result(**slo)
