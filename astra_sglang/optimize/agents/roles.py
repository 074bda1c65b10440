"""The four Astra roles (Testing, Profiling, Planning, Coding) and the single-agent ablation.

Each role renders its template, asks the model through `converse` and returns a typed record. The
TestingAgent can only add shapes / trials that pass the spec's constraints; the ProfilingAgent always
produces rule-based facts and optionally an LLM summary of them; the PlanningAgent plans several changes a
round, each on a parent from the database; the CodingAgent's candidates live in optimize/agents/lineage.py.
"""
from __future__ import annotations

from astra_sglang.harness.ncu import ProfileFacts
from astra_sglang.harness.records import EvalResult
from astra_sglang.harness.safety import RULES, ensure_safe
from astra_sglang.optimize.agents.context import RoundContext
from astra_sglang.optimize.agents.database import Entry
from astra_sglang.optimize.agents.parse import ParseError, extract_code, extract_json, strip_code
from astra_sglang.optimize.agents.prompts import abi_header, converse, device_header, render
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


def profile_facts(result: EvalResult, facts: ProfileFacts | None = None) -> list[str]:
    """Rule-based findings from one evaluation (no LLM): failures, roofline, latency, registers."""
    out: list[str] = []
    if result.stage != "done" or not result.ok:
        out.append(f"evaluation stopped at {result.stage}: {result.reason or 'failed'}")
    wrong = [s for s in result.shapes if s.correct is False]
    if wrong:
        out.append("incorrect on " + ", ".join(f"{'x'.join(map(str, s.shape))}/{s.dtype}"
                                               f"{f' ({s.reason})' if s.reason else ''}" for s in wrong[:6]))
    timed = [s for s in result.shapes if s.candidate is not None]
    if result.geomean_speedup:
        out.append(f"geomean speedup vs baseline {result.geomean_speedup:.3f}x over {len(timed)} timed cases")
    slower = [s for s in timed if s.speedup and s.speedup < 0.98]
    if slower:
        out.append("slower than the baseline on " + ", ".join(
            f"{'x'.join(map(str, s.shape))}/{s.dtype} ({s.speedup:.2f}x)" for s in slower[:6]))
    roof = [s for s in timed if s.pct_roofline is not None]
    if roof:
        low = sorted(roof, key=lambda s: s.pct_roofline)[:3]
        out.append("furthest from the memory roofline: " + ", ".join(
            f"{'x'.join(map(str, s.shape))}/{s.dtype} at {s.pct_roofline:.0f}%" for s in low))
        if all(s.pct_roofline >= 85 for s in roof):
            out.append("every timed shape is within 15% of the memory roofline: little headroom left")
    floor = result.empty_kernel_us
    latency = [s for s in timed if floor and s.candidate.median_us < 3 * floor]
    if latency:
        out.append(f"{len(latency)} case(s) take under 3x an empty kernel ({floor:.2f} us): launch/latency bound, "
                   "so fewer blocks, less setup and fewer dependent steps matter more than bandwidth")
    regs = (facts.registers if facts and facts.registers is not None else None) or (
        result.build.registers if result.build else None)
    spills = (facts.spill_bytes if facts and facts.spill_bytes is not None else None) or (
        result.build.spill_bytes if result.build else None)
    if regs is not None:
        out.append(f"{regs} registers per thread" + (" (high: limits occupancy)" if regs > 128 else ""))
    if spills:
        out.append(f"spills {spills} bytes to local memory")
    ncu = facts.ncu if facts else {}
    # The metrics a plan turns on first (bandwidth, occupancy, stalls), then the rest, 16 at most.
    key = [next((i for i, w in enumerate(NCU_FIRST) if w in name), len(NCU_FIRST)) for name in ncu]
    for _, name in sorted(zip(key, ncu))[:16]:
        out.append(f"ncu {name} = {ncu[name]:g}")
    return out or ["no measurements (compile-only run)"]


NCU_FIRST = ("profiled shape", "DRAM Throughput", "Memory Throughput", "Duration", "Achieved Occupancy",
             "Theoretical Occupancy", "Registers Per Thread", "Warp Cycles Per Issued", "Stall", "L2 Hit Rate")


class ProfilingAgent:
    def __init__(self, model: Model | None, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def summarize(self, round: int, result: EvalResult, facts: ProfileFacts | None, dtypes: list[str],
                  transcript: Transcript) -> ProfileSummary:
        found = profile_facts(result, facts)
        summary = ProfileSummary(facts=found, text="\n".join(f"- {f}" for f in found))
        timed = any(s.candidate is not None for s in result.shapes)
        if self.model is None or not self.config.llm_profile_summary or not timed:
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
    """Plans a round: up to `plans` distinct changes, each on a parent from the database's elites."""

    def __init__(self, model: Model, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def plan(self, ctx: RoundContext, transcript: Transcript) -> PlanSet:
        def parse(text: str) -> PlanSet:
            try:
                data = extract_json(text, required=("plans",))
            except ParseError:
                prose = strip_code(text)
                if len(prose) < 10:
                    raise
                return PlanSet(plans=[PlanItem(parent=ctx.best.id, text=prose[:4000])])  # one plan in prose
            items = data["plans"] if isinstance(data["plans"], list) else []
            plans = []
            for item in items[: ctx.plans_wanted]:
                text = str(item.get("plan", "")).strip() if isinstance(item, dict) else str(item).strip()
                parent = str(item.get("parent", "")) if isinstance(item, dict) else ""
                if len(text) >= 10:
                    plans.append(PlanItem(parent=parent if parent in ctx.parents else ctx.best.id, text=text[:4000]))
            if not plans:
                raise ParseError('"plans" must be a list of {"parent": ID, "plan": "numbered changes"} objects')
            return PlanSet(plans=plans)

        return converse(self.model, render("planning.j2", spec=self.spec, ctx=ctx), parse,
                        self.config.parse_retries, transcript, tag=f"r{ctx.round:02d} planning")


def parse_kernel(text: str) -> str:
    """The answer's kernel file, or ParseError / UnsafeCode (fed back to the model)."""
    source = extract_code(text)
    ensure_safe(source)
    return source


class CodingAgent:
    """Writes candidates for a plan (n samples of one prompt) and repairs them in their own conversation."""

    def __init__(self, model: Model, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def prompt(self, ctx: RoundContext, plan: PlanItem, parent: Entry, parent_source: str) -> list[Message]:
        return render("coding.j2", spec=self.spec, ctx=ctx, plan=plan.text, parent=parent, parent_source=parent_source,
                      abi=abi_header(), device=device_header(), rules=RULES)

    def single_prompt(self, ctx: RoundContext) -> list[Message]:
        """Paper Table 3 ablation: one prompt plans, tests and codes."""
        return render("single_agent.j2", spec=self.spec, ctx=ctx, abi=abi_header(), device=device_header(),
                      rules=RULES, max_shapes=self.config.max_test_shapes)


def repair_message(candidate: str, result: EvalResult | None, error: str) -> list[Message]:
    """What a failed attempt is told: the parse / safety error, the build log, the mismatching shapes or
    the crash, as one user message that continues the candidate's conversation."""
    return render("repair.j2", candidate=candidate, result=result, error=error,
                  log=(result.build.log[-3000:] if result is not None and result.build is not None else ""),
                  wrong=[s for s in result.shapes if s.correct is False][:12] if result is not None else [])


def single_shapes(spec: KernelSpec, text: str, shapes: list[Shape], config: RunConfig) -> list[Shape]:
    """Single-agent mode: the shapes an answer adds to the test suite (an optional ```json block)."""
    try:
        proposed = extract_json(text, required=("shapes",))["shapes"]
    except ParseError:
        return []
    return validate_shapes(spec, proposed, list(shapes), config)[0]
