"""The four Astra roles (Testing, Profiling, Planning, Coding) and the single-agent ablation.

Each role renders its template, asks the model through `converse` and returns a typed record. The
TestingAgent can only add shapes / trials that pass the spec's constraints; the ProfilingAgent always
produces rule-based facts and optionally an LLM summary of them.
"""
from __future__ import annotations

import math

from astra_sglang.agents.parse import ParseError, extract_code, extract_json, strip_code
from astra_sglang.agents.prompts import abi_header, converse, device_header, render
from astra_sglang.agents.protocols import Model
from astra_sglang.agents.records import (CodeResult, Plan, ProfileFacts, ProfileSummary, RoundContext, RunConfig,
                                         Shape, TestPlan, Transcript)
from astra_sglang.agents.safety import RULES, ensure_safe
from astra_sglang.harness.records import EvalResult
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

        return converse(self.model, messages, parse, self.config.parse_retries, transcript)


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

        llm_text = converse(self.model, messages, parse, self.config.parse_retries, transcript)
        return summary.model_copy(update={"text": summary.text + "\n\nProfiler's reading:\n" + llm_text})


class PlanningAgent:
    def __init__(self, model: Model, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def plan(self, ctx: RoundContext, transcript: Transcript) -> Plan:
        def parse(text: str) -> Plan:
            text = strip_code(text)
            if len(text) < 10:
                raise ParseError("the plan is empty: answer with a numbered list of concrete changes")
            return Plan(text=text[:4000])

        return converse(self.model, render("planning.j2", spec=self.spec, ctx=ctx), parse,
                        self.config.parse_retries, transcript)


def parse_kernel(text: str) -> str:
    """The answer's kernel file, or ParseError / UnsafeCode (fed back to the model)."""
    source = extract_code(text)
    ensure_safe(source)
    return source


class CodingAgent:
    def __init__(self, model: Model, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def write(self, ctx: RoundContext, plan: Plan, transcript: Transcript) -> str:
        messages = render("coding.j2", spec=self.spec, ctx=ctx, plan=plan.text, abi=abi_header(), device=device_header(), rules=RULES)
        return converse(self.model, messages, parse_kernel, self.config.parse_retries, transcript, code=True)


class SingleAgent:
    """Paper Table 3 ablation: one model proposes tests, plans and codes in one prompt per round."""

    def __init__(self, model: Model, spec: KernelSpec, config: RunConfig):
        self.model, self.spec, self.config = model, spec, config

    def step(self, ctx: RoundContext, candidate_path: str, transcript: Transcript) -> tuple[CodeResult, str]:
        messages = render("single_agent.j2", spec=self.spec, ctx=ctx, abi=abi_header(), device=device_header(), rules=RULES,
                          max_shapes=self.config.max_test_shapes)

        def parse(text: str) -> tuple[CodeResult, str]:
            source = parse_kernel(text)
            try:
                proposed = extract_json(text, required=("shapes",))["shapes"]
            except ParseError:
                proposed = []
            shapes, _ = validate_shapes(self.spec, proposed, list(ctx.shapes), self.config)
            plan = strip_code(text)[:4000]
            return CodeResult(candidate=candidate_path, plan=plan, shapes=shapes), source

        return converse(self.model, messages, parse, self.config.parse_retries, transcript, code=True)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
