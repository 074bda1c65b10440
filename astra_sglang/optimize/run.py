"""One op's run under `optimize`: the LLM loop, the built-in tuner or a resumed run, then what becomes of its
winner (the summary lines and the patch written, unless a patch already there measured better)."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.optimize.records import LLMConfig, RunConfig, RunOutcome, Winner
from astra_sglang.optimize.starts import start_source, tuner_start
from astra_sglang.specs.records import KernelSpec


@dataclass(frozen=True)
class RunOptions:
    """What the command line says about every op's run (a job runs several with the same options)."""

    rounds: int | None
    population: int
    plans: int
    repairs: int
    shapes: str
    single_agent: bool
    compile_only: bool
    baseline: str | None
    start: str | None
    extracted: str | None = None


def llm_run(op: str, run_dir: Path, pool, llm_config: LLMConfig, opts: RunOptions, echo) -> RunOutcome:
    from astra_sglang.optimize.agents.llm import OpenAIModel
    from astra_sglang.optimize.agents.loop import run
    from astra_sglang.specs.registry import get_spec

    spec = get_spec(op)
    start = start_source(spec, opts.start)
    config = RunConfig(kernel=spec.name, start_source=str(start), baseline=opts.baseline or "",
                       rounds=opts.rounds or 5, shapes=opts.shapes, population=opts.population, plans=opts.plans,
                       repairs=opts.repairs, single_agent=opts.single_agent, compile_only=opts.compile_only,
                       llm=llm_config)
    echo(f"optimizing {spec.name} from {start} with {llm_config.model}: {config.population} candidates a round; "
         f"run dir {run_dir}")
    return run(config, run_dir, pool, OpenAIModel(llm_config), profiler=profiler(spec, opts.compile_only),
               echo=echo)


def tuner_run(op: str, run_dir: Path, pool, opts: RunOptions, echo) -> RunOutcome:
    from astra_sglang.optimize.winner import write_patch
    from astra_sglang.specs.registry import get_spec

    spec = get_spec(op)
    echo("no LLM configured (--llm / OPENAI_API_KEY / OPENAI_BASE_URL): running the built-in tuner")
    baseline = opts.baseline
    if baseline and not baseline.startswith("py:"):
        baseline = str(Path(baseline).resolve())
    rounds = opts.rounds or 5
    start = tuner_start(spec, opts.start, opts.extracted, run_dir, echo)
    winner = run_tuner_path(spec, start, rounds, run_dir, pool, baseline, echo)
    if winner is not None:
        write_patch(winner, run_dir / "patch", spec)
    return RunOutcome(run_dir=str(run_dir), winner=winner, rounds_done=rounds)


def run_tuner_path(spec: KernelSpec, start: Path, rounds: int, run_dir: Path, pool, baseline: str | None = None,
                   echo=print) -> Winner | None:
    from astra_sglang.harness.records import KernelSource
    from astra_sglang.optimize.tuner.cuda_tune import run_tuner

    if baseline is None and importlib.util.find_spec("sgl_kernel") is not None:
        from astra_sglang.baselines.adapters import sglang_baseline

        baseline = sglang_baseline(spec)  # a serving machine: the winner must beat what SGLang runs today
        echo(f"baseline: {baseline} (SGLang's own op)")
    return run_tuner(spec, start, rounds, run_dir, None, echo=echo, batch=pool.map,
                     baseline=KernelSource(path=baseline) if baseline else None)


def resume_run(run_dir: Path, pool, llm_config: LLMConfig, rounds: int | None, echo) -> RunOutcome:
    from astra_sglang.optimize.agents.journal import RunLog
    from astra_sglang.optimize.agents.llm import OpenAIModel
    from astra_sglang.optimize.agents.loop import resume
    from astra_sglang.specs.registry import get_spec

    saved = RunLog.load_config(run_dir)
    given = {k: v for k, v in llm_config.model_dump(exclude_defaults=True).items()}
    merged = saved.llm.model_copy(update={**given, "api_key": llm_config.api_key})
    overrides = {"llm": merged, **({"rounds": rounds} if rounds else {})}
    return resume(run_dir, pool, OpenAIModel(merged), profiler=profiler(get_spec(saved.kernel), saved.compile_only),
                  echo=echo, **overrides)


def profiler(spec: KernelSpec, compile_only: bool):
    """Nsight Compute facts for the ProfilingAgent where ncu is installed (GPU runs only)."""
    from astra_sglang.harness.ncu import NcuProfiler

    return NcuProfiler(spec.name) if not compile_only and NcuProfiler.available() else None


def summary(outcome: RunOutcome, patches_dir: str | None, echo=print, over_shipped: bool = False) -> None:
    from astra_sglang.optimize.winner import existing_is_better, write_patch
    from astra_sglang.patchset.store import PatchStore
    from astra_sglang.specs.registry import get_spec

    if outcome.stop_reason:
        echo(f"stopped early: {outcome.stop_reason}")
    if outcome.report:
        echo(f"{outcome.rounds_done} rounds, {outcome.usage.tokens} tokens, ~${outcome.usage.cost_usd:.4f}; "
             f"report: {outcome.report}")
    winner = outcome.winner
    if winner is None:
        echo("no winner: no candidate was correct on every final test and faster than the baseline")
        return
    echo(f"winner: {winner.candidate or f'round {winner.round}'} ({winner.method}), geomean {winner.speedup:.3f}x "
         f"({winner.source})")
    if patches_dir:
        # written to the user folder by default, a patch would replace the served one in `launch` (the patch
        # set's layers, the shipped set's included): none of them may be better either
        below = PatchStore().roots if over_shipped else []
        folders = dict.fromkeys([*below, Path(patches_dir)])
        kept = next(filter(None, (existing_is_better(winner, d) for d in folders)), None)
        echo(kept or f"patch written to {write_patch(winner, patches_dir, get_spec(winner.kernel))}")
