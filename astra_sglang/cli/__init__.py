"""The `astra-sglang` command line: the group, and every command family under it (one module each)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from astra_sglang.errors import AstraError


class _Group(click.Group):
    """Turns AstraError into one line on stderr and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AstraError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)


def _set_home(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # An environment variable, not a context object: spawned workers and SGLang's processes see it too.
    if value:
        import os

        from astra_sglang.paths import ENV_HOME
        from astra_sglang.specs.registry import reload

        os.environ[ENV_HOME] = str(Path(value).expanduser().resolve())
        reload()


@click.group(cls=_Group)
@click.version_option(package_name="astra-sglang")
@click.option("--home", type=click.Path(file_okay=False), callback=_set_home, expose_value=False, is_eager=True,
              help="User folder for your own op specs (specs/*.toml) and patches (patches/<op>/) "
                   "[env ASTRA_SGLANG_HOME; default ~/.astra-sglang].")
def main() -> None:
    """Make SGLang's GPU kernels faster, and prove it.

    \b
    astra-sglang kernels                      # the ops it knows
    astra-sglang onboard MODULE:FUNC          # write a spec for another SGLang op
    astra-sglang extract fused_add_rmsnorm    # SGLang's kernel as a standalone harness
    astra-sglang bench silu_and_mul           # its patch (yours, else shipped) vs SGLang's own
    astra-sglang optimize silu_and_mul        # agents (with --llm) or the built-in tuner
    astra-sglang tune fused_moe --model M     # SGLang's Triton fused MoE configs, per batch size
    astra-sglang launch -- --model-path M     # SGLang with the patches in every process
    """


def _register_commands() -> None:
    """One module per command family; each command imports its library code when it runs."""
    from astra_sglang.cli.ab import ab
    from astra_sglang.cli.bench import bench, kernels
    from astra_sglang.cli.extract import extract
    from astra_sglang.cli.launch import launch_cmd
    from astra_sglang.cli.onboard import onboard
    from astra_sglang.cli.optimize import optimize
    from astra_sglang.cli.patch import register
    from astra_sglang.cli.profile import profile
    from astra_sglang.cli.tune import tune

    main.add_command(kernels)
    main.add_command(bench)
    main.add_command(profile)
    main.add_command(extract)
    main.add_command(onboard)
    main.add_command(optimize)
    main.add_command(tune)
    register(main)
    main.add_command(launch_cmd)
    main.add_command(ab)


_register_commands()
