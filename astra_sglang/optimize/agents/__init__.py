"""The LLM side of `astra-sglang optimize`: Astra's agents (testing, profiling, planning, coding, reflecting) in
an asynchronous population over a scored database of kernels, with a safety gate in front of every build.

- protocols.py: Model / Evaluator / Pool / Profiler, the things the loop talks to
- ../records.py: configs and the typed records between stages (shared with the tuner)
- llm.py, meter.py, models.py: the OpenAI-compatible client (protocol fallbacks, retries), what calls cost
  (one budget, a hard stop), a model per role
- scripted.py, replay.py: deterministic models (scripted answers; template-generated kernels)
- parse.py: answer parsing (the static check of LLM code is the evaluator's: harness/safety.py)
- prompts.py, roles.py, feedback.py, reflect.py: jinja2 prompts (harness_templates/prompts), the roles, what a
  candidate is told after an attempt (repair, speed turn), the reflector
- database.py, bottleneck.py, context.py: the scored database, the NCU bottleneck, what the planner and the
  coder read
- memory.py, store.py: the run's plans and outcomes (repeats, digests); lessons across ops and runs
- profiling.py, profiles.py, ncu_deep.py: the metrics that matter, which candidates ncu looks at, ncu itself
- steps.py, lineage.py, loop.py, population.py, final.py: memoized steps, one candidate's turns, a round, the
  rounds without a barrier, the winner
- journal.py, report.py: the run directory, the report (judging and writing the winner: ../winner.py)

One op's run, the job and the click command are optimize/run.py, optimize/job.py and cli/optimize.py.
"""
from astra_sglang.optimize.agents.llm import BudgetExceeded, LLMError, OpenAIModel
from astra_sglang.optimize.agents.loop import Optimizer, resume, run
from astra_sglang.optimize.agents.scripted import ScriptedModel
from astra_sglang.optimize.records import LLMConfig, RunConfig, RunOutcome, Winner
from astra_sglang.optimize.winner import write_patch

__all__ = ["BudgetExceeded", "LLMConfig", "LLMError", "OpenAIModel", "Optimizer", "RunConfig", "RunOutcome",
           "ScriptedModel", "Winner", "resume", "run", "write_patch"]
