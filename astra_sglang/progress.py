"""Progress of the steps that take more than a few seconds (building the fast path, extracting, an isolated
evaluation, a server's start): on a terminal a live line with a spinner, what is being done and the elapsed
time; elsewhere (CI logs, pipes) no live output and one plain line when the step ends. Both go to stderr, so
what a command prints on stdout stays as it was.
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

QUIET_S = 1.0
"""A step done faster than this (a cache hit) prints no line at all."""


class Step:
    """A running step: `update` says what it is doing now (shown live on a terminal only)."""

    def __init__(self, what: str, progress: Progress | None = None, task=None):
        self.what, self._progress, self._task = what, progress, task
        self.start = time.perf_counter()

    def update(self, detail: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self.what}: {detail}" if detail else self.what)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def console() -> Console:
    """stderr as it is now (a test runner may have replaced sys.stderr since the last call)."""
    return Console(file=sys.stderr, highlight=False)


@contextlib.contextmanager
def step(what: str, done: str | None = None, say_done: bool = True) -> Iterator[Step]:
    """Run the body as one step called `what` ("building the C++ fast path"). On its end, where it took at
    least QUIET_S, one line `done` (default "WHAT: done in 12.3s") unless `say_done` is off (a caller that
    prints its own result line). An exception ends the step without a line: the error says what happened."""
    out = console()
    if out.is_terminal:
        # the elapsed time before the text: a narrow terminal cuts the text, not the time
        with Progress(SpinnerColumn(), TimeElapsedColumn(), TextColumn("{task.description}"), console=out,
                      transient=True) as progress:
            current = Step(what, progress, progress.add_task(what, total=None))
            yield current
    else:
        current = Step(what)
        yield current
    if say_done and current.elapsed >= QUIET_S:
        out.print(done.format(seconds=current.elapsed) if done else f"{what}: done in {current.elapsed:.1f}s",
                  markup=False)
