"""A function mapped over tasks in a local process pool, results in task order: what `tokensim fit` and
`tokensim validate --serving` spread their refits and simulations with."""
from __future__ import annotations

import os


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or `taskset`'s share, where os.cpu_count
    counts the whole machine), at least 1."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:                # no affinity call on this platform (macOS, Windows)
        return os.cpu_count() or 1


def pool_map(fn, tasks, progress, workers: int | None):
    """fn over tasks in a process pool of `workers` (default: the CPUs this process may use; 1: in this process),
    ticking progress as each finishes; results in task order."""
    workers = workers or available_cpus()
    if workers <= 1 or len(tasks) <= 1:
        out = []
        for t in tasks:
            out.append(fn(t))
            if progress:
                progress()
        return out
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(fn, t) for t in tasks]
        for f in futures:
            f.add_done_callback(lambda _f: progress() if progress else None)
        return [f.result() for f in futures]


def interleaved(n: int, chunks: int) -> list[list[int]]:
    """Indices 0..n-1 dealt into `chunks` lists (i, i + chunks, i + 2 chunks, ...), so that runs of costly neighbours
    (a file's rows sorted by load) spread over the chunks; no empty chunk."""
    chunks = min(max(1, chunks), n)
    return [list(range(i, n, chunks)) for i in range(chunks)]


__all__ = ["available_cpus", "interleaved", "pool_map"]
