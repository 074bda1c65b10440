"""The `onboard` command: a spec for another SGLang op, from its entry point and recorded calls."""
from __future__ import annotations

import re
from pathlib import Path

import click

from astra_sglang.errors import AstraError


@click.command()
@click.argument("entry")
@click.option("--shapes", "calls", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help='Recorded calls, JSON: [{"tensors": {"x": {"shape": [16, 8192], "dtype": "bfloat16"}, ...}, '
                   '"scalars": {...}, "returns": [...]}, ...] (`launch --record-calls` writes them).')
@click.option("--model", help="Name dims after this model's config fields where sizes match (extract/models.toml), "
                              "so the spec gets the `models` shape set.")
@click.option("--name", help="Spec name (default: the function's name; PACKAGE_FUNCTION where the tool ships an op of "
              "that name, e.g. flashinfer_rmsnorm).")
@click.option("--reference", metavar="MODULE:FUNC", help="A torch reference of yours (fp64, the spec's arguments in "
              "order, writing the outputs): accepted once it agrees with the op on the GPU.")
@click.option("--reference-llm", metavar="MODEL", help="Have the testing agent write the torch reference (a model "
              "on the OpenAI-compatible endpoint of OPENAI_BASE_URL / OPENAI_API_KEY): accepted once it agrees with "
              "the op on the GPU.")
@click.option("--force", is_flag=True, help="Replace a user spec of that name.")
def onboard(entry: str, calls: Path, model: str | None, name: str | None, reference: str | None,
            reference_llm: str | None, force: bool) -> None:
    """Write a spec for ENTRY (MODULE:FUNCTION) into the user folder and check it on CPU.

    Arguments come from the signature (read from source where the module does not import here), roles from
    names, docstrings and what the op returns (a returned tensor becomes an output argument), dims, shapes,
    dtypes and index ranges from the recorded calls. The reference is a torch one where found (yours, the
    tool's, SGLang's forward_native), accepted once it agrees with the op on the GPU, else the op itself on
    the GPU. A table shows every guess; nothing is written unless the CPU check passes (and, on a machine
    with a GPU, the first GPU run: the op's dtypes and tolerance, the reference against it).

    \b
    Example:
      astra-sglang onboard sglang.srt.layers.activation:gelu_and_mul --shapes calls.json --model llama-3-8b
    """
    from astra_sglang.onboard.report import print_report
    from astra_sglang.onboard.writer import load_calls, onboard as run
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
    done = run(entry, load_calls(calls), name=name, model=config, force=force, source=str(calls),
               reference=reference, reference_llm=reference_llm)
    print_report(done, done.sources, click.echo)
