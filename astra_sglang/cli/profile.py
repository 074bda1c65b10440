"""`astra-sglang profile`: start (or attach to) an SGLang server, load it, record its steps, rank its kernels."""
from __future__ import annotations

import os
import time
from pathlib import Path

import click

from astra_sglang.errors import AstraError


def _model_dims(model_path: str, tp: int):
    from astra_sglang.profile.rank import ModelDims

    config = Path(model_path) / "config.json"
    return ModelDims.from_config(config, tp) if config.is_file() else None


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _engagement(stats_dir: Path) -> dict[str, dict[str, int]]:
    from astra_sglang.patching.stats import load_stats

    out: dict[str, dict[str, int]] = {}
    for process in load_stats(stats_dir):
        for name, op in process.ops.items():
            row = out.setdefault(name, {"calls": 0, "kernel_calls": 0, "fallbacks": 0, "deferred": 0})
            for key in row:
                row[key] += int(getattr(op, key))
    return out


@click.command()
@click.option("--url", help="Profile a running server (e.g. http://127.0.0.1:30000) instead of starting one.")
@click.option("--workload", type=click.Choice(["decode", "prefill", "both"]), default="both", show_default=True,
              help="decode: 64 concurrent requests, 256 tokens in / 512 out; prefill: 16 concurrent, 2048 in / 8 out.")
@click.option("--steps", default=30, show_default=True, help="Scheduler steps recorded per workload.")
@click.option("--patched", is_flag=True, help="Start the server with the enabled patches (as `launch` does).")
@click.option("--patches", type=click.Path(file_okay=False, path_type=Path), help="Patch folder (default: the shipped one with HOME/patches over it).")
@click.option("--compare", "base", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An earlier profile.json of the same load: kernel time per step per op, before and after.")
@click.option("--from-traces", "from_traces", multiple=True, metavar="PHASE=PATH",
              help="Rank existing trace files instead of running a server (e.g. decode=traces/decode/x.trace.json.gz).")
@click.option("--report", "saved", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Re-render an earlier profile.json (with --compare: against another) without a server.")
@click.option("--model-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The model's config.json, for shapes and bytes with --from-traces or a remote model path.")
@click.option("--roofline-gbps", type=float, help="With --from-traces: the copy roofline of the GPU the traces came from.")
@click.option("--empty-us", type=float, help="With --from-traces: that GPU's empty-kernel time in a graph.")
@click.option("--gpu", help="With --from-traces: the GPU's name, for the report.")
@click.option("--port", default=30123, show_default=True, help="Port of a server this command starts.")
@click.option("--health-timeout", default=900.0, show_default=True, help="Seconds to wait for a started server.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Output folder (default ./astra-profile/TIME).")
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
def profile(url, workload, steps, patched, patches, base, from_traces, saved, model_config, roofline_gbps, empty_us, gpu,
            port, health_timeout, out, server_args):
    """Where a live SGLang server spends its GPU time, and what each kernel would give back at the limit.

    Starts SGLang with SERVER_ARGS (after --) or attaches to --url, drives SGLang's own serving benchmark
    (a decode-heavy and a prefill-heavy load), records --steps scheduler steps of each through SGLang's
    /start_profile (torch profiler traces), and ranks every GPU kernel: time, calls, share of GPU time, the
    op behind it (an op with a spec here, an SGLang op without one, or a library kernel this tool does not
    touch), bytes moved against the copy roofline measured on this GPU, and the gain if it ran at the limit.
    Writes OUT/profile.json (also a shape source: `bench OP --shapes OUT/profile.json`), OUT/profile.md,
    OUT/profile.png and keeps the traces in OUT/traces/.

    \b
    Examples:
      astra-sglang profile -- --model-path ./llama-8b --load-format dummy --attention-backend triton
      astra-sglang profile --patched --compare base/profile.json -- --model-path ./llama-8b --load-format dummy
      astra-sglang profile --url http://127.0.0.1:30000 --workload decode --steps 50
      astra-sglang profile --from-traces decode=run/traces/decode/t.trace.json.gz --model-config ./llama-8b/config.json
      astra-sglang profile --report patched/profile.json --compare base/profile.json --out patched
    """
    from astra_sglang.profile.build import build_profile
    from astra_sglang.profile.compare import compare
    from astra_sglang.profile.drive import WORKLOADS
    from astra_sglang.profile.records import Profile
    from astra_sglang.profile.report import print_deltas, print_profile, write

    out = (out or Path("astra-profile") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    names = ["decode", "prefill"] if workload == "both" else [workload]
    if saved:
        try:
            result = Profile.model_validate_json(saved.read_text())
        except ValueError as exc:
            raise AstraError(f"{saved} is not an astra-sglang profile: {str(exc).splitlines()[0]}") from None
    elif from_traces:
        traces = {}
        for item in from_traces:
            phase, _, path = item.partition("=")
            if not path or not Path(path).exists():
                raise AstraError(f"--from-traces wants PHASE=PATH with an existing path, got {item!r}")
            found = sorted(Path(path).glob("*.trace.json*")) if Path(path).is_dir() else [Path(path)]
            traces[phase] = found
        from astra_sglang.profile.ceilings import Ceilings
        from astra_sglang.profile.rank import ModelDims

        dims = ModelDims.from_config(model_config) if model_config else None
        ceilings = Ceilings(gpu=gpu or "", roofline_gbps=roofline_gbps, empty_us=empty_us or 0.0) if roofline_gbps else None
        result = build_profile(traces, dims, ceilings)
    else:
        result = _live(url, names, steps, patched, patches, model_config, port, health_timeout, out, server_args)
        result.workload = WORKLOADS[names[0]] if len(names) == 1 else None
    before = Profile.model_validate_json(base.read_text()) if base else None
    deltas = compare(before, result) if before else None
    report = write(result, out, deltas, before, str(base) if base else "")
    print_profile(result)
    if deltas:
        print_deltas(deltas)
    click.echo(f"wrote {out / 'profile.json'} and {report}")


def _live(url, names, steps, patched, patches, model_config, port, health_timeout, out, server_args):
    from astra_sglang.profile.build import build_profile, phase_steps
    from astra_sglang.profile.ceilings import measure
    from astra_sglang.profile.drive import WORKLOADS, Server, attach, profile_load
    from astra_sglang.serving.server import server_command, start_server, stop_server, wait_healthy

    if not url and not server_args:
        raise AstraError("give --url of a running server, or the server's arguments after -- "
                         "(e.g. -- --model-path M --load-format dummy)")
    if url and patched:
        raise AstraError("--patched starts its own server: drop --url")
    proc, stats_dir = None, out / "stats"
    traces: dict[str, list[Path]] = {}
    server = attach(url) if url else None  # fails fast, before the probe
    ceilings = measure()  # before a started server takes the GPU's memory
    try:
        if server is None:
            args = list(server_args)
            model = _option(args, "--model-path") or _option(args, "--model")
            if not model:
                raise AstraError("the server's arguments need --model-path")
            extra = args
            for name in ("--model-path", "--model", "--host", "--port"):
                extra = _without(extra, name)
            argv = server_command(model, port, None, extra)
            env = dict(os.environ)
            if patched:
                from astra_sglang.patching.server_env import patched_server
                from astra_sglang.patching.stats import ENV_STATS_INTERVAL

                env, argv, summary = patched_server(patches, stats_dir=stats_dir, server_args=argv[3:])
                env = {**env, ENV_STATS_INTERVAL: "2"}
                click.echo(summary)
            out.mkdir(parents=True, exist_ok=True)
            click.echo("starting: " + " ".join(argv))
            proc = start_server(argv, env, out / "server.log")
            seconds = wait_healthy(proc, port, out / "server.log", health_timeout)
            click.echo(f"server healthy after {seconds:.0f} s")
            server = Server(url=f"http://127.0.0.1:{port}", model_path=model,
                            tp=int(_option(args, "--tp") or _option(args, "--tp-size") or 1))
        alive = (lambda: proc.poll() is None) if proc else (lambda: True)
        for name in names:
            click.echo(f"profiling the {name} load ({steps} steps)")
            traces[name] = profile_load(server, WORKLOADS[name], out / "traces" / name, steps, alive=alive)
            got = phase_steps(traces[name], name)
            if got < max(3, steps // 4):  # too few of the load's own phase to rank: once more, 4x the steps
                click.echo(f"only {got} {name} steps among the {steps} recorded: recording {4 * steps} steps")
                traces[name] = profile_load(server, WORKLOADS[name], out / "traces" / f"{name}-more", 4 * steps,
                                            alive=alive)
    finally:
        if proc is not None:
            if patched:
                time.sleep(3)  # one more stats write of the patch layer
            stop_server(proc)
    from astra_sglang.profile.rank import ModelDims

    dims = ModelDims.from_config(model_config, server.tp) if model_config else _model_dims(server.model_path, server.tp)
    if dims is None:
        click.echo("warning: the model's config.json is not readable here: no shapes or bytes (give --model-config)")
    return build_profile(traces, dims, ceilings, model=Path(server.model_path).name, server=list(server_args),
                         patched=patched, workloads={n: WORKLOADS[n] for n in names},
                         engagement=_engagement(stats_dir) if patched else None)


def _without(args: list[str], name: str) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == name:
            skip = True
            continue
        if arg.startswith(name + "="):
            continue
        out.append(arg)
    return out
