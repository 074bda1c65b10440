"""Screening progress on the terminal (rich): per bucket, configs screened of the total, configs per second, the
best time so far and the config that has it."""
from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from astra_sglang.triton.screen_records import Screened


class ScreenProgress:
    def __init__(self, console: Console | None = None):
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[best]}"),
                                 TimeElapsedColumn(), console=console, transient=False)
        self.task = None
        self.best: Screened | None = None
        self.started = 0.0
        self.lock = threading.Lock()  # results come from one thread per GPU

    def __enter__(self) -> "ScreenProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def on_bucket(self, bucket, total: int) -> None:
        name = "x".join(map(str, bucket)) if isinstance(bucket, tuple) else bucket
        self.task = self.progress.add_task(f"screening {name}", total=total, rate="", best="")
        self.best, self.started = None, time.time()

    def on_result(self, result: Screened) -> None:
        with self.lock:
            if result.ok and (self.best is None or result.us < self.best.us):
                self.best = result
            done = self.progress.tasks[self.task].completed + 1
            rate = done / max(time.time() - self.started, 1e-9)
            best = f"best {self.best.us:.1f} us {self.best.config}" if self.best else ""
            self.progress.update(self.task, advance=1, rate=f"{rate:.1f}/s", best=best)
