"""The serving A/B behind `astra-sglang ab` (cli/ab.py holds its options): unpatched (A) vs patched (B) SGLang
servers under SGLang's serving benchmark, in one of the designs of serving/designs.py, with intervals over the
design's unit and a logprob parity check.

crossover and restarts run in serving/runner.py (resumable from --out), paired in serving/paired.py.
"""
from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

from rich.console import Console

from astra_sglang.errors import AstraError
from astra_sglang.patching.server_env import patched_server
from astra_sglang.serving.server import server_command
from astra_sglang.serving.window import MIN_WINDOW_S

RESERVED = ("--host", "--port", "--model-path", "--model", "--load-format")


def sglang_available() -> bool:
    return importlib.util.find_spec("sglang") is not None


def check_args(extra) -> None:
    if not sglang_available():
        raise AstraError("sglang is not importable in this Python; run `ab` in the serving environment")
    clash = [a for a in extra if a.split("=")[0] in RESERVED]
    if clash:
        raise AstraError(f"pass {', '.join(clash)} as ab's own options, not after --")


def model_vocab(model_path: str) -> int:
    """The model's vocabulary size (config.json), for the parity prompts' token ids; 32000 where unreadable."""
    try:
        return int(json.loads((Path(model_path) / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return 32000


def run_ab(*, model_path, load_format, design, runs, rounds, gpus, patches, port, num_prompts, input_len, output_len,
           concurrency, warmup_requests, dataset, prefix_len, groups, warmup, control, aa_dir, stop_after, no_stagger,
           target_width, seed, b_first, health_timeout, bench_timeout, out, server_args,
           console: Console, err_console: Console, min_window: float = MIN_WINDOW_S) -> None:
    """One A/B of `design` (crossover, restarts or paired); progress on `console`, warnings on `err_console`.
    Rounds whose timed window is under `min_window` seconds are flagged (serving/window.py)."""
    if design != "paired" and (target_width or b_first):
        raise AstraError("--target-width and --b-first go with --design paired")
    check_args(server_args)
    if design == "paired":  # its warnings come before the build
        from astra_sglang.serving.paired import check_paired

        check_paired(server_args, err_console)
    gpu_list = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else []
    out = (out or Path("astra-ab") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not control:
        argv = server_command(model_path, port, load_format, server_args)
        _, _, summary = patched_server(patches, stats_dir=out / "stats" / "check", server_args=argv[3:],
                                       warn=lambda msg: err_console.out(f"warning: {msg}"))  # validate + build
        console.out(summary)
    opts = dict(model_path=model_path, port=port, num_prompts=num_prompts, input_len=input_len,
                output_len=output_len, concurrency=concurrency, dataset=dataset, prefix_len=prefix_len, groups=groups,
                health_timeout=health_timeout, repeats=1, seed=seed, control=control, bench_timeout=bench_timeout,
                warmup_requests=warmup_requests, extra=list(server_args), min_window_s=min_window)
    if design == "paired":
        from astra_sglang.serving.paired import paired_ab

        (out / "ab.jsonl").unlink(missing_ok=True)
        report = paired_ab(patches, model_path, load_format, server_args, opts, out, runs or 8, warmup, b_first,
                           target_width, aa_dir, console=console, err_console=err_console, min_window_s=min_window)
        console.out(f"wrote {out / 'ab.jsonl'} and {report}")
        return
    from astra_sglang.serving import designs, license, report as report_mod, runner, summary
    from astra_sglang.serving.client import ClientSettings

    if design == "restarts" and not control and not license.licensed_by(aa_dir, "restarts", min_window):
        err_console.out("note: the restarts design makes no claim without a passing restarts A/A (--aa): one server "
                        "at a time leaves the host's drift between starts in the comparison")

    plan = runner.RunPlan(design=design, client=ClientSettings.from_opts(opts), model_path=model_path,
                          load_format=load_format, server_args=list(server_args), control=control,
                          patches=str(patches.resolve()) if patches else None,
                          patches_sha=runner.folder_digest(patches), gpus=gpu_list, port=port,
                          vocab=model_vocab(model_path),
                          periods=designs.schedule(design, runs or (8 if design == "crossover" else 3), rounds,
                                                   gpu_list))
    plan = runner.load_or_write_plan(out, plan)
    ran = runner.run(plan, out, runner.default_launch(plan, out),
                     on_period=lambda: report_mod.write_design_report(out, aa_dir, min_window), stop_after=stop_after,
                     health_timeout=health_timeout, stagger_first=not no_stagger, console=console,
                     min_window_s=min_window)
    path = report_mod.write_design_report(out, aa_dir, min_window)
    short = summary.RunSummary.model_validate_json((out / summary.SUMMARY).read_text()).short_windows
    if short:
        err_console.out(f"warning: {short}: the report's changes measure those rounds, not the servers")
    console.out(f"{ran} period(s) run; wrote {out / runner.ROWS} and {path}")
