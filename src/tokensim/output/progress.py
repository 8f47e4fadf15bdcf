"""Progress on stderr: a rich bar on a terminal; for long jobs whose stderr is a file or a pipe, a plain line now
and then; nothing otherwise (and nothing under --json, except a long job's plain lines, which go to stderr)."""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s"


class PlainProgress:
    """One line on `stream` per `every_s` seconds at most (and one at the end): units done of the total, the share,
    the time elapsed. For jobs that run for minutes to hours with no terminal to draw a bar on (a CI log, nohup)."""

    def __init__(self, label: str, total: int, every_s: float, stream=None, clock=time.monotonic) -> None:
        self.label, self.total, self.every_s = label, max(total, 1), every_s
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = self.last = clock()
        self.done = 0

    def tick(self) -> None:
        self.done += 1
        now = self.clock()
        if now - self.last >= self.every_s or self.done >= self.total:
            self.last = now
            print(f"{self.label}: {self.done}/{self.total} ({self.done / self.total:.0%}), "
                  f"{_clock(now - self.start)} elapsed", file=self.stream, flush=True)


@contextmanager
def progress_bar(label: str, total: int, enabled: bool = True, plain_every_s: float | None = None):
    """Yields a tick() to call once per unit of work. On a terminal (and `enabled`): a transient bar. Elsewhere, with
    `plain_every_s`: a PlainProgress line at most that often, whether or not `enabled` (a job long enough to ask for
    it is one whose log a user watches); without: silent."""
    if enabled and sys.stderr.isatty():
        with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda: bar.advance(task)
        return
    if plain_every_s is not None and not sys.stderr.isatty():
        yield PlainProgress(label, total, plain_every_s).tick
        return
    yield lambda: None
