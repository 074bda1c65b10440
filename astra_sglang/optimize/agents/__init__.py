"""The LLM side of `astra-sglang optimize`: Astra's agents (testing, profiling, planning, coding) in a
population loop over a scored database of kernels, with a safety gate in front of every build.

- protocols.py: Model / Evaluator / Pool / Profiler, the things the loop talks to
- records.py: configs and the typed records between stages
- llm.py, meter.py: the OpenAI-compatible client (protocol fallbacks, retries) and what calls cost
- scripted.py, replay.py: deterministic models (scripted answers; template-generated kernels)
- parse.py, safety.py: answer parsing and the static check of LLM code
- prompts.py, roles.py: jinja2 prompts (harness_templates/prompts) and the roles
- database.py, bottleneck.py, context.py: the scored database, the NCU bottleneck, what a round reads
- steps.py, lineage.py, loop.py, final.py: memoized steps, one candidate's repairs, the rounds, the winner
- journal.py, winner.py, report.py: the run directory, judging and writing the winner, the report
- starts.py, op_run.py: the kernel a run starts from (the patch served for the op, the user folder's over the
  shipped one, for the tuner); one op's run (LLM loop, tuner or resume) and its winner's patch
- job.py, cli.py: several ops as one job, the `optimize` click command
"""
from astra_sglang.optimize.agents.llm import BudgetExceeded, LLMError, OpenAIModel
from astra_sglang.optimize.agents.loop import Optimizer, resume, run
from astra_sglang.optimize.agents.scripted import ScriptedModel
from astra_sglang.optimize.records import LLMConfig, RunConfig, RunOutcome, Winner
from astra_sglang.optimize.winner import write_patch

__all__ = ["BudgetExceeded", "LLMConfig", "LLMError", "OpenAIModel", "Optimizer", "RunConfig", "RunOutcome",
           "ScriptedModel", "Winner", "resume", "run", "write_patch"]
