"""Where the emulator's token times come from: the timing-source protocol and a fixed-rate source.

A timing source is a simulation the emulator drives in real time. Its clock is seconds since the
emulator started. The emulator submits each request when it arrives, asks when the next token is
due, and advances the source to the wall clock to collect the tokens that are due by then:

    request_id = source.submit(arrival_s, input_tokens, output_tokens)
    events = source.advance(until_s)     # every event with time_s <= until_s, in time order
    source.next_event_s()                # time of the next pending event, or None when idle

`tokensim.sim.OnlineSimulation` implements it with the serving simulator; `FixedRateSource` here
gives every request the same TTFT and TPOT with no queueing, which is what a smoke test needs.
Events are read by attribute only (request_id, time_s, tokens, finished), so a source may use its
own event class, as the simulator does. A source may also offer `cancel(request_id)`; the emulator
calls it when a client goes away before its last token. `submit` may raise TokensimError for a
request it can never serve; the client gets HTTP 400 with the message.
"""
from __future__ import annotations

import heapq
import math
from typing import Protocol, runtime_checkable

from tokensim.errors import require
from tokensim.sim.online import TokenEvent  # one definition for the simulator and the emulator


@runtime_checkable
class TimingSource(Protocol):
    def submit(self, arrival_s: float, input_tokens: int, output_tokens: int, prefix_id: int | None = None) -> int: ...

    def advance(self, until_s: float) -> list[TokenEvent]: ...

    def next_event_s(self) -> float | None: ...


class FixedRateSource:
    """Every request: first token `ttft_s` after arrival, then one token every `tpot_s`; no queueing."""

    def __init__(self, ttft_s: float, tpot_s: float) -> None:
        require(math.isfinite(ttft_s) and ttft_s >= 0, "ttft_s", ttft_s, "a finite number of seconds >= 0")
        require(math.isfinite(tpot_s) and tpot_s > 0, "tpot_s", tpot_s, "a finite number of seconds > 0")
        self.ttft_s = ttft_s
        self.tpot_s = tpot_s
        self._due: list[tuple[float, int, int]] = []    # (time_s, request_id, tokens still to come)
        self._next_request_id = 0

    def submit(self, arrival_s: float, input_tokens: int, output_tokens: int, prefix_id: int | None = None) -> int:
        require(input_tokens >= 0, "input_tokens", input_tokens, "0 or more tokens")
        require(output_tokens >= 1, "output_tokens", output_tokens, "1 or more tokens")
        request_id = self._next_request_id
        self._next_request_id += 1
        heapq.heappush(self._due, (arrival_s + self.ttft_s, request_id, output_tokens))
        return request_id

    def advance(self, until_s: float) -> list[TokenEvent]:
        events = []
        while self._due and self._due[0][0] <= until_s:
            time_s, request_id, left = heapq.heappop(self._due)
            events.append(TokenEvent(request_id, time_s, 1, finished=left == 1))
            if left > 1:
                heapq.heappush(self._due, (time_s + self.tpot_s, request_id, left - 1))
        return events

    def next_event_s(self) -> float | None:
        return self._due[0][0] if self._due else None

    def cancel(self, request_id: int) -> None:
        self._due = [d for d in self._due if d[1] != request_id]
        heapq.heapify(self._due)
