"""The run directory: config.json, rounds.jsonl (the log resume replays), transcripts/, candidates/.

rounds.jsonl gets one line per finished step, appended with a single write + fsync; a line torn by a
kill is dropped when the log is read back, so a resumed run redoes at most the step that was cut off.
Other files are written to a temporary name and renamed into place.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import threading
from pathlib import Path

from pydantic import ValidationError

from astra_sglang.optimize.records import CodeResult, LogRecord, RunConfig, Shape, TestPlan, Transcript, Usage
from astra_sglang.specs.records import KernelSpec
from astra_sglang.specs.registry import resolve_shapes

LOG = "rounds.jsonl"
CONFIG = "config.json"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


class RunLog:
    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        for sub in ("transcripts", "candidates"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.path = self.dir / LOG
        self.records: list[LogRecord] = self._read()
        self._lock = threading.Lock()  # the candidates of a round log from threads of their own

    def _read(self) -> list[LogRecord]:
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):  # a write cut off by a kill: drop the torn tail
            raw = raw[: raw.rfind(b"\n") + 1]
            with open(self.path, "r+b") as f:
                f.truncate(len(raw))
        records = []
        for line in raw.decode(errors="replace").splitlines():
            try:
                records.append(LogRecord.model_validate_json(line))
            except (ValidationError, ValueError):
                continue
        return records

    def append(self, record: LogRecord) -> LogRecord:
        record = record.model_copy(update={"time": record.time or now()})
        line = (record.model_dump_json() + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            self.records.append(record)
        return record

    def find(self, round: int, role: str, key: str = "") -> LogRecord | None:
        for record in reversed(list(self.records)):
            if record.round == round and record.role == role and record.key == key:
                return record
        return None

    def of_role(self, role: str) -> list[LogRecord]:
        return [r for r in list(self.records) if r.role == role]

    def spent(self) -> Usage:
        total = Usage()
        for record in list(self.records):
            total = total + record.usage
        return total

    def save_transcript(self, transcript: Transcript) -> Path:
        stem = f"r{transcript.round:02d}" if transcript.round >= 0 else "final"
        name = f"{stem}-{transcript.role}{f'-{transcript.key}' if transcript.key else ''}.json"
        return write_atomic(self.dir / "transcripts" / name, transcript.model_dump_json(indent=1))

    def load_transcript(self, round: int, role: str, key: str = "") -> Transcript | None:
        stem = f"r{round:02d}" if round >= 0 else "final"
        path = self.dir / "transcripts" / f"{stem}-{role}{f'-{key}' if key else ''}.json"
        return Transcript.model_validate_json(path.read_text()) if path.is_file() else None

    def candidate_path(self, round: int, slot: int = 0, attempt: int = 0) -> Path:
        """candidates/r00.cu is the start kernel; rNN-cS-aA.cu is slot S's attempt A in round NN."""
        return self.dir / "candidates" / (f"{candidate_id(round, slot, attempt)}.cu")

    def save_candidate(self, round: int, source: str, slot: int = 0, attempt: int = 0) -> Path:
        return write_atomic(self.candidate_path(round, slot, attempt), source)

    def save_config(self, config: RunConfig) -> None:
        write_atomic(self.dir / CONFIG, json.dumps(config.model_dump(mode="json"), indent=1) + "\n")

    @staticmethod
    def load_config(run_dir: str | Path) -> RunConfig:
        return RunConfig.model_validate_json((Path(run_dir) / CONFIG).read_text())


def candidate_id(round: int, slot: int = 0, attempt: int = 0) -> str:
    return "r00" if round == 0 else f"r{round:02d}-c{slot}-a{attempt}"


def step_key(id: str) -> str:
    """The log key of a candidate's steps: r03-c1-a2 -> c1a2."""
    _, slot, attempt = id.split("-")
    return f"{slot}{attempt}"


def test_suite(spec: KernelSpec, config: RunConfig, log: RunLog) -> tuple[list[Shape], int]:
    """The test suite T so far: the chosen shape set plus every shape the agents added, and the trials."""
    shapes = resolve_shapes(spec, config.shapes)
    trials = config.trials
    for rec in log.records:
        if rec.role == "testing":
            plan = TestPlan.model_validate(rec.payload)
            shapes += [s for s in plan.shapes if s not in shapes]
            trials = max(trials, plan.trials)
        elif rec.role == "code":  # single-agent mode: an answer may add shapes
            shapes += [s for s in CodeResult.model_validate(rec.payload).shapes if s not in shapes]
    return shapes, trials


test_suite.__test__ = False  # not a pytest test
