"""`astra-sglang optimize`: the click command (the top-level CLI adds it with `main.add_command(optimize)`)."""
from __future__ import annotations

import datetime as dt
import importlib.util
import os
from pathlib import Path

import click

from astra_sglang.agents.records import LLMConfig, RunConfig, RunOutcome, Winner
from astra_sglang.errors import AstraError
from astra_sglang.paths import kernels_dir
from astra_sglang.paths import patches_dir as shipped_patches_dir
from astra_sglang.specs.records import KernelSpec


def start_source(spec: KernelSpec, given: str | None) -> Path:
    """--from FILE, --from DIR (its kernel.cu, or its only .cu file), or our own first kernel."""
    if given is None:
        path = kernels_dir() / f"{spec.name}.cu"
        if not path.is_file():
            raise AstraError(f"no built-in kernel for {spec.name}: pass --from DIR|FILE (see `extract`)")
        return path
    path = Path(given)
    if path.is_dir():
        if (path / "kernel.cu").is_file():
            return path / "kernel.cu"
        found = sorted(path.glob("*.cu"))
        if len(found) != 1:
            raise AstraError(f"{given}: expected kernel.cu or exactly one .cu file, found {len(found)}")
        return found[0]
    if not path.is_file():
        raise AstraError(f"{given}: no such file or directory")
    return path


def harness_evaluator():
    try:
        from astra_sglang.harness.isolate import evaluate
    except ImportError as exc:
        raise AstraError(f"the harness evaluator is not available ({exc})") from None
    return evaluate


def llm_configured(llm: str | None, base_url: str | None, api_key: str | None) -> bool:
    return bool(llm or base_url or api_key or os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


def run_tuner_path(spec: KernelSpec, start: Path, rounds: int, run_dir: Path, evaluator,
                   baseline: str | None = None) -> Winner | None:
    from astra_sglang.harness.records import KernelSource
    from astra_sglang.tuner import run_tuner

    if baseline is None and importlib.util.find_spec("sgl_kernel") is not None:
        from astra_sglang.ops.adapters import sglang_baseline

        baseline = sglang_baseline(spec)  # a serving machine: the winner must beat what SGLang runs today
        click.echo(f"baseline: {baseline} (SGLang's own op)")
    return run_tuner(spec, start, rounds, run_dir, evaluator, echo=click.echo,
                     baseline=KernelSource(path=baseline) if baseline else None)


@click.command("optimize")
@click.argument("kernel")
@click.option("--from", "start", metavar="DIR|FILE", help="Kernel to start from: an extracted dir or a .cu file "
              "(default: our own first kernel for KERNEL).")
@click.option("--rounds", "-r", type=int, default=None, help="Optimization rounds R (default 5; with --resume: "
              "extend the run to R rounds).")
@click.option("--llm", metavar="MODEL", help="Model name on an OpenAI-compatible endpoint (default o4-mini when "
              "OPENAI_API_KEY / OPENAI_BASE_URL is set).")
@click.option("--base-url", metavar="URL", help="Endpoint URL (default: OPENAI_BASE_URL, else the OpenAI API).")
@click.option("--api-key", metavar="KEY", help="API key (default: OPENAI_API_KEY); never written to disk.")
@click.option("--out", "out", metavar="RUN_DIR", type=click.Path(file_okay=False), help="Run directory "
              "(default: runs/<kernel>-<date>).")
@click.option("--resume", "resume_dir", metavar="RUN_DIR", type=click.Path(exists=True, file_okay=False),
              help="Continue a killed or stopped run where it left off.")
@click.option("--single-agent", is_flag=True, help="One LLM plays every role in one prompt per round (ablation).")
@click.option("--budget-usd", type=float, help="Stop cleanly once this many USD are spent (estimated).")
@click.option("--max-tokens", type=int, help="Stop cleanly once this many tokens are used.")
@click.option("--shapes", default="paper", show_default=True, help="Shapes the agents optimize on: a set "
              "(quick, paper, models, edge; '+'-joined) or a list like 16x4096,32x8192.")
@click.option("--baseline", metavar="FILE|py:MODULE:FUNC", help="Measure speedups against this (e.g. "
              "py:sgl_kernel:fused_add_rmsnorm, SGLang's own op); default: the start kernel (LLM loop); for the "
              "tuner, SGLang's own op where sgl_kernel is installed, else our first kernel.")
@click.option("--compile-only", is_flag=True, help="Build candidates only (machines without a GPU).")
@click.option("--patches-dir", type=click.Path(file_okay=False), help="Also write the winner there "
              "(e.g. patches/); it is always written to RUN_DIR/patch/.")
def optimize(kernel, start, rounds, llm, base_url, api_key, out, resume_dir, single_agent, budget_usd, max_tokens,
             shapes, baseline, compile_only, patches_dir):
    """Optimize KERNEL with Astra's agents (testing, profiling, planning, coding) for R rounds.

    Every candidate is safety-checked, then built, checked and timed in an isolated process; the winner
    must be correct on held-out shapes the agents never saw. Without --llm and without OPENAI_* in the
    environment, the built-in tuner runs instead: it searches the `// astra:knob` parameters of the start
    kernel (default: the shipped patches/<op>/kernel.cu) per shape and ships a per-shape dispatch.

    \b
    Examples:
      astra-sglang optimize silu_and_mul --rounds 5 --llm o4-mini
      astra-sglang optimize fused_add_rmsnorm --from work/extract/fused_add_rmsnorm --budget-usd 2
      astra-sglang optimize silu_and_mul --llm qwen3-coder --base-url http://localhost:8000/v1
      astra-sglang optimize merge_attn_states_lse --single-agent --llm o4-mini --shapes paper
      astra-sglang optimize silu_and_mul --resume runs/silu_and_mul-20260101-120000
    """
    from astra_sglang.agents.llm import OpenAIModel
    from astra_sglang.agents.loop import resume, run
    from astra_sglang.agents.winner import write_patch
    from astra_sglang.specs.registry import get_spec

    spec = get_spec(kernel)
    evaluator = harness_evaluator()
    if resume_dir:
        from astra_sglang.agents.journal import RunLog

        saved = RunLog.load_config(resume_dir)
        llm_config = saved.llm.model_copy(update={k: v for k, v in dict(
            model=llm, base_url=base_url, api_key=api_key, budget_usd=budget_usd, max_tokens=max_tokens).items()
            if v is not None})
        overrides = {"llm": llm_config, **({"rounds": rounds} if rounds else {})}
        outcome = resume(resume_dir, evaluator, OpenAIModel(llm_config), profiler=_profiler(spec, saved.compile_only),
                         echo=click.echo, **overrides)
        _summary(outcome, spec, patches_dir, write_patch)
        return
    start_path = start_source(spec, start)
    run_dir = Path(out or Path("runs") / f"{spec.name}-{dt.datetime.now():%Y%m%d-%H%M%S}")
    if not llm_configured(llm, base_url, api_key):
        if start is None:  # the tuner needs knobs: our first kernels have none, the shipped patches do
            shipped = shipped_patches_dir() / spec.name / "kernel.cu"
            if shipped.is_file() and "astra:knob" in shipped.read_text():
                start_path = shipped
        click.echo("no LLM configured (--llm / OPENAI_API_KEY / OPENAI_BASE_URL): running the built-in tuner")
        if baseline and not baseline.startswith("py:"):
            baseline = str(Path(baseline).resolve())
        winner = run_tuner_path(spec, start_path, rounds or 5, run_dir, evaluator, baseline)
        _summary(RunOutcome(run_dir=str(run_dir), winner=winner, rounds_done=rounds or 5), spec, patches_dir,
                 write_patch, tuner=True)
        return
    llm_config = LLMConfig(model=llm or "o4-mini", base_url=base_url, api_key=api_key, budget_usd=budget_usd,
                           max_tokens=max_tokens)
    config = RunConfig(kernel=spec.name, start_source=str(start_path), baseline=baseline or "", rounds=rounds or 5,
                       shapes=shapes,
                       single_agent=single_agent, compile_only=compile_only, llm=llm_config)
    click.echo(f"optimizing {spec.name} from {start_path} with {llm_config.model}; run dir {run_dir}")
    outcome = run(config, run_dir, evaluator, OpenAIModel(llm_config), profiler=_profiler(spec, compile_only),
                  echo=click.echo)
    _summary(outcome, spec, patches_dir, write_patch)


def _profiler(spec: KernelSpec, compile_only: bool):
    """Nsight Compute facts for the ProfilingAgent where ncu is installed (GPU runs only)."""
    from astra_sglang.harness.profile import NcuProfiler

    return NcuProfiler(spec.name) if not compile_only and NcuProfiler.available() else None


def _summary(outcome: RunOutcome, spec: KernelSpec, patches_dir: str | None, write_patch, tuner: bool = False) -> None:
    if outcome.stop_reason:
        click.echo(f"stopped early: {outcome.stop_reason}")
    if not tuner:
        click.echo(f"{outcome.rounds_done} rounds, {outcome.usage.tokens} tokens, ~${outcome.usage.cost_usd:.4f}; "
                   f"report: {outcome.report}")
    winner = outcome.winner
    if winner is None:
        click.echo("no winner: no candidate was correct on every final test and faster than the baseline")
        return
    click.echo(f"winner: round {winner.round}, geomean {winner.speedup:.3f}x ({winner.source})")
    if tuner:
        write_patch(winner, Path(outcome.run_dir) / "patch", spec)
    if patches_dir:
        from astra_sglang.agents.winner import existing_is_better

        kept = existing_is_better(winner, patches_dir)
        click.echo(kept or f"patch written to {write_patch(winner, patches_dir, spec)}")
