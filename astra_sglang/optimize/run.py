"""One op's run under `optimize`: the LLM loop, the built-in tuner or a resumed run, then what becomes of its
winner (the summary lines and the patch written, unless a patch already there measured better). Also the
settings file (`--config`): RunConfig's fields, and LLMConfig's under `llm`, each documented on its field."""
from __future__ import annotations

import importlib.util
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from astra_sglang.errors import AstraError
from astra_sglang.optimize.records import LLMConfig, RunConfig, RunOutcome, Winner
from astra_sglang.optimize.starts import start_source, tuner_start
from astra_sglang.specs.records import KernelSpec


@dataclass(frozen=True)
class RunOptions:
    """What the command line says about every op's run (a job runs several with the same options)."""

    rounds: int | None
    shapes: str
    single_agent: bool
    compile_only: bool
    baseline: str | None
    start: str | None
    extracted: str | None = None
    settings: dict = field(default_factory=dict)
    """RunConfig fields from `--config`, and the command line's over them (population, plans, repairs, speed
    turns, islands, in flight): what neither sets keeps RunConfig's default."""


FIXED = ("kernel", "start_source", "llm")
"""RunConfig fields a settings file cannot set: the op, its start kernel, and `llm` (merged field by field)."""
KEPT = ("shapes", "dtypes", "baseline", "from_nothing", "single_agent", "compile_only", "arch", "trials")
"""Fields a resumed run keeps from its config.json: its candidates were measured with them."""


def load_settings(path: str | Path) -> tuple[dict, dict]:
    """A settings file (TOML, or JSON for a .json name) -> (RunConfig fields, LLMConfig fields), each checked
    against the models, so a misspelled or ill-typed field is one clear error naming it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else tomllib.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AstraError(f"{path}: not a readable settings file ({exc})") from None
    llm = data.pop("llm", {}) or {}
    unknown = sorted(set(data) - set(RunConfig.model_fields) | set(data) & set(FIXED))
    unknown += sorted(f"llm.{k}" for k in set(llm) - set(LLMConfig.model_fields) | set(llm) & {"api_key"})
    if unknown:
        raise AstraError(f"{path}: unknown or fixed setting(s) {', '.join(unknown)} (RunConfig / LLMConfig fields "
                         "are listed in docs/search.md)")
    try:
        RunConfig(kernel="x", **data)
        LLMConfig(**llm)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise AstraError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    return data, llm


def llm_run(op: str, run_dir: Path, pool, llm_config: LLMConfig, opts: RunOptions, echo) -> RunOutcome:
    from astra_sglang.optimize.agents.loop import run
    from astra_sglang.optimize.agents.models import Models
    from astra_sglang.optimize.starts import FROM_NOTHING
    from astra_sglang.specs.registry import get_spec

    spec = get_spec(op)
    start = start_source(spec, opts.start)
    nothing = FROM_NOTHING in start.read_text()  # an onboarded op's skeleton: SGLang's op is the original
    baseline = opts.baseline or (f"py:{spec.onboard.call}" if nothing else "")
    fields = {"rounds": 5, "shapes": opts.shapes, **opts.settings}  # the settings file over the defaults
    fields.update({k: v for k, v in dict(rounds=opts.rounds, baseline=baseline, from_nothing=nothing or None,
                                         single_agent=opts.single_agent or None,
                                         compile_only=opts.compile_only or None).items() if v})
    if opts.shapes != RunConfig.model_fields["shapes"].default:
        fields["shapes"] = opts.shapes  # the command line over the file, where it names shapes
    config = RunConfig(kernel=spec.name, start_source=str(start), llm=llm_config, **fields)
    models = Models.from_config(llm_config)
    origin = "nothing (SGLang's op is the original)" if nothing else str(start)
    echo(f"optimizing {spec.name} from {origin} with {models.describe()}: {config.population} candidates a round, "
         f"{config.islands} island(s); run dir {run_dir}")
    return run(config, run_dir, pool, models, profiler=profiler(spec, opts.compile_only), echo=echo)


def tuner_run(op: str, run_dir: Path, pool, opts: RunOptions, echo) -> RunOutcome:
    from astra_sglang.optimize.winner import write_patch
    from astra_sglang.specs.registry import get_spec

    spec = get_spec(op)
    echo("no LLM configured (--llm / OPENAI_API_KEY / OPENAI_BASE_URL): running the built-in tuner")
    from astra_sglang.optimize.pool.pool import harness_evaluate

    if (getattr(pool, "evaluator", None) is harness_evaluate and not opts.compile_only
            and not getattr(pool, "gpus", None)):
        # every variant would be built only to hear that nothing can check or time it
        raise AstraError("the built-in tuner checks and times its variants on a GPU: no CUDA GPU here "
                         "(--compile-only builds them)")
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

    if baseline is None and spec.onboard is not None:
        baseline = f"py:{spec.onboard.call}"  # an onboarded op: SGLang's op as the adapter `onboard` wrote calls it
        echo(f"baseline: {baseline} (SGLang's own op, {spec.onboard.entry})")
    elif baseline is None and importlib.util.find_spec("sgl_kernel") is not None:
        from astra_sglang.baselines.adapters import sglang_baseline

        baseline = sglang_baseline(spec)  # a serving machine: the winner must beat what SGLang runs today
        echo(f"baseline: {baseline} (SGLang's own op)")
    return run_tuner(spec, start, rounds, run_dir, None, echo=echo, batch=pool.map,
                     baseline=KernelSource(path=baseline) if baseline else None)


def resume_run(run_dir: Path, pool, llm_config: LLMConfig, rounds: int | None, echo,
               settings: dict | None = None) -> RunOutcome:
    """Continue a run; `settings` (the settings file's and the command line's RunConfig fields) change what the rest
    of it does, except the fields its measurements depend on (KEPT)."""
    from astra_sglang.optimize.agents.journal import RunLog
    from astra_sglang.optimize.agents.loop import resume
    from astra_sglang.optimize.agents.models import Models
    from astra_sglang.specs.registry import get_spec

    saved = RunLog.load_config(run_dir)
    changed = sorted(k for k, v in (settings or {}).items() if k in KEPT and getattr(saved, k) != v)
    if changed:
        raise AstraError(f"{run_dir}: a resumed run keeps its {', '.join(changed)} (its candidates were measured so); "
                         "start a new run to change them")
    given = {k: v for k, v in llm_config.model_dump(exclude_defaults=True).items()}
    merged = saved.llm.model_copy(update={**given, "api_key": llm_config.api_key})
    overrides = {**(settings or {}), "llm": merged,
                 **({"rounds": rounds, "max_rounds": max(rounds, saved.max_rounds or 0)} if rounds else {})}
    return resume(run_dir, pool, Models.from_config(merged),
                  profiler=profiler(get_spec(saved.kernel), saved.compile_only), echo=echo, **overrides)


def profiler(spec: KernelSpec, compile_only: bool):
    """Nsight Compute for the agents where ncu is installed (GPU runs only): several shapes, the sections that
    matter, the source page's hotspots (optimize/agents/ncu_deep.py)."""
    from astra_sglang.optimize.agents.ncu_deep import DeepProfiler

    return DeepProfiler(spec.name) if not compile_only and DeepProfiler.available() else None


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
