"""The run's step machinery, shared by every stage of the loop: each step is memoized in the run log (a
resumed run finds it there and redoes nothing), a budget or endpoint failure inside a step is logged with
what the step spent and stops the run, a prompt the model cannot take fails only its step. The scored
database, the models of the roles, the lesson store and the evaluation requests live here too: every
candidate uses them from its own thread.
"""
from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any, Callable

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import EvalRequest, EvalResult, KernelSource
from astra_sglang.optimize.agents.database import Database, Entry
from astra_sglang.optimize.agents.database import entry_of
from astra_sglang.optimize.agents.journal import RunLog, test_suite
from astra_sglang.optimize.agents.llm import BudgetExceeded, LLMError, RequestRejected
from astra_sglang.optimize.agents.models import Models
from astra_sglang.optimize.agents.prompts import StepFailed
from astra_sglang.optimize.agents.protocols import Evaluator, Model, Pool, Profiler
from astra_sglang.optimize.agents.store import LessonStore
from astra_sglang.optimize.pool.devices import GpuFacts
from astra_sglang.optimize.records import CodeResult, LogRecord, RunConfig, Shape, Transcript, Usage
from astra_sglang.specs.registry import get_spec


class Stopped(Exception):
    """The run is stopping (budget, dead endpoint): a candidate asks nothing more."""


class Steps:
    """What every stage of a run shares: config, pool, models, log, database, lesson store."""

    # The stages the Optimizer (optimize/agents/loop.py) adds; declared here so the modules of those stages
    # can name the run they belong to without importing the loop that imports them.
    profiling: Any
    """roles.ProfilingAgent: the rule-based facts and the written reading of a profile."""
    profiles: Any
    """profiles.Profiles: which candidates ncu looks at, and what the prompts read of it."""
    memory: Any
    """memory.Memory: the planner's view of the run's past plans."""
    lineages: Any
    """The executor lineages run in (the population's)."""
    active: int
    """Lineages in flight."""
    drafting: int
    """Rounds whose plans or drafts are still being written."""

    def __init__(self, config: RunConfig, run_dir: str | Path, pool: Pool | Evaluator, model: Model | Models | None,
                 profiler: Profiler | None = None, echo: Callable[[str], None] = lambda _: None):
        self.models = Models.of(model)
        """The model of each role (one model: every role's)."""
        self.model = self.models.default if self.models else None
        self.config, self.profiler, self.echo = config, profiler, echo
        self._own_pool = not hasattr(pool, "submit")  # a bare evaluator: one worker, no prebuild
        if self._own_pool:
            from astra_sglang.optimize.pool.pool import LocalPool

            pool = LocalPool(gpus=[], evaluator=pool)
        self.pool: Pool = pool
        self.spec = get_spec(config.kernel)
        self.dtypes = config.dtypes or list(self.spec.dtypes)
        self.log = RunLog(run_dir)
        self.log.save_config(config)
        self.baseline = self.log.candidate_path(0)
        if not self.baseline.exists():
            if not config.start_source or not Path(config.start_source).is_file():
                raise AstraError(f"start source not found: {config.start_source!r}")
            shutil.copyfile(config.start_source, self.baseline)
        if self.models is not None:
            self.models.meter.total = self.log.spent()
            self.models.meter.log_path = self.log.dir / "llm.log"
        self.store = LessonStore()
        self.db = Database()
        self.gpu = GpuFacts()
        self.stop = ""
        self._lock = threading.Lock()

    def step(self, round: int, role: str, fn: Callable[[Transcript], LogRecord], key: str = "") -> LogRecord:
        """Memoized step: the logged record if this step already finished, else run it and log it. A budget
        or endpoint stop inside it is logged with what the step spent, then stops the run."""
        done = self.log.find(round, role, key)
        if done is not None:
            return done
        transcript = Transcript(round=round, role=role, key=key)
        try:
            record = fn(transcript)
        except RequestRejected as exc:  # this prompt does not fit the model: this step fails, the run goes on
            transcript.errors.append(str(exc))
            self.log.save_transcript(transcript)
            raise StepFailed(str(exc), transcript) from exc
        except (BudgetExceeded, LLMError) as exc:
            if transcript.messages:
                self.log.save_transcript(transcript)
            self.halt(str(exc), transcript)
            raise Stopped(str(exc)) from exc
        except StepFailed as exc:
            exc.transcript = transcript
            raise
        if transcript.messages:
            self.log.save_transcript(transcript)
            record = record.model_copy(update={"usage": transcript.usage})
        return self.log.append(record.model_copy(update={"round": round, "role": role, "key": key}))

    def halt(self, reason: str, transcript: Transcript | None = None) -> None:
        with self._lock:
            first = not self.stop
            self.stop = self.stop or reason
        self.log.append(LogRecord(round=transcript.round if transcript else 0, role="stop", summary=reason[:300],
                                  usage=transcript.usage if transcript else Usage()))
        if first:
            self.echo(f"stopped: {reason}")

    def check_stop(self) -> None:
        if self.stop:
            raise Stopped(self.stop)

    def suite(self) -> tuple[list[Shape], int]:
        return test_suite(self.spec, self.config, self.log)

    def request(self, path: str | Path, label: str, shapes: list[Shape], trials: int,
                sandwich: str = "off") -> EvalRequest:
        return EvalRequest(kernel=self.spec.name, candidate=KernelSource(path=str(path), label=label),
                           baseline=KernelSource(path=self.config.baseline or str(self.baseline), label="baseline"),
                           shapes=shapes, dtypes=self.dtypes, compile_only=self.config.compile_only, trials=trials,
                           arch=self.config.arch, timeout_s=self.config.timeout_s, sandwich=sandwich)

    @staticmethod
    def trim(result: EvalResult) -> EvalResult:
        if result.build is not None and len(result.build.log) > 4000:
            build = result.build.model_copy(update={"log": result.build.log[-4000:]})
            return result.model_copy(update={"build": build})
        return result

    def enter(self, round: int, slot: int, attempt: int, code: CodeResult, result: EvalResult | None) -> Entry:
        entry = self.db.add(entry_of(round, slot, attempt, code, result))
        self.echo(f"{entry.id} {entry.status}" + (f" {entry.speedup:.3f}x" if entry.speedup else "")
                  + (f": {entry.detail[:160]}" if entry.detail else ""))
        return entry

    def _rebuild(self) -> None:
        """The database from the run log (a resumed run)."""
        for rec in self.log.of_role("code"):
            slot, attempt = (int(x) for x in rec.key[1:].split("a"))
            ev = self.log.find(rec.round, "eval", rec.key)
            self.db.add(entry_of(rec.round, slot, attempt, CodeResult.model_validate(rec.payload),
                                 EvalResult.model_validate(ev.payload) if ev else None))
