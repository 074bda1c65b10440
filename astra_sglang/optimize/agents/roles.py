"""The four Astra roles (Testing, Profiling, Planning, Coding) and the single-agent ablation.

Each role renders its template, asks the model through `converse` and returns a typed record. The
TestingAgent can only add shapes / trials that pass the spec's constraints; the ProfilingAgent always
produces rule-based facts and optionally an LLM summary of them; the PlanningAgent plans several changes a
round, each on a parent from its island's best kernels, and repeats of earlier plans are left out; the
CodingAgent's candidates live in optimize/agents/lineage.py, the reflector in optimize/agents/reflect.py.
"""
from __future__ import annotations

from astra_sglang.harness.ncu import ProfileFacts
from astra_sglang.harness.records import EvalResult
from astra_sglang.harness.safety import RULES, ensure_safe
from astra_sglang.optimize.agents.context import CoderContext, RoundContext
from astra_sglang.optimize.agents.memory import PastPlan, find_repeat
from astra_sglang.optimize.agents.parse import ParseError, extract_code, extract_json, strip_code
from astra_sglang.optimize.agents.profiling import profile_facts
from astra_sglang.optimize.agents.prompts import abi_header, converse, device_digest, device_header, render
from astra_sglang.optimize.agents.protocols import Model
from astra_sglang.optimize.records import (Message, PlanItem, PlanSet, ProfileSummary, RunConfig, Shape,
                                           TestPlan, Transcript)
from astra_sglang.specs.records import KernelSpec


def validate_shapes(spec: KernelSpec, proposed: object, existing: list[Shape], config: RunConfig
                    ) -> tuple[list[Shape], list[str]]:
    """Keep proposed shapes that fit the spec (dims, constraints, size); say why the others were dropped."""
    kept: list[Shape] = []
    rejected: list[str] = []
    for item in proposed if isinstance(proposed, list) else [proposed]:
        try:
            shape = tuple(int(x) for x in item)
            if any(float(x) != int(x) for x in item):
                raise ValueError
        except (TypeError, ValueError):
            rejected.append(f"{item!r}: not a list of integers")
            continue
        if len(shape) != len(spec.dims):
            rejected.append(f"{list(shape)}: needs {len(spec.dims)} dims ({', '.join(spec.dims)})")
        elif min(shape) < 1 or not spec.supports(shape):
            rejected.append(f"{list(shape)}: violates the spec's constraints")
        elif max(spec.min_bytes(shape, d) for d in spec.dtypes) > config.max_test_bytes:
            rejected.append(f"{list(shape)}: larger than {config.max_test_bytes} bytes")
        elif shape in existing or shape in kept:
            rejected.append(f"{list(shape)}: already in the suite")
        elif len(kept) >= config.max_test_shapes:
            rejected.append(f"{list(shape)}: more than {config.max_test_shapes} extra shapes")
        else:
            kept.append(shape)
    return kept, rejected


class TestingAgent:
    __test__ = False  # not a pytest class

    def __init__(self, model: Model, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def propose(self, source: str, shapes: list[Shape], dtypes: list[str], transcript: Transcript) -> TestPlan:
        messages = render("testing.j2", spec=self.spec, dtypes=dtypes, shapes=shapes, source=source,
                          max_shapes=self.config.max_test_shapes, trials=self.config.trials,
                          max_bytes=self.config.max_test_bytes)

        def parse(text: str) -> TestPlan:
            data = extract_json(text, required=("shapes",))
            if not isinstance(data["shapes"], list):
                raise ParseError('"shapes" must be a list of shapes, each a list of integers')
            kept, rejected = validate_shapes(self.spec, data["shapes"], shapes, self.config)
            try:  # never fewer trials than the harness's default
                trials = min(max(int(data.get("trials", self.config.trials)), self.config.trials), 10)
            except (TypeError, ValueError):
                trials = self.config.trials
            return TestPlan(shapes=kept, trials=trials, rationale=str(data.get("rationale", ""))[:500],
                            rejected=rejected)

        return converse(self.model, messages, parse, self.config.parse_retries, transcript, tag="r00 testing")


class ProfilingAgent:
    def __init__(self, model: Model | None, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def summarize(self, round: int, result: EvalResult, facts: ProfileFacts | None, dtypes: list[str],
                  transcript: Transcript, kind: str = "unknown", written: bool = True) -> ProfileSummary:
        """The rule-based facts (with the ncu metrics that matter for `kind`), and where `written`, the model's
        reading of them."""
        found = profile_facts(result, facts, kind, self.config.ncu_metrics)
        summary = ProfileSummary(facts=found, text="\n".join(f"- {f}" for f in found))
        timed = any(s.candidate is not None for s in result.shapes)
        if self.model is None or not self.config.llm_profile_summary or not timed or not written:
            return summary
        messages = render("profiling_summary.j2", spec=self.spec, dtypes=dtypes, round=round, result=result,
                          facts=found, max_lines=8)

        def parse(text: str) -> str:
            text = strip_code(text)
            if not text:
                raise ParseError("the summary is empty: answer with a few plain-text bullet points")
            return text[:3000]

        llm_text = converse(self.model, messages, parse, self.config.parse_retries, transcript,
                            tag=f"r{round:02d} profiling")
        return summary.model_copy(update={"text": summary.text + "\n\nProfiler's reading:\n" + llm_text})


class PlanningAgent:
    """Plans a round: up to `plans` distinct changes, each on a parent from its island's elites. A plan that
    repeats an earlier one (the same key on the same parent, or nearly the same words) is left out; an answer of
    repeats only goes back to the planner with the earlier plans named."""

    def __init__(self, model: Model, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def _items(self, ctx: RoundContext, text: str) -> list[PlanItem]:
        try:
            data = extract_json(text, required=("plans",))
        except ParseError:
            prose = strip_code(text)
            if len(prose) < 10:
                raise
            return [PlanItem(parent=ctx.best.id, text=prose[:4000])]  # one plan in prose
        plans = []
        for item in (data["plans"] if isinstance(data["plans"], list) else [])[: ctx.plans_wanted]:
            text = str(item.get("plan", "")).strip() if isinstance(item, dict) else str(item).strip()
            parent = str(item.get("parent", "")) if isinstance(item, dict) else ""
            key = str(item.get("key", "")).strip()[:80] if isinstance(item, dict) else ""
            if len(text) >= 10:
                plans.append(PlanItem(parent=parent if parent in ctx.parents else ctx.best.id, text=text[:4000],
                                      key=key))
        if not plans:
            raise ParseError('"plans" must be a list of {"parent": ID, "key": "short-name", "plan": "numbered '
                             'changes"} objects')
        return plans

    def plan(self, ctx: RoundContext, transcript: Transcript, earlier: list[PastPlan]) -> PlanSet:
        def parse(text: str) -> PlanSet:
            kept, dropped = [], []
            for item in self._items(ctx, text):
                seen = find_repeat(item, earlier + kept_as_past(kept))
                if seen is None:
                    kept.append(item)
                else:
                    dropped.append(f"{item.key or item.text[:60]!r} on {item.parent} repeats round {seen.round} plan "
                                   f"{seen.index} on {seen.parent}")
            if not kept:
                raise ParseError("every plan repeats an earlier one (" + "; ".join(dropped) + "). Propose different "
                                 "changes: the earlier plans and what they measured are listed above.")
            return PlanSet(plans=kept, island=ctx.island, migrants=list(ctx.migrants), dropped=dropped)

        return converse(self.model, render("planning.j2", spec=self.spec, ctx=ctx), parse,
                        self.config.parse_retries, transcript, tag=f"r{ctx.round:02d} planning")


def kept_as_past(items: list[PlanItem]) -> list[PastPlan]:
    """Plans of the same answer, so that two of them cannot repeat each other either."""
    return [PastPlan(round=0, index=i, parent=x.parent, text=x.text, key=x.key) for i, x in enumerate(items)]


def parse_kernel(text: str) -> str:
    """The answer's kernel file, or ParseError / UnsafeCode (fed back to the model)."""
    source = extract_code(text)
    ensure_safe(source)
    return source


class CodingAgent:
    """Writes candidates for a plan (n samples of one prompt) and repairs them in their own conversation."""

    def __init__(self, model: Model, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def prompt(self, ctx: RoundContext, plan: PlanItem, coder: CoderContext) -> list[Message]:
        return render("coding.j2", spec=self.spec, std=ctx.std, dtypes=ctx.dtypes, gpu=ctx.gpu, round=ctx.round,
                      rounds=ctx.rounds, plan=plan.text, coder=coder, abi=abi_header(), device=device_digest(),
                      rules=RULES)

    def single_prompt(self, ctx: RoundContext) -> list[Message]:
        """Paper Table 3 ablation: one prompt plans, tests and codes."""
        return render("single_agent.j2", spec=self.spec, ctx=ctx, abi=abi_header(), device=device_header(),
                      rules=RULES, max_shapes=self.config.max_test_shapes)


def single_shapes(spec: KernelSpec, text: str, shapes: list[Shape], config: RunConfig) -> list[Shape]:
    """Single-agent mode: the shapes an answer adds to the test suite (an optional ```json block)."""
    try:
        proposed = extract_json(text, required=("shapes",))["shapes"]
    except ParseError:
        return []
    return validate_shapes(spec, proposed, list(shapes), config)[0]
