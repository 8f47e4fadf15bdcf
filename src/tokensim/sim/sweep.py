"""A sweep of serving simulations (rates x deployments x scheduler settings), run here or on a Ray cluster.

    from tokensim.sim.sweep import SweepPoint, run_sweep
    points = [SweepPoint(spec, LoadSpec(500, rate_per_s=r)) for r in (1, 2, 4)]
    summaries = run_sweep(points, workers=2)              # or ray_address="local" / "auto" / "ray://head:10001"

Each point is simulated on its own: its workload comes from its LoadSpec's seed and nothing is shared between
points, so the summaries are the same whichever backend ran them (one process, a local process pool, Ray).
What crosses a process boundary is the point itself (an EngineSpec pickles whole, its cost model included) and
the summary it returns. The local pool starts its workers with spawn, so a script that calls run_sweep does so
under `if __name__ == "__main__":`, as multiprocessing asks. On a Ray cluster every node needs tokensim installed
(`pip install 'tokensim[ray]'`).
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from tokensim.errors import TokensimError, bad_value, require
from tokensim.prediction.serving import LoadSpec, simulate_serving
from tokensim.sim.schedulers import SglangScheduler, StaticBatchScheduler, TrtllmScheduler, VllmScheduler
from tokensim.sim.spec import EngineSpec

LOCAL_RAY = "local"              # ray_address that starts a Ray instance on this machine for the sweep
RAY_EXTRA = "pip install 'tokensim[ray]'"

# The setting of each scheduler that caps its running requests (the engine's own name for it)
RUNNING_CAP_SETTING = {VllmScheduler: "max_num_seqs", SglangScheduler: "max_running_requests",
                       TrtllmScheduler: "max_batch_size", StaticBatchScheduler: "max_batch_size"}


@dataclass(frozen=True)
class SweepPoint:
    """One simulation of a sweep: `load` served by `replicas` copies of `engine`, whose scheduler settings are
    replaced by `scheduler` (pairs of setting name and value, e.g. (("max_num_seqs", 64),); a dict is accepted)."""

    engine: EngineSpec
    load: LoadSpec
    replicas: int = 1
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    scheduler: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        require(isinstance(self.replicas, int) and self.replicas >= 1, "replicas", self.replicas, "a whole number >= 1")
        settings = self.scheduler.items() if isinstance(self.scheduler, Mapping) else self.scheduler
        object.__setattr__(self, "scheduler", tuple((str(k), v) for k, v in settings))
        if self.scheduler:
            sched = self.engine.scheduler
            known: list[str] = [f.name for f in dataclasses.fields(sched)] if dataclasses.is_dataclass(sched) else []
            for name, _ in self.scheduler:
                require(name in known, "scheduler", name, f"a setting of {type(sched).__name__}: {', '.join(known)}")
            self.resolved_engine()          # the scheduler checks the values now, not in a worker

    def resolved_engine(self) -> EngineSpec:
        """The engine with this point's scheduler settings applied."""
        if not self.scheduler:
            return self.engine
        sched = dataclasses.replace(self.engine.scheduler, **dict(self.scheduler))  # type: ignore[type-var]
        return dataclasses.replace(self.engine, scheduler=sched)


def simulate_point(point: SweepPoint):
    """The simulator's full result for one point (requests, series and summary)."""
    return simulate_serving(point.resolved_engine(), point.load, point.replicas,
                            slo_ttft_s=point.slo_ttft_s, slo_tpot_s=point.slo_tpot_s)


def run_point(point: SweepPoint) -> dict:
    """The summary of one point, without its time series: what a sweep returns per point."""
    return {k: v for k, v in simulate_point(point).summary.items() if k != "series"}


def run_sweep(points: Sequence[SweepPoint], *, workers: int | None = None, ray_address: str | None = None,
              progress: Callable[[], None] | None = None) -> list[dict]:
    """The summaries of `points`, in their order. On Ray when `ray_address` is given ("local" starts an instance
    here with `workers` CPUs; otherwise a cluster address as ray.init takes it), else in a pool of `workers`
    processes (None: one per CPU; 1: in this process). `progress()` is called as each point finishes."""
    points = list(points)
    tick = progress or (lambda: None)
    require(workers is None or (isinstance(workers, int) and workers >= 1), "workers", workers, "a whole number >= 1")
    if ray_address is not None:
        return _run_on_ray(points, ray_address, workers, tick)
    if workers == 1 or len(points) <= 1:
        out = []
        for p in points:
            out.append(run_point(p))
            tick()
        return out
    # spawn, not fork: the caller may run threads (a progress bar's, Ray's, a notebook's) that fork would copy mid-lock;
    # each worker imports tokensim once (~0.4 s), the same on every OS
    with ProcessPoolExecutor(max_workers=min(workers or os.cpu_count() or 1, len(points)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(run_point, p) for p in points]
        try:
            for f in as_completed(futures):
                f.result()                  # the first failure stops the sweep
                tick()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return [f.result() for f in futures]


def import_ray():
    """The ray module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise bad_value("--ray", "ray", f"the ray package, which is not installed: {RAY_EXTRA}") from None
    return ray


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a host:port (or ray://host:port) nothing listens on: ray.init retries one for minutes."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address == LOCAL_RAY or not host or not port.isdigit():
        return                              # "auto" and the like: ray.init resolves them
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise bad_value("--ray", address, f"'{LOCAL_RAY}' or the address of a running Ray cluster "
                                          f"({exc.strerror or type(exc).__name__})") from None


def _run_on_ray(points: list[SweepPoint], address: str, workers: int | None, tick: Callable[[], None]) -> list[dict]:
    import logging

    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        _check_reachable(address)
        try:
            if address == LOCAL_RAY:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            else:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise bad_value("--ray", address, f"'{LOCAL_RAY}' or the address of a running Ray cluster "
                                              f"({' '.join(str(exc).split())[:200]})") from None
    try:
        remote = ray.remote(run_point)
        refs = [remote.remote(p) for p in points]
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)                   # the first failure stops the sweep
            tick()
        return list(ray.get(refs))          # in submission order
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, TokensimError):
            raise exc.cause from None
        raise
    finally:
        if started:
            ray.shutdown()
