"""Screening units over the GPUs of one host: every GPU takes the next unit of a plan and screens it alone.

A unit is one op's bucket and its configs (`ScreenUnit`): an op is a ScreenPool with a worker on every GPU (several
ops' pools share one compile pool), so units of different ops and buckets run side by side, one a GPU, and a GPU
that is done takes the next unit in the plan's order, never two at once (a timing shares its GPU with nothing). A
unit may wait for another (`after`: a source knob's variants are chosen from the plain configs screened at their
bucket, `configs` then a function of that unit's results); a GPU with nothing else to take waits for it.

`prefetch` records and queues the compiles of some units ahead of the screening (one unit for each class of
buckets that share their compiled kernels), on workers of their op on distinct GPUs at once, queued in the
plan's order: the CPU cores then compile what later units will need while the GPUs time the first ones; a unit's
own compiles, recorded again when it starts, are the same specializations and keep their place. Units not taken
by the deadline are reported with nothing screened; one cut by it keeps what it screened.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from astra_sglang.optimize.tuner.screen_pool import ScreenPool
from astra_sglang.triton.screen_records import Bucket, Screened, ScreenStats

Configs = list[str] | Callable[[list[Screened]], list[str]]


@dataclass(frozen=True)
class ScreenUnit:
    name: str
    op: str
    """The pool (ScreenPool) that screens it."""
    bucket: Bucket
    configs: Configs
    """The configs in order; or, with `after`, a function of that unit's results giving them."""
    after: str | None = None


@dataclass
class UnitResult:
    unit: ScreenUnit
    configs: list[str]
    results: list[Screened]
    stats: ScreenStats
    gpu: str | None
    start_s: float
    end_s: float
    """From the schedule's start."""


class Schedule:
    def __init__(self, pools: dict[str, ScreenPool], gpus: list[str | None], deadline: float | None = None,
                 echo: Callable[[str], None] = print, on_result: Callable[[str, Screened], None] | None = None,
                 on_unit: Callable[["UnitResult"], None] | None = None):
        """`on_result(unit name, result)` as each config's result comes; `on_unit` as each unit ends."""
        self.pools, self.gpus, self.deadline, self.echo = pools, list(gpus), deadline, echo
        self.on_result, self.on_unit = on_result, on_unit
        self.started = time.time()
        self._cond = threading.Condition()
        self._pending: list[ScreenUnit] = []
        self._running: set[str] = set()
        self.done: dict[str, UnitResult] = {}

    def prefetch(self, units: list[ScreenUnit]) -> int:
        """Record the units' compiles (an op's units on distinct GPUs at once, all ops side by side) and queue
        them in the units' order; returns the specializations queued."""
        slots: dict[str, int] = {}
        placed = []
        for unit in units:
            i = slots.get(unit.op, 0)
            slots[unit.op] = i + 1
            placed.append((unit, self.gpus[i % len(self.gpus)], i // len(self.gpus)))

        def record(item) -> dict:
            unit, gpu, _ = item
            return self.pools[unit.op].record(unit.bucket, self._static(unit), only=[gpu])

        found = []
        for wave in range(max((w for _, _, w in placed), default=-1) + 1):
            items = [p for p in placed if p[2] == wave]
            with ThreadPoolExecutor(len(items)) as ex:
                found += list(zip([p[0] for p in items], ex.map(record, items)))
        order = {u.name: i for i, u in enumerate(units)}
        queued = 0
        for unit, jobs in sorted(found, key=lambda pair: order[pair[0].name]):
            futures = self.pools[unit.op].submit(jobs, self._static(unit))
            queued += sum(len(f) for f in futures.values())
        return queued

    @staticmethod
    def _static(unit: ScreenUnit) -> list[str]:
        return unit.configs if isinstance(unit.configs, list) else []

    def run(self, units: list[ScreenUnit]) -> dict[str, UnitResult]:
        """Screen every unit (see the module docstring); returns what each gave, by name."""
        with self._cond:
            self._pending = list(units)
        with ThreadPoolExecutor(len(self.gpus)) as ex:
            list(ex.map(self._gpu, self.gpus))
        return self.done

    def _take(self) -> ScreenUnit | None:
        with self._cond:
            while self._pending:
                if self.deadline is not None and time.time() >= self.deadline:
                    return None
                for unit in self._pending:
                    if unit.after is None or unit.after in self.done or not self._alive(unit.after):
                        self._pending.remove(unit)
                        self._running.add(unit.name)
                        return unit
                self._cond.wait(timeout=1.0)
            return None

    def _alive(self, name: str) -> bool:
        """Whether the unit `name` may still finish (running, or waiting its turn)."""
        return name in self._running or any(u.name == name for u in self._pending)

    def _gpu(self, gpu: str | None) -> None:
        while (unit := self._take()) is not None:
            start = time.time() - self.started
            if callable(unit.configs):
                before = self.done.get(unit.after)
                configs = unit.configs(before.results if before else [])
            else:
                configs = unit.configs
            report = (lambda r, name=unit.name: self.on_result(name, r)) if self.on_result else None
            if configs:
                try:
                    results, stats = self.pools[unit.op].screen(unit.bucket, configs, deadline=self.deadline,
                                                                on_result=report, only=[gpu])
                except Exception as exc:  # noqa: BLE001 - one unit's failure must not cost the others theirs
                    self.echo(f"{unit.name} on GPU {gpu}: screening failed: {type(exc).__name__}: {exc}"[:300])
                    results, stats = [], ScreenStats.of(unit.bucket, configs, [], gpus=[str(gpu)], wall_s=0.0,
                                                        notes=[f"{type(exc).__name__}: {exc}"[:300]])
            else:  # nothing left to screen (an earlier run's): no worker prepares the bucket
                results, stats = [], ScreenStats.of(unit.bucket, [], [], gpus=[], wall_s=0.0)
            with self._cond:
                self._running.discard(unit.name)
                self.done[unit.name] = UnitResult(unit, configs, results, stats, gpu, start,
                                                  time.time() - self.started)
                self._cond.notify_all()
            if self.on_unit:
                self.on_unit(self.done[unit.name])
            self.echo(f"{unit.name} on GPU {gpu}: screened {stats.screened} of {len(configs)} ({stats.timed} timed) "
                      f"in {stats.wall_s:.0f} s; best {stats.best or '-'} {_us(stats.best_us)}")


def _us(value: float | None) -> str:
    return f"{value:.1f} us" if value is not None else ""
