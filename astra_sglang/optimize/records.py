"""Typed records passed between the agent stages, the run log (rounds.jsonl) and the CLI.

Configs are pydantic models with one docstring per field: `optimize --help` and the run's config.json
say the same thing.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from astra_sglang.harness.records import EvalResult

Shape = tuple[int, ...]


Role = Literal["planner", "coder", "profiler", "tester", "reflector", "summarizer"]
"""The agents' roles, each of which may have a model (and a reasoning effort) of its own."""
Effort = Literal["minimal", "low", "medium", "high"]


class RoleModel(BaseModel):
    """One role's model, where it differs from the run's (every field left out: the run's value)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    model: str | None = None
    """Model name sent to the endpoint for this role."""
    reasoning_effort: Effort | None = None
    """`reasoning_effort` sent with this role's requests (reasoning models)."""
    base_url: str | None = None
    """Another endpoint for this role (its API key: the run's)."""
    temperature: float | None = None
    """Sampling temperature of this role's requests."""


class LLMConfig(BaseModel):
    """How to reach an OpenAI-compatible chat endpoint, and how much the run may spend on it."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    model: str = "o4-mini"
    """Model name sent to the endpoint (the paper used o4-mini)."""
    base_url: str | None = None
    """Endpoint URL, e.g. http://localhost:8000/v1; None = OPENAI_BASE_URL or the OpenAI API."""
    api_key: str | None = Field(default=None, exclude=True)
    """API key; None = OPENAI_API_KEY. Never written to the run directory."""
    timeout_s: float = 300.0
    """Per-request timeout; a timed-out request is retried."""
    max_retries: int = 5
    """Retries after a rate limit (429), a timeout, a connection error or a 5xx answer."""
    backoff_s: float = 2.0
    """First retry delay; doubles on every retry (a server's Retry-After wins when longer)."""
    max_backoff_s: float = 60.0
    """Upper bound of one retry delay."""
    temperature: float | None = None
    """Sampling temperature; None = the endpoint's default (reasoning models accept no other)."""
    max_completion_tokens: int | None = 32768
    """Per-request cap on generated tokens, sent as `max_completion_tokens` (as `max_tokens` where the endpoint
    refuses that name; lowered where the request would not fit the model's context); None = the endpoint's
    default (completion endpoints often default to 16 tokens)."""
    api: Literal["auto", "chat", "completions"] = "auto"
    """auto: chat completions, switching to /v1/completions with our own prompt format when the server has
    no chat template (e.g. SGLang serving a model with a plain tokenizer)."""
    system_role: bool = True
    """Send the system prompt as a system message; False (or a server refusing the role) folds it into the
    first user message."""
    budget_usd: float | None = None
    """Stop the run cleanly once this much has been spent (estimated from the price table)."""
    max_tokens: int | None = None
    """Stop the run cleanly once this many prompt + completion tokens have been used."""
    prices: dict[str, tuple[float, float] | tuple[float, float, float]] = Field(default_factory=dict)
    """Extra or overriding prices, USD per 1M tokens: model -> (prompt, completion) or (prompt, cached prompt,
    completion). With `budget_usd`, every model the run uses must have a price (listed or given here)."""
    reasoning_effort: Effort | None = None
    """`reasoning_effort` sent with every request (reasoning models); None = the endpoint's default."""
    roles: dict[Role, RoleModel] = Field(default_factory=dict)
    """Per-role models: e.g. {"planner": {"model": "o3", "reasoning_effort": "high"}, "coder": {"model":
    "gpt-5-mini"}}; a role left out uses `model`. All roles share the run's budget."""

    def for_role(self, role: Role) -> "LLMConfig":
        """This config as one role sees it (its own model, effort, endpoint and temperature where set)."""
        own = self.roles.get(role)
        if own is None:
            return self
        update = {k: v for k, v in own.model_dump().items() if v is not None}
        return self.model_copy(update=update)

    def models(self) -> list[str]:
        """Every model name the run may call."""
        return list(dict.fromkeys([self.model, *(r.model for r in self.roles.values() if r.model)]))


class RunConfig(BaseModel):
    """What one `optimize` run does; saved as RUN_DIR/config.json so `--resume` continues the same run."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    kernel: str
    """Kernel spec name (extract/<kernel>.toml)."""
    start_source: str = ""
    """The kernel the run starts from (S0); copied to RUN_DIR/candidates/r00.cu."""
    baseline: str = ""
    """What speedups are measured against: a .cu file or py:MODULE:FUNCTION (e.g. SGLang's own op);
    empty = the start kernel S0, as in the paper."""
    from_nothing: bool = False
    """S0 is a skeleton that declines every shape (an onboarded op with no kernel): the original the run measures
    and the agents see timed is `baseline` (SGLang's op), and the coder writes the kernel from the spec."""
    rounds: int = 5
    """Optimization rounds R (the paper used 5)."""
    shapes: str = "paper"
    """Shape set the agents optimize on (a named set such as quick or paper, '+'-joined, or 16x4096,...)."""
    final_shapes: str = "gate"
    """Extra shapes of the final evaluation, never shown to the agents; the winner must pass them all."""
    dtypes: list[str] | None = None
    """Dtypes to check and time; None = every dtype of the spec."""
    single_agent: bool = False
    """One LLM plays every role in one prompt per round (the paper's Table 3 ablation)."""
    compile_only: bool = False
    """Build candidates only (no GPU): no correctness or timing, so no winner."""
    parse_retries: int = 1
    """How often a malformed answer of the testing, planning or profiling agent is fed back before its step
    gives up (a candidate's malformed or unsafe answer uses one of its `repairs`)."""
    max_test_shapes: int = 8
    """Most extra shapes the TestingAgent may add."""
    max_test_bytes: int = 2 << 30
    """Largest tensor footprint (bytes) of an agent-proposed shape."""
    trials: int = 3
    """Correctness trials per shape; the TestingAgent may raise it, never lower it."""
    llm_profile_summary: bool = True
    """Let the ProfilingAgent's LLM condense the rule-based profile facts (multi-agent mode)."""
    population: int = Field(default=4, ge=1)
    """Candidates a planner call leads to, written in parallel; 1 (with plans=1, repairs=0, speed_turns=0,
    islands=1, reflect=False) is the paper's loop."""
    plans: int = Field(default=2, ge=1)
    """Distinct plans per planner call; each is coded population/plans times (`n` samples in one request)."""
    repairs: int = Field(default=2, ge=0)
    """How often a failed candidate is sent back to its coder with the build log or the mismatching shapes."""
    speed_turns: int = Field(default=2, ge=0)
    """How often a correct candidate that is slower than its parent, or far from the floor, is sent back to its
    coder with its per-shape timings and metrics (a lineage does not end at its first correct kernel)."""
    far_from_floor: float = 1.3
    """A correct candidate whose time is above this multiple of the floor at some shape is far from it."""
    islands: int = Field(default=2, ge=1)
    """Sub-populations: each planner call works on one island's best kernels (round robin), so one early
    winner does not narrow every lineage."""
    migrate_every: int = Field(default=4, ge=1)
    """Every this many planner calls, the other islands' best kernel is offered as a parent too."""
    inflight: int | None = None
    """Most candidates in flight at once; None = as many as keep the GPUs busy at the model's measured latency
    (Little's law over the measured LLM and evaluation times), at most 32 a GPU."""
    plateau: int = Field(default=6, ge=0)
    """Stop once this many planner calls in a row finished without improving the best by `plateau_gain`
    (0 = never)."""
    plateau_gain: float = 0.01
    """The relative gain in geomean speedup that counts as an improvement."""
    max_rounds: int | None = None
    """The adaptive budget's ceiling: a planner call that finds a new best late in the run grants more calls,
    up to this many (None = 2 x rounds)."""
    deadline_s: float | None = None
    """Stop the rounds cleanly this many seconds after they start (each resumed part of a run gets as many, or
    what `--resume` with `--config` gives it); the final evaluation still runs. None = no time limit."""
    reflect: bool = True
    """After each candidate lineage ends, the reflector writes what it teaches (the planner reads it)."""
    memory: bool = True
    """Read and write the lesson store across ops and runs (HOME/memory.jsonl): what worked on which kind of
    op and GPU, with the measured gain."""
    memory_chars: int = 12000
    """Past plans are shown whole up to about this many characters; older ones are summarized by the model."""
    ncu_share: float = 0.25
    """Nsight Compute budget: profile a correct candidate (before/after its parent) while profiling has taken
    less than this share of the evaluations' GPU time; a new best is always profiled."""
    ncu_shapes: int = Field(default=2, ge=1)
    """Shapes each profile covers: the one furthest from the floor and the slowest against the parent."""
    ncu_metrics: int = Field(default=32, ge=1)
    """Most Nsight Compute metrics a prompt carries, chosen by relevance to the bottleneck."""
    elites: int = 4
    """Size of the scored database's diverse best set: the parents a planner picks from."""
    roofline_margin: float = 0.05
    """Stop early once the best kernel is within this fraction of the floor (roofline or launch latency) at
    every shape."""
    finalists: int = 3
    """How many of the diverse best kernels get the final (held-out) evaluation."""
    tune_configs: int = 8
    """LLM + tuner: a finalist that exposes `// astra:knob` parameters gets this many configurations timed
    per shape (0 = off)."""
    dispatch: bool = True
    """Also evaluate a per-shape dispatch among the finalists that passed and the original (declined shapes)."""
    min_speedup: float = 1.0
    """A winner's final geomean speedup must exceed this."""
    timeout_s: float = 600.0
    """Per-evaluation timeout handed to the harness."""
    arch: str | None = None
    """GPU architecture for builds (e.g. sm_90); None = the current GPU's."""
    llm: LLMConfig = Field(default_factory=LLMConfig)
    """The model endpoint and the run's spending limits."""


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Of the prompt tokens, those the endpoint served from its prompt cache (priced at the cached rate)."""
    cost_usd: float = 0.0
    estimated_tokens: int = 0
    """Of the tokens, those estimated from characters (the server sent no usage)."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(prompt_tokens=self.prompt_tokens + other.prompt_tokens,
                     completion_tokens=self.completion_tokens + other.completion_tokens,
                     cached_tokens=self.cached_tokens + other.cached_tokens,
                     cost_usd=self.cost_usd + other.cost_usd,
                     estimated_tokens=self.estimated_tokens + other.estimated_tokens)


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class Reply(BaseModel):
    """One model answer and what it cost."""

    content: str
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    finish_reason: str = ""


class Transcript(BaseModel):
    """Everything one agent step said and heard (RUN_DIR/transcripts/rNN-<role>[-<key>].json)."""

    round: int
    role: str
    key: str = ""
    messages: list[Message] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    errors: list[str] = Field(default_factory=list)
    """Parse / safety errors fed back to the model."""


class TestPlan(BaseModel):
    """The TestingAgent's additions to the test suite T: only ever more shapes and trials."""

    __test__ = False  # not a pytest class

    shapes: list[Shape] = Field(default_factory=list)
    trials: int = 3
    rationale: str = ""
    rejected: list[str] = Field(default_factory=list)
    """Proposals dropped by validation, with the reason."""


class ProfileSummary(BaseModel):
    facts: list[str] = Field(default_factory=list)
    """Rule-based findings (always present)."""
    text: str = ""
    """The summary the planner reads (the LLM's, or the facts joined)."""


class PlanItem(BaseModel):
    parent: str = ""
    """The database entry the change starts from ("" = the best)."""
    text: str
    key: str = ""
    """The planner's own short name for the idea (repeats are detected by it and by the text)."""


class PlanSet(BaseModel):
    """The PlanningAgent's plans for one round (one planner call)."""

    plans: list[PlanItem]
    island: int = 0
    """The island the round works on."""
    migrants: list[str] = Field(default_factory=list)
    """Other islands' best kernels offered to this round as parents (migration)."""
    dropped: list[str] = Field(default_factory=list)
    """Plans left out because they repeat an earlier plan, with the earlier one named."""


class Drafts(BaseModel):
    """The coder's first answers to one plan (n samples of one prompt)."""

    answers: list[str]


class CodeResult(BaseModel):
    """One attempt of a candidate: a source file, or why there is none."""

    candidate: str | None = None
    """Path of the candidate source (RUN_DIR/candidates/rNN-cS-aA.cu)."""
    error: str = ""
    status: str = ""
    """parse | unsafe when there is no source."""
    parent: str = ""
    """The database entry the candidate started from."""
    plan_index: int | None = None
    """Which of its round's plans it implements (None in single-agent mode)."""
    island: int = 0
    """The island of its round."""
    plan: str = ""
    """Single-agent mode: the plan the same answer gave."""
    shapes: list[Shape] = Field(default_factory=list)
    """Single-agent mode: shapes the answer added to the test suite."""


class HistoryRow(BaseModel):
    """One candidate (or a round's summary) as the planner and the report see it."""

    round: int
    status: str
    """ok | build | crash | wrong | timeout | load | unsafe | parse | compiled (built; not run: compile-only or
    no GPU) | failed | stopped."""
    speedup: float | None = None
    detail: str = ""
    id: str = ""
    """The candidate (rNN-cS-aA); empty for a round's summary."""
    attempts: int = 1


class LogRecord(BaseModel):
    """One line of rounds.jsonl: a finished step of a round (resume replays these)."""

    model_config = ConfigDict(extra="ignore")
    round: int
    role: str
    """testing | eval | profile | plan | draft | code | cand | round | tune | final | stop."""
    key: str = ""
    """Distinguishes several records of one role in one round: the candidate and attempt (c1a0), the plan
    (p0), the finalist."""
    usage: Usage = Field(default_factory=Usage)
    candidate: str | None = None
    summary: str = ""
    """One line for humans: build / correctness / timing, or the stop reason."""
    payload: dict[str, Any] = Field(default_factory=dict)
    """The step's typed output (TestPlan, PlanSet, Drafts, CodeResult, EvalResult, HistoryRow, ProfileSummary)."""
    time: str = ""


class Winner(BaseModel):
    """The run's result: correct on every test incl. held-out shapes, best geomean speedup."""

    kernel: str
    source: str
    """Path of the winning kernel source."""
    round: int
    speedup: float
    """Geomean speedup over the final evaluation's shapes."""
    candidate: str = ""
    """Which candidate won (rNN-cS-aA, or a tuned / dispatch kernel built from finalists)."""
    final: EvalResult
    method: Literal["llm", "tuner", "llm+tuner"] = "llm"
    model: str = ""
    rounds: int = 0
    run_id: str = ""
    started_from: str = ""
    defines: dict[str, str] = Field(default_factory=dict)
    checks: list[str] = Field(default_factory=list)
    """What the winner passed before it may be written as a patch (compute-sanitizer tools), one line each."""


class RunOutcome(BaseModel):
    run_dir: str
    winner: Winner | None = None
    rounds_done: int = 0
    stop_reason: str = ""
    baseline_error: str = ""
    """Set when the start kernel could not be evaluated (then no LLM was asked and there is no winner)."""
    usage: Usage = Field(default_factory=Usage)
    report: str = ""
