"""The tuners' results caches: every (batch size, config) measurement, keyed by what makes it valid elsewhere.

A strict measurement holds on the same GPU model, Triton version, kernel source (hash of the kernel's and its
launchers' files), shape and dtype, and against the same baseline config (SGLang's pick, which its config
files set). One JSON line per measurement in `<cache>/triton-tune/<kernel>.jsonl`; a later run reuses what it
finds there instead of evaluating the config again. Screening results (a time, not a ratio: no baseline in
the key) go to `<kernel>-screen.jsonl` the same way (`ScreenCache`).
"""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from astra_sglang.paths import cache_dir
from astra_sglang.triton.screen_records import Screened


class CacheKey(BaseModel):
    gpu: str
    triton: str
    source_hash: str
    shape: tuple[int, ...]
    dtype: str
    baseline: str
    """The code of the config SGLang picks at this shape (the speedup is against it)."""


class Measurement(BaseModel):
    config: str
    """MoeConfig code."""
    ok: bool
    """Passed every check of the evaluation it was timed in."""
    speedup: float | None = None
    """SGLang's pick's time over this config's, interleaved in one process (> 1: the config is faster)."""
    candidate_us: float | None = None
    baseline_us: float | None = None
    reason: str = ""
    run: str = ""
    """The tuning run (and evaluation) that measured it."""


class Entry(BaseModel):
    key: CacheKey
    measurement: Measurement


class ScreenKey(BaseModel):
    gpu: str
    triton: str
    source_hash: str
    shape: tuple[int, ...]
    dtype: str


class ScreenEntry(BaseModel):
    key: ScreenKey
    measurement: Screened


class _Jsonl:
    entry: type[BaseModel] = Entry

    def __init__(self, name: str, root: Path | None = None):
        self.path = Path(root or cache_dir() / "triton-tune") / f"{name}.jsonl"

    def lookup(self, key) -> dict:
        """config code -> its latest measurement under `key`."""
        found: dict = {}
        if not self.path.is_file():
            return found
        for line in self.path.read_text().splitlines():
            try:
                entry = self.entry.model_validate_json(line)
            except (ValidationError, ValueError):
                continue  # a line cut short by a killed run
            if entry.key == key:
                found[entry.measurement.config] = entry.measurement
        return found

    def add(self, key, measurement) -> None:
        self.add_many(key, [measurement])

    def add_many(self, key, measurements) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # two runs may share the file (host_split's bar01 and bar): appended lines stay whole, as the text layer
        # hands the buffer on at write boundaries (tests/screening/test_bucket.py writes from two processes at once)
        with self.path.open("a") as fh:
            for m in measurements:
                fh.write(json.dumps(self.entry(key=key, measurement=m).model_dump(mode="json")) + "\n")


class TuneCache(_Jsonl):
    """Strict measurements (speedups against SGLang's pick)."""

    def __init__(self, kernel: str, root: Path | None = None):
        super().__init__(kernel, root)


class ScreenCache(_Jsonl):
    """Screening results: a config's time at a shape; only finished ones (timed, cut or failed for a reason of
    its own) are kept, not those a budget or a lost worker left."""

    entry = ScreenEntry

    def __init__(self, kernel: str, root: Path | None = None):
        super().__init__(f"{kernel}-screen", root)
