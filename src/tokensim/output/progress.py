"""A rich progress bar that stays silent under --json or when output is not a terminal."""
from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(label: str, total: int, enabled: bool = True):
    """Yields a tick() to call once per unit of work."""
    if not enabled or not sys.stderr.isatty():
        yield lambda: None
        return
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)
