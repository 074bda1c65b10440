"""The `onboard` command: a spec for another SGLang op, from its entry point and recorded calls."""
from __future__ import annotations

import re
from pathlib import Path

import click

from astra_sglang.errors import AstraError


@click.command()
@click.argument("entry")
@click.option("--shapes", "calls", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help='Recorded calls, JSON: [{"tensors": {"x": {"shape": [16, 8192], "dtype": "bfloat16"}, ...}}, ...].')
@click.option("--model", help="Name dims after this model's config fields where sizes match (extract/models.toml), "
                              "so the spec gets the `models` shape set.")
@click.option("--name", help="Spec name (default: the function's name).")
@click.option("--force", is_flag=True, help="Replace a user spec of that name.")
def onboard(entry: str, calls: Path, model: str | None, name: str | None, force: bool) -> None:
    """Write a spec for ENTRY (MODULE:FUNCTION) into the user folder and check it on CPU.

    Arguments come from the signature (keyword-only and defaulted ones included), dims and shapes from the
    recorded calls, dtypes from calling the op on CPU where it runs (else the recorded ones), the reference
    from the tool's own fp64 references, SGLang's forward_native or a *_native function, else the op itself.

    \b
    Example:
      astra-sglang onboard sglang.srt.layers.activation:gelu_and_mul --shapes calls.json --model llama-3-8b
    """
    from astra_sglang.onboard.writer import load_calls, onboard as run
    from astra_sglang.paths import user_patches_dir
    from astra_sglang.specs.registry import models

    if name and not re.match(r"^[A-Za-z_]\w*$", name):
        raise AstraError(f"--name {name!r}: a spec name is an identifier (letters, digits and _, not starting with a "
                         "digit): it names the spec file and the op in every command")
    config = None
    if model:
        found = {m.name: m for m in models()}
        if model not in found:
            raise AstraError(f"unknown model {model!r}; known: {', '.join(found)}")
        config = found[model].model_dump()
    done = run(entry, load_calls(calls), name=name, model=config, force=force, source=str(calls))
    click.echo(f"wrote {done.spec_path}")
    if done.reference_path:
        click.echo(f"wrote {done.reference_path} (reference: {done.reference.note})")
    else:
        click.echo(f"reference: {done.reference.target} ({done.reference.note})")
    click.echo(f"dtypes {', '.join(done.dtypes)}; {len(done.shapes)} recorded shapes")
    for line in done.checks:
        click.echo(f"  ok: {line}")
    click.echo("next: review the spec (roles, dims, tolerances), then\n"
               f"  astra-sglang bench {done.name} --baseline py:{entry} --no-time   # on a GPU: check\n"
               f"  astra-sglang extract {done.name}                                # add [sources] first\n"
               f"  astra-sglang optimize {done.name} --patches-dir {user_patches_dir()}")
