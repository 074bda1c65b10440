"""`astra-sglang profile`: start (or attach to) an SGLang server, load it, record its steps, rank its kernels."""
from __future__ import annotations

import os
import time
from pathlib import Path

import click

from astra_sglang.errors import AstraError


def _model_dims(model_path: str, tp: int):
    """The served model's dims from its folder's config.json; None where there is none or it is no model config
    (the caller says so: the table then has no shapes or bytes, and the profile is not lost)."""
    from astra_sglang.profile.rank import ModelDims

    config = Path(model_path) / "config.json"
    try:
        return ModelDims.from_config(config, tp) if config.is_file() else None
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def _check_model_config(path: Path) -> None:
    """--model-config read before anything runs: AstraError where it is no model's config.json."""
    from astra_sglang.profile.rank import ModelDims

    try:
        ModelDims.from_config(path)
    except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        what = f"no field {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise AstraError(f"--model-config {path}: not a model's config.json ({what})") from None


def _url(value: str | None) -> str | None:
    """--url as http(s)://HOST[:PORT] (a bare host:port gets http://); click's usage error otherwise."""
    from urllib.parse import urlparse

    if value is None:
        return None
    url = value if "://" in value else f"http://{value}"
    parsed = urlparse(url)
    try:
        parsed.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise click.BadParameter(f"{value!r} is no server URL; give http://HOST:PORT, e.g. http://127.0.0.1:30000")
    return url.rstrip("/")


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
@click.option("--url", callback=lambda ctx, param, value: _url(value),
              help="Profile a running server (e.g. http://127.0.0.1:30000) instead of starting one.")
@click.option("--workload", type=click.Choice(["decode", "prefill", "both"]), default="both", show_default=True,
              help="decode: 64 concurrent requests, 256 tokens in / 512 out; prefill: 16 concurrent, 2048 in / 8 out.")
@click.option("--steps", type=click.IntRange(min=1), default=30, show_default=True,
              help="Scheduler steps recorded per workload.")
@click.option("--concurrency", type=click.IntRange(min=1),
              help="Concurrent requests of each load, in place of its own (e.g. 1: a decode at batch 1, as a "
                   "one-request-at-a-time client serves).")
@click.option("--patched", is_flag=True, help="Start the server with the enabled patches (as `launch` does).")
@click.option("--patches", type=click.Path(file_okay=False, path_type=Path), help="Patch folder (default: the shipped one with HOME/patches over it).")
@click.option("--compare", "base", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An earlier profile.json of the same load: kernel time per step per op, before and after.")
@click.option("--verdict", is_flag=True,
              help="With --compare on a patched profile: each patch's kernel time per step in place against SGLang's "
                   "op, written into its manifest; a patch slower in place is disabled, or its defer moved to the "
                   "sizes where it is slower (the patch set of --patches).")
@click.option("--from-traces", "from_traces", multiple=True, metavar="PHASE=PATH",
              help="Rank existing trace files instead of running a server (e.g. decode=traces/decode/x.trace.json.gz).")
@click.option("--report", "saved", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Re-render an earlier profile.json (with --compare: against another) without a server.")
@click.option("--model-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The model's config.json, for shapes and bytes with --from-traces or a remote model path.")
@click.option("--roofline-gbps", type=click.FloatRange(min=0, min_open=True), help="With --from-traces: the copy roofline of the GPU the traces came from.")
@click.option("--empty-us", type=click.FloatRange(min=0), help="With --from-traces: that GPU's empty-kernel time in a graph.")
@click.option("--gpu", help="With --from-traces: the GPU's name, for the report.")
@click.option("--port", type=click.IntRange(1, 65535), default=30123, show_default=True, help="Port of a server this command starts.")
@click.option("--health-timeout", type=click.FloatRange(min=0, min_open=True), default=900.0, show_default=True, help="Seconds to wait for a started server.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Output folder (default ./astra-profile/TIME).")
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
def profile(url, workload, steps, concurrency, patched, patches, base, verdict, from_traces, saved, model_config,
            roofline_gbps, empty_us, gpu, port, health_timeout, out, server_args):
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
      astra-sglang profile --workload decode --concurrency 1 -- --model-path ./mixtral --load-format dummy
      astra-sglang profile --from-traces decode=run/traces/decode/t.trace.json.gz --model-config ./llama-8b/config.json
      astra-sglang profile --report patched/profile.json --compare base/profile.json --out patched
      astra-sglang profile --report patched/profile.json --compare base/profile.json --verdict --patches patches
    """
    from astra_sglang.profile.build import build_profile
    from astra_sglang.profile.compare import compare
    from astra_sglang.profile.records import Profile
    from astra_sglang.profile.report import print_deltas, print_profile, write

    if verdict and not base:
        raise click.UsageError("--verdict compares a patched profile with --compare BASE.json")
    if model_config:
        _check_model_config(model_config)
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
        result = _live(url, names, steps, patched, patches, model_config, port, health_timeout, out, server_args,
                       concurrency)  # build_profile records the load where there is one
    before = Profile.model_validate_json(base.read_text()) if base else None
    deltas = compare(before, result) if before else None
    report = write(result, out, deltas, before, str(base) if base else "")
    print_profile(result)
    if deltas:
        print_deltas(deltas)
    click.echo(f"wrote {out / 'profile.json'} and {report}")
    if verdict:
        _verdict(patches, deltas or [], result, f"{result.gpu}, {result.date}: {saved or out / 'profile.json'} "
                                                 f"against {base} (`profile --verdict`)", out)


def _verdict(patches, deltas, result, evidence: str, out: Path) -> None:
    import json

    from astra_sglang.patchset.store import PatchStore
    from astra_sglang.profile.verdict import apply, verdicts

    if not result.patched:
        raise AstraError("--verdict needs a patched profile (profile --patched, or --report of one)")
    store = PatchStore(patches)
    found = verdicts(store, deltas, result)
    (out / "verdict.json").write_text(json.dumps([v.model_dump() for v in found], indent=1) + "\n")
    for line in apply(store, found, evidence) or ["no patch served a call in these profiles: nothing to judge"]:
        click.echo(line)


def _live(url, names, steps, patched, patches, model_config, port, health_timeout, out, server_args,
          concurrency=None):
    from astra_sglang.profile.build import build_profile, phase_steps
    from astra_sglang.profile.ceilings import measure
    from astra_sglang.profile.drive import WORKLOADS, Server, attach, profile_load
    from astra_sglang.progress import step
    from astra_sglang.serving.server import server_command, start_server, stop_server, wait_healthy

    loads = {n: WORKLOADS[n] if concurrency is None else WORKLOADS[n].model_copy(update={"concurrency": concurrency})
             for n in names}  # each at --concurrency requests where given
    if not url and not server_args:
        raise AstraError("give --url of a running server, or the server's arguments after -- "
                         "(e.g. -- --model-path M --load-format dummy)")
    if url and patched:
        raise AstraError("--patched starts its own server: drop --url")
    if not url:  # before the GPU probe, the builds and the server's start
        from astra_sglang.serving.model import check_server_args

        check_server_args(server_args, lambda msg: click.echo(f"note: {msg}", err=True), required=True)
    proc, stats_dir = None, out / "stats"
    traces: dict[str, list[Path]] = {}
    server = attach(url) if url else None  # fails fast, before the probe
    with step("measuring this GPU's copy roofline and empty-kernel time"):
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
            with step(f"starting SGLang (log: {out / 'server.log'})", say_done=False):
                seconds = wait_healthy(proc, port, out / "server.log", health_timeout)
            click.echo(f"server healthy after {seconds:.0f} s")
            server = Server(url=f"http://127.0.0.1:{port}", model_path=model,
                            tp=int(_option(args, "--tp") or _option(args, "--tp-size") or 1))
        alive = (lambda: proc.poll() is None) if proc else (lambda: True)
        for name in names:
            click.echo(f"profiling the {name} load ({steps} steps)")
            with step(f"the {name} load", done=f"the {name} load: recorded in {{seconds:.1f}}s"):
                traces[name] = profile_load(server, loads[name], out / "traces" / name, steps, alive=alive)
            got = phase_steps(traces[name], name)
            if got < max(3, steps // 4):  # too few of the load's own phase to rank: once more, 4x the steps
                click.echo(f"only {got} {name} steps among the {steps} recorded: recording {4 * steps} steps")
                traces[name] = profile_load(server, loads[name], out / "traces" / f"{name}-more", 4 * steps,
                                            alive=alive)
    finally:
        if proc is not None:
            if patched:
                time.sleep(3)  # one more stats write of the patch layer
            stop_server(proc)
    from astra_sglang.profile.rank import ModelDims

    dims = ModelDims.from_config(model_config, server.tp) if model_config else _model_dims(server.model_path, server.tp)
    if dims is None:
        click.echo("warning: the model's config.json is not readable here or no model config: no shapes or bytes "
                   "(give --model-config)")
    return build_profile(traces, dims, ceilings, model=Path(server.model_path).name, server=list(server_args),
                         patched=patched, workloads=loads,
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
