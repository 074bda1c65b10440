"""`astra-sglang launch`: SGLang's server with the enabled patches in every process it spawns."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click

from astra_sglang.cli.patch import PATCHES_OPTION, _errors
from astra_sglang.errors import AstraError
from astra_sglang.patching import hook
from astra_sglang.patching.server_env import patched_server
from astra_sglang.serving.model import check_server_args


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@PATCHES_OPTION
@click.option("--verify-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Probability per call of a shadow run of the original on cloned inputs (and timing of both).")
@click.option("--stats-dir", type=click.Path(path_type=Path), default=None,
              help="Per-process stats files (default: ./astra-stats/<timestamp>).")
@click.option("--mechanism", type=click.Choice(["auto", *hook.MECHANISMS]), default="auto", show_default=True,
              help="How patches reach SGLang's spawned processes.")
@click.option("--no-build", is_flag=True, help="Skip pre-building the kernels (workers build on first use).")
@click.option("--dry-run", is_flag=True, help="Print the environment and command instead of running them.")
@click.option("--record-calls", "record", metavar="MODULE:FUNC[,...]",
              help="Record each distinct call (argument shapes, dtypes, scalars) of these functions in every SGLang "
              "process, as `onboard --shapes` reads them.")
@click.option("--record-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The recorded calls' JSON file (default STATS_DIR/calls.json); several functions: one file "
              "each, named FILE-STEM.FUNC.json.")
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
@_errors
def launch_cmd(patches, verify_rate, stats_dir, mechanism, no_build, dry_run, record, record_out, server_args):
    """Start `python -m sglang.launch_server` with the enabled patches in every SGLang process.

    \b
    Examples:
      astra-sglang launch -- --model-path ./llama-8b --load-format dummy
      astra-sglang launch --verify-rate 0.01 --mechanism import-hook -- --model-path M
      astra-sglang launch --record-calls sglang.srt.layers.activation:gelu_and_mul -- --model-path M
    """
    warn = lambda msg: click.echo(f"warning: {msg}", err=True)  # noqa: E731
    check_server_args(server_args, lambda msg: click.echo(f"note: {msg}", err=True))  # before builds and SGLang
    env, command, summary = patched_server(patches, verify_rate, stats_dir, mechanism, no_build, server_args,
                                           warn=warn,
                                           record=record, record_out=record_out)
    click.echo(summary)
    if dry_run:
        for key in sorted(k for k in env if k.startswith(("ASTRA_SGLANG_", "SGLANG_PLUGINS", "PYTHONPATH",
                                                          "SGLANG_MOE_CONFIG_DIR"))):
            click.echo(f"{key}={env[key]}")
        click.echo(" ".join(command))
        return
    if shutil.which(sys.executable) is None:
        raise AstraError(f"python interpreter not found: {sys.executable}")
    os.execvpe(command[0], command, env)
