"""Routers: which replica (engine) a new request goes to."""
from __future__ import annotations

from typing import Any, Protocol


class Router(Protocol):
    def pick(self, engines: list, r) -> Any: ...


class RoundRobin:
    """Replicas in turn."""

    def __init__(self) -> None:
        self.next = 0

    def pick(self, engines: list, r) -> object:
        e = engines[self.next % len(engines)]
        self.next += 1
        return e


class LeastOutstanding:
    """The replica with the fewest requests waiting or running (the first on ties)."""

    def pick(self, engines: list, r) -> object:
        best = engines[0]
        best_n = best.outstanding
        for e in engines[1:]:
            n = e.outstanding
            if n < best_n:
                best, best_n = e, n
        return best


class PrefixAware:
    """A request with a prefix id goes where that prefix went before (its KV is cached there);
    others, and first sightings, go to the least loaded replica."""

    def __init__(self) -> None:
        self.home: dict[int, object] = {}
        self.fallback = LeastOutstanding()

    def pick(self, engines: list, r) -> object:
        if r.prefix_id >= 0:
            e = self.home.get(r.prefix_id)
            if e is None:
                e = self.home[r.prefix_id] = self.fallback.pick(engines, r)
            return e
        return self.fallback.pick(engines, r)


ROUTERS: dict[str, type[Router]] = {"round_robin": RoundRobin, "least_outstanding": LeastOutstanding, "prefix_aware": PrefixAware}
