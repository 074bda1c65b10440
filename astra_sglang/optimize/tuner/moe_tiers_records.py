"""What a fused MoE tiers run (moe_tiers.py) keeps in its output folder, written as it goes, and read back by a
resumed run.

- `screen/<shape>@<tokens>[+knob].jsonl`: every config screened in a unit (`Screened`), appended as its result
  comes: a run cut at any moment keeps every config it screened.
- `units.jsonl`: a `UnitRow` per unit when it ends (screened of its configs, whether it covered all it was given,
  its specializations and how many no unit before it had).
- `specializations.jsonl`: per unit, the compile jobs of one config every unit of its shape has (what its
  kernels specialize on at that batch size, side by side with the other batch sizes').
- `verdicts.jsonl`: a `VerdictRow` per batch size the strict tier judged, written once a shape's final evaluation
  is in.
A resumed run (`adopt`: the earlier folder's files copied into the new one first) takes what is there: a batch size
whose configs are all screened is not screened again, a judged one not judged again; a later row of a config
replaces an earlier one (SGLang's pick, screened again as each run's bar).
"""
from __future__ import annotations

import threading
from pathlib import Path

from pydantic import BaseModel

from astra_sglang.triton.screen_records import CompileJob, Screened

SCREEN_DIR, UNITS, VERDICTS, SPECIALIZATIONS = "screen", "units.jsonl", "verdicts.jsonl", "specializations.jsonl"


class UnitRow(BaseModel):
    name: str
    shape: str
    tokens: int
    knob: bool
    configs: int
    """Configs the unit was given (its batch size's space less what earlier runs screened)."""
    screened: int
    timed: int
    wall_s: float
    gpu: str | None
    complete: bool
    """Every config given was screened (none left by the deadline)."""
    best: str | None = None
    best_us: float | None = None
    start_s: float | None = None
    """When its screen started, from the schedule's start."""
    specializations: int | None = None
    """Distinct compiles its configs need (None: not recorded ahead, a knob unit)."""
    new_specializations: int | None = None
    """Of those, the ones no unit before it in the plan needed (the rest it shares)."""


class SpecializationRow(BaseModel):
    unit: str
    config: str
    jobs: list[CompileJob]


class VerdictRow(BaseModel):
    shape: str
    tokens: int
    pick: str
    pick_source: str
    space: int
    """SGLang's tuning space at this batch size (the configs that cannot fit in shared memory included)."""
    screened: int
    """Configs screened here, this run's and earlier runs' (the knob's variants not counted)."""
    knob_screened: int = 0
    cut: int = 0
    """Buildable configs of the order the deadline left unscreened when the strict tier judged it (0: whole)."""
    screen_best: str | None = None
    screen_best_us: float | None = None
    screen_pick_us: float | None = None
    finalists: list[str] = []
    verdict: str
    """tuned, sglang-best, no-valid-config, not-measured (bucket tuner's verdicts)."""
    chosen: str
    final_speedup: float | None = None
    interval: tuple[float, float] | None = None
    """The final evaluation's speedup from its p10/p90 times: (pick p10 / chosen p90, pick p90 / chosen p10)."""
    note: str = ""


def unit_name(shape: str, tokens: int, knob: bool = False) -> str:
    return f"{shape}@{tokens}{'+knob' if knob else ''}"


class Records:
    """An output folder's records (see the module docstring); appends are thread-safe (a unit's lane per GPU)."""

    def __init__(self, out: Path):
        self.out = Path(out)
        (self.out / SCREEN_DIR).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def adopt(self, earlier: Path) -> None:
        """Copy an earlier run's records into this folder (a resumed run keeps its whole history in one place)."""
        earlier = Path(earlier)
        if earlier.resolve() == self.out.resolve():
            return
        for f in sorted((earlier / SCREEN_DIR).glob("*.jsonl")):
            self._append(self.out / SCREEN_DIR / f.name, f.read_text())
        for name in (UNITS, VERDICTS):
            if (earlier / name).is_file():
                self._append(self.out / name, (earlier / name).read_text())

    def _append(self, path: Path, text: str) -> None:
        with self._lock, path.open("a") as fh:
            fh.write(text)

    def screened(self, unit: str, row: Screened) -> None:
        self._append(self.out / SCREEN_DIR / f"{unit}.jsonl", row.model_dump_json() + "\n")

    def unit(self, row: UnitRow) -> None:
        self._append(self.out / UNITS, row.model_dump_json() + "\n")

    def specializations(self, found: dict[str, dict[str, list[CompileJob]]]) -> None:
        """Per unit (`found`: unit -> config -> its jobs), the jobs of the first config every unit of its shape
        recorded."""
        shapes: dict[str, list[str]] = {}
        for unit in found:
            shapes.setdefault(unit.partition("@")[0], []).append(unit)
        lines = []
        for units in shapes.values():
            config = next((c for c in found[units[0]] if all(found[u].get(c) for u in units)), None)
            lines += [SpecializationRow(unit=u, config=config, jobs=found[u][config]).model_dump_json() + "\n"
                      for u in units if config is not None]
        if lines:
            self._append(self.out / SPECIALIZATIONS, "".join(lines))

    def verdict(self, row: VerdictRow) -> None:
        self._append(self.out / VERDICTS, row.model_dump_json() + "\n")

    def known(self, unit: str) -> dict[str, Screened]:
        """config -> its latest screened row in `unit` (unscreened rows left out: the deadline's, not the config's)."""
        path = self.out / SCREEN_DIR / f"{unit}.jsonl"
        rows = [Screened.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()] \
            if path.is_file() else []
        return {r.config: r for r in rows if r.stage != "unscreened"}

    def units(self) -> list[UnitRow]:
        return _rows(self.out / UNITS, UnitRow)

    def verdicts(self) -> dict[tuple[str, int], VerdictRow]:
        return {(v.shape, v.tokens): v for v in _rows(self.out / VERDICTS, VerdictRow)}


def _rows(path: Path, model):
    if not path.is_file():
        return []
    return [model.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]
