"""The LLM side of `astra-sglang optimize`: Astra's agents (testing, profiling, planning, coding) in the
paper's Algorithm-1 loop, with a safety gate in front of every build.

- protocols.py: Model / Evaluator / Profiler, the three things the loop talks to
- records.py: configs and the typed records between stages
- llm.py: OpenAI-compatible client (retries, usage, budgets) and ScriptedModel
- parse.py, safety.py: answer parsing and the static check of LLM code
- prompts.py, roles.py: jinja2 prompts (harness_templates/prompts) and the roles
- loop.py, journal.py, winner.py, report.py: the loop, its run directory, the winner, the report
- cli.py: the `optimize` click command
"""
from astra_sglang.agents.llm import BudgetExceeded, LLMError, OpenAIModel
from astra_sglang.agents.scripted import ScriptedModel
from astra_sglang.agents.loop import Optimizer, resume, run
from astra_sglang.agents.records import LLMConfig, RunConfig, RunOutcome, Winner
from astra_sglang.agents.winner import write_patch

__all__ = ["BudgetExceeded", "LLMConfig", "LLMError", "OpenAIModel", "Optimizer", "RunConfig", "RunOutcome",
           "ScriptedModel", "Winner", "resume", "run", "write_patch"]
