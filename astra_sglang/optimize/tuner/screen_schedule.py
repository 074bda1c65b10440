"""Screening units over the GPUs of one host: every GPU takes the next unit of a plan and screens it alone.

A unit is one op's bucket and its configs (`ScreenUnit`): an op is a ScreenPool with a worker on every GPU (several
ops' pools share one compile pool), so units of different ops and buckets run side by side, one a GPU, and a GPU
that is done takes the first unit in the plan's order that is ready, never two at once (a timing shares its GPU
with nothing). A unit may wait for another (`after`: a source knob's variants are chosen from the plain configs
screened at their bucket, `configs` then a function of that unit's results); a GPU with nothing else to take
waits for it.

`prefetch` records every unit's compiles before the screening (an op's units on distinct GPUs at once, all ops
side by side, in waves) and queues them by when the GPUs will need them: the compile pool (compile_pool.py) takes
priority (wave, config index, rank), where a unit's rank is its place in the plan and its wave 1 + its place
among the prefetched units // the GPUs; a unit whose screen starts has its compiles raised to wave 0. So the CPU
cores compile, config by config, for the units on the GPUs now, then for the ones they take next, and a unit
started later never waits behind compiles of units screened after it. A unit with a `lead` is started only once
its first `lead` configs are compiled (a GPU whose units all wait for their compiles waits too, free to take
whichever is ready first); a unit's compiles are not recorded again when it starts. Units not taken by the
deadline are reported with nothing screened; one cut by it keeps what it screened.
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
POLL_S = 0.2
"""How often a GPU waiting for a unit's compiles looks again."""


@dataclass(frozen=True)
class ScreenUnit:
    name: str
    op: str
    """The pool (ScreenPool) that screens it."""
    bucket: Bucket
    configs: Configs
    """The configs in order; or, with `after`, a function of that unit's results giving them."""
    after: str | None = None
    lead: int = 0
    """Configs (the first ones) compiled before a GPU starts the unit (0: at once)."""


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
        self._rank: dict[str, int] = {}
        self.found: dict[str, dict] = {}
        """unit -> config -> its compile jobs, as `prefetch` recorded them."""
        self._futures: dict[str, dict[str, list]] = {}
        self.queued: dict[str, tuple[int, int]] = {}
        """unit -> (its specializations, those no unit before it in the plan had): what batch sizes share."""
        self.done: dict[str, UnitResult] = {}

    def prefetch(self, units: list[ScreenUnit]) -> int:
        """Record the compiles of `units` (those with configs given; see the module docstring) and queue them;
        returns the distinct specializations queued."""
        plain = [u for u in units if isinstance(u.configs, list) and u.configs]
        self._rank = {u.name: i for i, u in enumerate(units)}
        slots: dict[str, int] = {}
        placed = []
        for unit in plain:
            i = slots.get(unit.op, 0)
            slots[unit.op] = i + 1
            placed.append((unit, self.gpus[i % len(self.gpus)], i // len(self.gpus)))

        def record(item) -> dict:
            unit, gpu, _ = item
            return self.pools[unit.op].record(unit.bucket, unit.configs, only=[gpu])

        for wave in range(max((w for _, _, w in placed), default=-1) + 1):
            items = [p for p in placed if p[2] == wave]
            with ThreadPoolExecutor(len(items)) as ex:
                for (unit, _, _), jobs in zip(items, ex.map(record, items)):
                    self.found[unit.name] = jobs
        seen: set[int] = set()
        for i, unit in enumerate(plain):
            futures = self.pools[unit.op].submit(self.found[unit.name], unit.configs,
                                                 (1 + i // len(self.gpus), self._rank[unit.name]))
            self._futures[unit.name] = futures
            distinct = {id(f): f for fs in futures.values() for f in fs}
            self.queued[unit.name] = (len(distinct), len(distinct.keys() - seen))
            seen |= distinct.keys()
        return len(seen)

    def run(self, units: list[ScreenUnit]) -> dict[str, UnitResult]:
        """Screen every unit (see the module docstring); returns what each gave, by name."""
        with self._cond:
            self._pending = list(units)
            self._rank = {u.name: i for i, u in enumerate(units)}
        with ThreadPoolExecutor(len(self.gpus)) as ex:
            list(ex.map(self._gpu, self.gpus))
        return self.done

    def _take(self) -> ScreenUnit | None:
        with self._cond:
            while self._pending:
                if self.deadline is not None and time.time() >= self.deadline:
                    return None
                for unit in self._pending:
                    if (unit.after is None or unit.after in self.done or not self._alive(unit.after)) \
                            and self._ready(unit):
                        self._pending.remove(unit)
                        self._running.add(unit.name)
                        return unit
                self._cond.wait(timeout=POLL_S)  # a unit's compiles coming in do not notify: look again
            return None

    def _ready(self, unit: ScreenUnit) -> bool:
        """Its first `lead` configs are compiled (or failed, or were cancelled): nothing known of it counts as so."""
        futures = self._futures.get(unit.name)
        if not futures or unit.lead <= 0 or not isinstance(unit.configs, list):
            return True
        return all(f.done() for c in unit.configs[:unit.lead] for f in futures.get(c, []))

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
                                                                on_result=report, only=[gpu],
                                                                found=self.found.get(unit.name),
                                                                priority=(0, self._rank.get(unit.name, 0)))
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
