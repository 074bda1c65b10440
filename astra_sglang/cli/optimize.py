"""`astra-sglang optimize`: the click command (the top-level CLI adds it with `main.add_command(optimize)`); each
op's run is optimize/run.py's, its start kernel optimize/starts.py's."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import click

from astra_sglang.errors import AstraError
from astra_sglang.optimize.preflight import Preflight, check_harness, check_inputs
from astra_sglang.optimize.records import LLMConfig, RoleModel, RunOutcome
from astra_sglang.optimize.run import RunOptions, llm_run, load_settings, resume_run, summary, tuner_run

EFFORTS = ("minimal", "low", "medium", "high")


def harness_evaluator():
    try:
        from astra_sglang.harness.isolate import evaluate
    except ImportError as exc:
        raise AstraError(f"the harness evaluator is not available ({exc})") from None
    return evaluate


def make_pool(ray: str | None, gpus: str | None):
    """One pool for the whole command: the harness's evaluator (builds ahead, one worker per GPU)."""
    from astra_sglang.optimize.pool import make_pool as pool_for
    from astra_sglang.optimize.pool.devices import visible_gpus

    evaluator = harness_evaluator()
    return pool_for(ray, visible_gpus(gpus), evaluator=None if is_harness(evaluator) else evaluator)


def is_harness(evaluator) -> bool:
    """The harness's own isolated evaluator (not a stand-in a caller put in its place)."""
    return getattr(evaluator, "__module__", "") == "astra_sglang.harness.isolate"


def llm_configured(llm: str | None, base_url: str | None, api_key: str | None) -> bool:
    return bool(llm or base_url or api_key or os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


def parse_price(text: str) -> tuple[str, tuple[float, ...]]:
    """MODEL=IN/OUT or MODEL=IN/CACHED/OUT (USD per 1M tokens)."""
    model, _, numbers = text.partition("=")
    try:
        value = tuple(float(x) for x in numbers.split("/"))
    except ValueError:
        value = ()
    if not model or len(value) not in (2, 3) or min(value) < 0:
        raise AstraError(f"--price {text!r}: write MODEL=IN/OUT or MODEL=IN/CACHED/OUT in USD per 1M tokens")
    return model, value


def role_model(text: str | None, option: str) -> RoleModel | None:
    """MODEL or MODEL@EFFORT."""
    if not text:
        return None
    model, _, effort = text.partition("@")
    if effort and effort not in EFFORTS:
        raise AstraError(f"{option} {text!r}: the effort after @ is one of {', '.join(EFFORTS)}")
    return RoleModel(model=model or None, reasoning_effort=effort or None)


def llm_settings(llm, base_url, api_key, api, budget_usd, max_tokens, effort, prices, roles, file_llm) -> LLMConfig:
    """The endpoint, models per role and prices: the settings file's, then the command line's over them."""
    merged = dict(file_llm)
    merged.update({k: v for k, v in dict(model=llm, base_url=base_url, budget_usd=budget_usd, max_tokens=max_tokens,
                                         reasoning_effort=effort).items() if v is not None})
    merged["prices"] = {**merged.get("prices", {}), **dict(parse_price(p) for p in prices)}
    merged["roles"] = {**merged.get("roles", {}), **{r: m for r, m in roles.items() if m is not None}}
    merged.setdefault("model", "o4-mini")
    if api != "auto" or "api" not in merged:
        merged["api"] = api
    return LLMConfig(api_key=api_key, **merged)


@click.command("optimize")
@click.argument("kernels", nargs=-1, metavar="[KERNEL]...")
@click.option("--all", "every", is_flag=True, help="Every op that has a spec, as one job.")
@click.option("--from-profile", "profile", metavar="PROFILE.json", type=click.Path(dir_okay=False),
              help="The ops a profile of a live server ranked (`astra-sglang profile`), in its order, as one job.")
@click.option("--from", "start", metavar="DIR|FILE", help="Kernel to start from (one op): an extracted dir or a .cu "
              "file (default: our own first kernel; the tuner: the op's patch, the user folder's over the shipped "
              "one).")
@click.option("--rounds", "-r", type=click.IntRange(min=1), default=None,
              help="Rounds R (default 5; with --resume: extend to R).")
@click.option("--population", "-n", type=click.IntRange(min=1), default=None,
              help="Candidates a round (a planner call) leads to, drafted at once (default 4).")
@click.option("--plans", type=click.IntRange(min=1), default=None, help="Distinct plans a round; each is coded "
              "population/plans times, n samples of one prompt (default 2).")
@click.option("--repairs", type=click.IntRange(min=0), default=None, help="Repairs of a failed candidate, each with "
              "its build log or mismatching shapes (default 2).")
@click.option("--speed-turns", type=click.IntRange(min=0), default=None, help="Turns a correct but slow candidate "
              "(slower than its parent, or far from the floor) gets back with its per-shape timings and metrics "
              "(default 2).")
@click.option("--islands", type=click.IntRange(min=1), default=None, help="Sub-populations the rounds take turns on, "
              "with migration of their best kernels (default 2).")
@click.option("--inflight", type=click.IntRange(min=1), default=None, help="Most candidates in flight at once "
              "(default: as many as keep the GPUs busy at the model's latency; 1 with --population 1 --plans 1 "
              "--repairs 0 --speed-turns 0 --islands 1 is the paper's loop).")
@click.option("--model-plan", metavar="MODEL[@EFFORT]",
              help="The planner's model (and reasoning effort), e.g. o3@high.")
@click.option("--model-code", metavar="MODEL[@EFFORT]", help="The coder's model (and reasoning effort).")
@click.option("--model-reflect", metavar="MODEL[@EFFORT]", help="The reflector's and the memory summarizer's model.")
@click.option("--effort", type=click.Choice(EFFORTS), help="Reasoning effort of every role without its own.")
@click.option("--price", "prices", multiple=True, metavar="MODEL=IN/OUT", help="USD per 1M prompt/completion tokens "
              "(or IN/CACHED/OUT) of a model the price table does not know; needed for such a model with --budget-usd.")
@click.option("--config", "settings_file", type=click.Path(exists=True, dir_okay=False), help="Settings file (TOML, or "
              "JSON): any RunConfig field (speed_turns, islands, plateau, ncu_share, ...) and LLMConfig's under [llm] "
              "(roles, reasoning_effort, prices); the command line wins.")
@click.option("--gpus", metavar="LIST", help="GPUs to evaluate on, one worker each (0,1; none = no GPU); default: "
              "CUDA_VISIBLE_DEVICES, else every GPU nvidia-smi lists.")
@click.option("--ray", metavar="ADDRESS", help="Builds and evaluations as Ray tasks: auto (the cluster this machine "
              "belongs to), ray://HEAD:10001, or local.")
@click.option("--llm", metavar="MODEL", help="Model name on an OpenAI-compatible endpoint (default o4-mini when "
              "OPENAI_API_KEY / OPENAI_BASE_URL is set).")
@click.option("--base-url", metavar="URL", help="Endpoint URL (default: OPENAI_BASE_URL, else the OpenAI API).")
@click.option("--api-key", metavar="KEY", help="API key (default: OPENAI_API_KEY); never written to disk.")
@click.option("--api", type=click.Choice(["auto", "chat", "completions"]), default="auto", show_default=True,
              help="auto: chat, switching to /v1/completions with our own prompt format on a server without a chat "
              "template.")
@click.option("--out", "out", metavar="RUN_DIR", type=click.Path(file_okay=False), help="Run directory (default: "
              "runs/<kernel>-<date>; a job: one folder per op inside).")
@click.option("--resume", "resume_dir", metavar="RUN_DIR", type=click.Path(exists=True, file_okay=False),
              help="Continue a killed or stopped run (or every op of a job) where it left off; --config and the loop's "
              "options (--population, --speed-turns, ...) set how the rest of it goes.")
@click.option("--single-agent", is_flag=True, help="One LLM plays every role in one prompt per round (ablation).")
@click.option("--budget-usd", type=click.FloatRange(min=0, min_open=True),
              help="Stop cleanly once this many USD are spent (estimated; per op).")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Stop cleanly once this many tokens are used (per op).")
@click.option("--shapes", default="paper", show_default=True, help="Shapes the agents optimize on: a set "
              "(quick, paper, models, edge, gate; '+'-joined), a list like 16x4096,32x8192, or a profile's JSON "
              "(the shapes a live server ran).")
@click.option("--baseline", metavar="FILE|py:MODULE:FUNC", help="Measure speedups against this (e.g. "
              "py:sgl_kernel:fused_add_rmsnorm, SGLang's own op); default: the start kernel (LLM loop); for the "
              "tuner, SGLang's own op where sgl_kernel is installed, else our first kernel.")
@click.option("--tuner", "force_tuner", is_flag=True, help="Run the built-in tuner even where an LLM is configured.")
@click.option("--from-extracted", "extracted", is_flag=False, flag_value="auto", default=None, metavar="[=SOURCE]",
              help="The tuner starts from the op's original, extracted (from SOURCE: sglang | flashinfer | sgl-kernel | "
              "a path; default: where installed) with knobs derived from its launch path (docs/harness.md). Also the "
              "default where the op has no knobbed kernel of ours.")
@click.option("--compile-only", is_flag=True, help="Build candidates only (machines without a GPU).")
@click.option("--patches-dir", type=click.Path(file_okay=False), help="Also write each winner there (default: "
              "HOME/patches, which `launch` loads over the shipped set); it is always written to RUN_DIR/patch/.")
def optimize(kernels, every, profile, start, rounds, population, plans, repairs, speed_turns, islands, inflight,
             model_plan, model_code, model_reflect, effort, prices, settings_file, gpus, ray, llm, base_url, api_key,
             api, out, resume_dir, single_agent, budget_usd, max_tokens, shapes, baseline, force_tuner, extracted,
             compile_only, patches_dir):
    """Optimize KERNEL (or several, --all, or a profile's ops) with Astra's agents, a population of
    candidates a round on every GPU of the host (or a Ray cluster).

    Every candidate is safety-checked, then built, checked and timed in an isolated process; failed ones
    are repaired; the winner must be correct on held-out shapes the agents never saw. Without --llm and
    without OPENAI_* in the environment, the built-in tuner runs instead: it searches the `// astra:knob`
    parameters of the start kernel (default: the op's patch, HOME/patches/<op>/ over the shipped
    patches/<op>/) per shape.

    \b
    Examples:
      astra-sglang optimize silu_and_mul --rounds 5 --llm o4-mini
      astra-sglang optimize --all --llm o4-mini --budget-usd 2 --out runs/all
      astra-sglang optimize --from-profile profile.json --llm o4-mini --out runs/served
      astra-sglang optimize silu_and_mul --llm o4-mini --gpus 0,1 --population 8
      astra-sglang optimize rmsnorm --llm o4-mini --ray auto
      astra-sglang optimize silu_and_mul --llm qwen3-coder --base-url http://localhost:30000/v1
      astra-sglang optimize rmsnorm --llm gpt-5-mini --model-plan o3@high --budget-usd 3
      astra-sglang optimize rmsnorm --llm my-coder --base-url http://localhost:30000/v1 --price my-coder=0.2/0.8
      astra-sglang optimize silu_and_mul --resume runs/silu_and_mul-20260101-120000
      astra-sglang optimize rmsnorm --tuner --from-extracted=flashinfer   # no hand-written kernel needed
    """
    from astra_sglang.optimize.job import print_table, run_job
    from astra_sglang.optimize.selection import resolve_ops
    from astra_sglang.paths import user_patches_dir

    # never into the installed package: the user folder, whose patches `launch` loads over the shipped ones
    over_shipped = not patches_dir
    patches_dir = patches_dir or str(user_patches_dir())

    run_settings, file_llm = load_settings(settings_file) if settings_file else ({}, {})
    given = dict(population=population, plans=plans, repairs=repairs, speed_turns=speed_turns, islands=islands,
                 inflight=inflight)
    run_settings.update({k: v for k, v in given.items() if v is not None})
    roles = {"planner": role_model(model_plan, "--model-plan"), "coder": role_model(model_code, "--model-code")}
    if (reflecting := role_model(model_reflect, "--model-reflect")) is not None:
        roles.update(reflector=reflecting, summarizer=reflecting)
    llm_config = llm_settings(llm, base_url, api_key, api, budget_usd, max_tokens, effort, prices, roles, file_llm)
    if resume_dir:
        ops = [] if (Path(resume_dir) / "config.json").is_file() else sorted(
            p.name for p in Path(resume_dir).iterdir() if (p / "config.json").is_file())
        if not ops and not (Path(resume_dir) / "config.json").is_file():
            raise AstraError(f"{resume_dir}: neither a run directory (config.json) nor a job of them")
    else:
        ops, skipped = resolve_ops(kernels, every, profile)
        if skipped:
            click.echo(f"the profile's rows without a spec here (skipped): {', '.join(skipped)}")
        if start and len(ops) > 1:
            raise AstraError("--from names one start kernel: give one op")
        if start and extracted is not None:
            raise AstraError("--from and --from-extracted both name a start kernel: give one")
    use_llm = (llm_configured(llm, base_url, api_key) or bool(file_llm)) and not force_tuner and extracted is None
    if use_llm and not resume_dir:
        from astra_sglang.optimize.agents.llm import meter_for

        meter_for(llm_config)  # an unpriced model with --budget-usd: one clear error before anything runs
    checks = Preflight(ops=ops, shapes=shapes, baseline=baseline, gpus=gpus, ray=ray, llm=use_llm or bool(resume_dir),
                       compile_only=compile_only, out=out)
    check_inputs(checks)  # before the pool starts and anything is built
    if is_harness(harness_evaluator()):
        check_harness(checks)
    config = RunOptions(rounds=rounds, shapes=shapes, single_agent=single_agent, compile_only=compile_only,
                        baseline=baseline, start=start, extracted=extracted, settings=run_settings)
    pool = make_pool(ray, gpus)
    try:
        if resume_dir and not ops:
            summary(resume_run(Path(resume_dir), pool, llm_config, rounds, click.echo, run_settings), patches_dir,
                    click.echo, over_shipped)
            return
        stamp = f"{dt.datetime.now():%Y%m%d-%H%M%S}"
        root = Path(out or resume_dir or Path("runs") / (f"{ops[0]}-{stamp}" if len(ops) == 1 else f"job-{stamp}"))

        def one(op: str, run_dir: Path, echo) -> RunOutcome:
            if resume_dir:
                outcome = resume_run(run_dir, pool, llm_config, rounds, echo, run_settings)
            elif use_llm:
                outcome = llm_run(op, run_dir, pool, llm_config, config, echo)
            else:
                outcome = tuner_run(op, run_dir, pool, config, echo)
            summary(outcome, patches_dir, echo, over_shipped)
            return outcome

        if len(ops) == 1 and not resume_dir:
            outcome = one(ops[0], root, click.echo)
            if outcome.baseline_error:
                raise AstraError(outcome.baseline_error)
            return
        results = run_job(ops, root, one, click.echo)
        print_table(results)
        click.echo(f"job: {root / 'job.md'}")
        if any(r.status == "failed" for r in results):
            failed = sum(r.status == "failed" for r in results)
            raise AstraError(f"{failed} of {len(results)} ops failed (see the table)")
    finally:
        pool.close()
