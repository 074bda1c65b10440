"""The LLM side of `astra-sglang optimize`: Astra's agents (testing, profiling, planning, coding) in a
population loop over a scored database of kernels, with a safety gate in front of every build.

- protocols.py: Model / Evaluator / Pool / Profiler, the things the loop talks to
- ../records.py: configs and the typed records between stages (shared with the tuner)
- llm.py, meter.py: the OpenAI-compatible client (protocol fallbacks, retries) and what calls cost
- scripted.py, replay.py: deterministic models (scripted answers; template-generated kernels)
- parse.py: answer parsing (the static check of LLM code is the evaluator's: harness/safety.py)
- prompts.py, roles.py: jinja2 prompts (harness_templates/prompts) and the roles
- database.py, bottleneck.py, context.py: the scored database, the NCU bottleneck, what a round reads
- steps.py, lineage.py, loop.py, final.py: memoized steps, one candidate's repairs, the rounds, the winner
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
