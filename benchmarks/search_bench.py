"""Search throughput: how many candidate evaluations a GPU does per hour, and how good the agent loop's
candidates are, one arm after another within a time budget.

Pool arms (no LLM): fresh knob variants of the op's shipped kernel, each a new source (nvcc really runs):
  sequential   one evaluation at a time, each building its candidate first (the old loop's way)
  pool-1gpu    the pool: builds on the CPU cores ahead of one GPU worker
  pool-2gpu    the pool on two GPUs (when the host has two)
Loop arms (the full agent loop, a scripted model replaying template-generated kernels with a fixed latency
per request, or --llm): the paper's loop (1 candidate a round, no repairs, one lineage in flight) against
the asynchronous population (RunConfig's defaults: rounds start whenever the GPUs would run dry, repairs,
speed turns, two islands, reflection), on one GPU and on two. A loop arm runs until its time is up, then
stops the run (what is in flight finishes).
Per arm: evaluations per GPU-hour, median seconds per evaluation, GPU busy share and each GPU's share of
the evaluations; loop arms add rounds per hour, drafts per hour (every kernel the coder wrote: first
drafts, repairs and speed turns), the mean prompt tokens per role (4 characters a token, from the scripted
model's recorded requests) and fast_p (KernelBench's share of candidates that are correct and faster than
the baseline by p, over every answer the coder gave).

Usage: python3 benchmarks/search_bench.py --out DIR [--budget 390] [--latency 5] [--op silu_and_mul]
       python3 benchmarks/search_bench.py --simulate --out DIR   # CPU: simulated builds and GPU time
       python3 benchmarks/search_bench.py --simulate --latency 30 --sim-eval-s 12 --sim-build-s 10 \
           --arms loop-population-1gpu,loop-population-2gpu --budget 1800 --out DIR   # docs/search.md's figures
           (and with --sim-eval-s 2 --sim-build-s 1)
Writes DIR/search.jsonl (one row per arm) and DIR/search.md, prints the table last; the arms' candidates
and run directories go to --work (default DIR/work). On a GPU: benchmarks/gpu/search_bench.sh.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from pydantic import BaseModel

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.optimize.agents.database import ORIGINAL
from astra_sglang.optimize.agents.llm import OpenAIModel
from astra_sglang.optimize.agents.loop import Optimizer
from astra_sglang.optimize.agents.population import Population
from astra_sglang.optimize.agents.replay import KernelReplay, variants
from astra_sglang.optimize.agents.scripted import ScriptedModel
from astra_sglang.optimize.pool.devices import visible_gpus
from astra_sglang.optimize.pool.pool import LocalPool, harness_evaluate
from astra_sglang.optimize.pool.simulate import SimulatedBuilder, SimulatedEvaluator
from astra_sglang.optimize.pool.stats import Span
from astra_sglang.optimize.records import LLMConfig, RunConfig
from astra_sglang.paths import kernels_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

FAST_P = (1.0, 1.1)
LOOP_WEIGHT = 1.5
"""A loop arm gets this many times a pool arm's share of the budget (its baseline evaluation and first
round come before any throughput)."""


class Row(BaseModel):
    arm: str
    gpus: int
    wall_s: float
    evaluations: int
    per_gpu_hour: float
    median_eval_s: float | None
    busy_share: float
    """Mean over the arm's GPUs of the share of wall time spent evaluating."""
    gpu_shares: dict[str, float]
    rounds: int | None = None
    rounds_per_hour: float | None = None
    drafts_per_hour: float | None = None
    """Kernels the coder wrote per hour: first drafts, repairs and speed turns."""
    prompt_tokens: dict[str, int] | None = None
    """Mean prompt tokens a request, per role (scripted model only: 4 characters a token)."""
    candidates: int | None = None
    correct: float | None = None
    fast_p: dict[str, float] | None = None
    best: float | None = None
    note: str = ""


def throughput_row(arm: str, lanes: list[str], spans: list[Span], began: float, ended: float, **extra) -> Row:
    gpus = len(lanes)
    wall = ended - began
    mine = [s for s in spans if s.start >= began]
    per = {lane: [s for s in mine if s.lane == lane] for lane in lanes}
    return Row(arm=arm, gpus=gpus, wall_s=round(wall, 1), evaluations=len(mine),
               per_gpu_hour=round(len(mine) * 3600 / wall / gpus, 1),
               median_eval_s=round(statistics.median(s.seconds for s in mine), 2) if mine else None,
               busy_share=round(sum(s.seconds for s in mine) / wall / gpus, 3),
               gpu_shares={k: round(len(v) / max(len(mine), 1), 3) for k, v in per.items()}, **extra)


class Bench:
    def __init__(self, args):
        self.args = args
        self.spec = get_spec(args.op)
        self.shapes = resolve_shapes(self.spec, args.shapes)
        self.sources = variants(self.spec)
        self.count = 0
        self.work = Path(args.work or Path(args.out) / "work")
        self.work.mkdir(parents=True, exist_ok=True)
        if args.simulate:
            self.evaluator = SimulatedEvaluator(seconds=args.sim_eval_s)
            self.builder = SimulatedBuilder(args.sim_build_s)
            self.gpus = (args.gpus or "0,1").split(",")
        else:
            self.evaluator, self.builder, self.gpus = harness_evaluate, None, visible_gpus(args.gpus)

    def request(self, arm: str) -> EvalRequest:
        """A fresh candidate: a variant with a header no earlier build had, so nvcc really runs."""
        self.count += 1
        path = self.work / f"{arm}-{self.count:04d}.cu"
        path.write_text(f"// search benchmark, arm {arm}, candidate {self.count}\n"
                        + self.sources[self.count % len(self.sources)])
        return EvalRequest(kernel=self.spec.name, candidate=KernelSource(path=str(path)), shapes=self.shapes,
                           dtypes=self.args.dtypes.split(","))

    def pool(self, gpus: list[str]) -> LocalPool:
        if self.args.simulate:
            return LocalPool(gpus=gpus, evaluator=self.evaluator, builder=self.builder)
        return LocalPool(gpus=gpus)  # the harness's evaluate, nvcc builds ahead

    def sequential(self, seconds: float) -> Row:
        evaluate = SimulatedEvaluator(seconds=self.args.sim_eval_s, build_seconds=self.args.sim_build_s) \
            if self.args.simulate else self.evaluator
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = self.gpus[0]  # the evaluation child inherits it
        began, spans = time.time(), []
        while time.time() - began < seconds:
            start = time.time()
            evaluate(self.request("sequential"))
            spans.append(Span(lane=self.gpus[0], start=start, end=time.time()))
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES")
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
        return throughput_row("sequential", self.gpus[:1], spans, began, time.time())

    def pooled(self, gpus: list[str], seconds: float) -> Row:
        arm = f"pool-{len(gpus)}gpu"
        with self.pool(gpus) as pool:
            began, pending = time.time(), []
            while time.time() - began < seconds or pending:
                pending = [f for f in pending if not f.done()]
                while time.time() - began < seconds and len(pending) < 2 * len(gpus):  # one queued per GPU
                    pending.append(pool.submit(self.request(arm)))
                if time.time() - began >= seconds:
                    pool.cancel()  # the budget is spent: only the evaluations on a GPU finish
                    pending = [f for f in pending if not f.cancelled()]
                time.sleep(0.05)
            stats = pool.stats()
        return throughput_row(arm, gpus, stats.evaluations, began, time.time(), note="builds ahead of the GPUs")

    def loop(self, name: str, gpus: list[str], seconds: float, paper: bool) -> Row:
        common = dict(kernel=self.spec.name, start_source=str(kernels_dir() / f"{self.spec.name}.cu"),
                      shapes=self.args.shapes, dtypes=self.args.dtypes.split(","), rounds=10_000, plateau=0)
        config = RunConfig(**common, population=1, plans=1, repairs=0, speed_turns=0, islands=1, inflight=1,
                           reflect=False, memory=False) if paper else \
            RunConfig(**common, population=self.args.population, memory=False)
        model = OpenAIModel(LLMConfig(model=self.args.llm, base_url=self.args.base_url)) if self.args.llm else \
            ScriptedModel(KernelReplay(self.spec), name="replay", latency_s=self.args.latency)
        profiler = None
        if self.args.ncu and not self.args.simulate:
            from astra_sglang.optimize.agents.ncu_deep import DeepProfiler

            profiler = DeepProfiler(self.spec.name) if DeepProfiler.available() else None
        with self.pool(gpus) as pool:
            opt = Optimizer(config, self.work / name, pool, model, profiler)
            opt.prepare()  # the baseline, the TestingAgent, the baseline's profile: once a run, not measured
            began = time.time()
            Population(opt, deadline=began + seconds).run()
            ended = time.time()
            stats = pool.stats()
        entries = [e for e in opt.db.entries.values() if e.id != ORIGINAL]
        rounds = sum(1 for r in opt.log.of_role("round") if r.round > 0)
        n = max(len(entries), 1)
        fast = {f"fast_{p}": round(sum(e.ok and (e.speedup or 0) > p for e in entries) / n, 3) for p in FAST_P}
        how = "the paper's loop" if paper else (f"population {config.population} a round, {config.plans} plans, "
                                                 f"{config.repairs} repairs, {config.speed_turns} speed turns, "
                                                 f"{config.islands} islands")
        return throughput_row(name, gpus, stats.evaluations, began, ended, rounds=rounds,
                              rounds_per_hour=round(rounds * 3600 / (ended - began), 1),
                              drafts_per_hour=round(len(entries) * 3600 / (ended - began), 1),
                              prompt_tokens=prompt_tokens(model), candidates=len(entries),
                              correct=round(sum(e.ok for e in entries) / n, 3), fast_p=fast,
                              best=max((e.speedup or 0 for e in entries if e.ok), default=None),
                              note=f"{how}; " + (self.args.llm or f"scripted model, {self.args.latency:g} s a request"))


ROLES = {"TestingAgent": "tester", "ProfilingAgent": "profiler", "PlanningAgent": "planner", "CodingAgent": "coder",
         "ReflectionAgent": "reflector", "MemoryAgent": "summarizer"}


def prompt_tokens(model) -> dict[str, int] | None:
    """Mean prompt tokens a request per role, the coder's first drafts apart from its later turns."""
    calls = getattr(model, "calls", None)
    if not calls:
        return None
    by: dict[str, list[int]] = {}
    for messages in calls:
        role = next((r for marker, r in ROLES.items() if marker in messages[0].content[:300]), "other")
        if role == "coder":
            role = "coder draft" if len(messages) <= 2 else "coder turn"
        by.setdefault(role, []).append(sum(len(m.content) for m in messages) // 4 + 1)
    return {role: round(statistics.mean(v)) for role, v in sorted(by.items())}


DEFAULT_ARMS = "sequential,pool-1gpu,pool-2gpu,loop-paper,loop-population-1gpu"
"""loop-population-2gpu is left out by default: with it the default arms take longer than 8 minutes."""


def arms(bench: Bench) -> list[tuple[str, callable]]:
    g = bench.gpus
    out = {"sequential": lambda s: bench.sequential(s), "pool-1gpu": lambda s: bench.pooled(g[:1], s),
           "pool-2gpu": lambda s: bench.pooled(g[:2], s),
           "loop-paper": lambda s: bench.loop("loop-paper", g[:1], s, True),
           "loop-population-1gpu": lambda s: bench.loop("loop-population-1gpu", g[:1], s, False),
           "loop-population-2gpu": lambda s: bench.loop("loop-population-2gpu", g[:2], s, False)}
    wanted = [a for a in (bench.args.arms or DEFAULT_ARMS).split(",") if len(g) > 1 or "2gpu" not in a]
    unknown = [a for a in wanted if a not in out]
    if unknown:
        raise SystemExit(f"unknown arms {unknown}; known: {', '.join(out)}")
    return [(a, out[a]) for a in wanted]


def table(rows: list[Row]) -> str:
    ref = {"pool": next((r.per_gpu_hour for r in rows if r.arm == "sequential"), None),
           "loop": next((r.per_gpu_hour for r in rows if r.arm == "loop-paper"), None)}
    lines = ["| arm | GPUs | wall s | evals | evals / GPU-hour | throughput vs sequential | median s / eval | "
             "GPU busy | GPU shares | rounds / hour | drafts / hour | correct | fast_1.0 | fast_1.1 | best |",
             "|---" * 15 + "|"]
    for r in rows:
        base = ref["loop" if r.arm.startswith("loop") else "pool"]
        fp = r.fast_p or {}
        lines.append(" | ".join([
            f"| {r.arm}", str(r.gpus), f"{r.wall_s:.0f}", str(r.evaluations), f"{r.per_gpu_hour:.0f}",
            f"{r.per_gpu_hour * r.gpus / base:.2f}x" if base else "-", f"{r.median_eval_s or 0:.1f}",
            f"{r.busy_share:.0%}", " ".join(f"{k}:{v:.0%}" for k, v in r.gpu_shares.items()),
            f"{r.rounds_per_hour:.0f}" if r.rounds_per_hour is not None else "-",
            f"{r.drafts_per_hour:.0f}" if r.drafts_per_hour is not None else "-",
            f"{r.correct:.0%}" if r.correct is not None else "-", f"{fp.get('fast_1.0', 0):.0%}" if fp else "-",
            f"{fp.get('fast_1.1', 0):.0%}" if fp else "-", f"{r.best:.3f}x" if r.best else "-"]) + " |")
    return "\n".join(lines)


def write(out: Path, rows: list[Row], meta: dict) -> str:
    """search.jsonl and search.md as they stand (after every arm: a run cut short keeps its finished arms)."""
    (out / "search.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    text = f"# search throughput\n\n{json.dumps(meta)}\n\n{table(rows)}\n"
    (out / "search.md").write_text(text)
    return text


def main(argv=None) -> list[Row]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", help="candidates and run directories (default OUT/work)")
    p.add_argument("--budget", type=float, default=390, help="seconds for all arms together")
    p.add_argument("--op", default="silu_and_mul")
    p.add_argument("--shapes", default="quick")
    p.add_argument("--dtypes", default="bfloat16")
    p.add_argument("--population", type=int, default=4, help="population arms: candidates a round")
    p.add_argument("--latency", type=float, default=5.0, help="scripted model: seconds per request")
    p.add_argument("--llm", help="a real model instead of the scripted one (OPENAI_API_KEY / --base-url)")
    p.add_argument("--base-url")
    p.add_argument("--gpus", help="GPU ids (default: every visible GPU; --simulate: 0,1)")
    p.add_argument("--arms", help="comma-separated subset of the arms")
    p.add_argument("--ncu", action="store_true", help="loop arms: profile with Nsight Compute (off: it costs "
                   "every paper round an ncu run, and the budget)")
    p.add_argument("--simulate", action="store_true", help="CPU: simulated builds and evaluations")
    p.add_argument("--sim-eval-s", type=float, default=2.0)
    p.add_argument("--sim-build-s", type=float, default=1.0)
    p.add_argument("--table", action="store_true", help="only print the table of OUT/search.jsonl")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.table:
        rows = [Row.model_validate_json(x) for x in (out / "search.jsonl").read_text().splitlines() if x.strip()]
        print(table(rows))
        return rows
    bench = Bench(args)
    if not bench.gpus:
        raise SystemExit("no GPU visible: run with --simulate on a machine without one")
    chosen = arms(bench)
    unit = args.budget / sum(LOOP_WEIGHT if n.startswith("loop") else 1 for n, _ in chosen)
    meta = {"date": time.strftime("%Y-%m-%d"), "op": args.op, "shapes": args.shapes, "dtypes": args.dtypes,
            "simulated": args.simulate, "gpus": bench.gpus, "latency_s": args.latency, "budget_s": args.budget}
    rows, text = [], ""
    for name, run in chosen:
        seconds = unit * (LOOP_WEIGHT if name.startswith("loop") else 1)
        print(f"arm {name}: {seconds:.0f} s", flush=True)
        rows.append(run(seconds))
        print(rows[-1].model_dump_json(), flush=True)
        text = write(out, rows, meta)
    print(text)
    return rows


if __name__ == "__main__":
    main()
