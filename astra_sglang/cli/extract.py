"""The `astra-sglang extract` command (the lead adds `extract` to the CLI group)."""
from __future__ import annotations

from pathlib import Path

import click

from astra_sglang.errors import AstraError


@click.command("extract")
@click.argument("kernel")
@click.option("--from", "source", metavar="SOURCE", default=None,
              help="sglang | flashinfer (installed package) | sgl-kernel, or a path: an unpacked sglang / flashinfer "
                   "package (or a folder holding them) or an SGLang git checkout. Default: the first of the spec's "
                   "[sources] found installed.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default work/extract/<kernel>-<source>/; third-party code: keep it git-ignored).")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Compile kernel.cu with nvcc (skipped without nvcc); a failure names the original file and line.")
@click.option("--knobs", is_flag=True, help="Also derive tuner knobs from the launch path into OUT/knobbed.cu "
              "(block sizes, vector widths, template literals, loop constants; docs/harness.md).")
def extract(kernel: str, source: str | None, out_dir: Path | None, check: bool, knobs: bool) -> None:
    """Extract KERNEL's original CUDA into a standalone harness folder (Triton kernels: where they live).

    Takes the kernel's transitive closure with libclang (device functions, templates and their
    specializations, macros, constants, types, namespaces), bakes in the configuration it was parsed
    under, and appends a generated C-ABI launcher (`astra_launch`). Writes kernel.cu, spec.toml and
    provenance.json. kernel.cu builds with plain nvcc and is accepted as a baseline by `bench`.

    A Triton kernel (a spec whose source is `language = "triton"`, or any kernel named in a Python file given
    with --from FILE.py) is read with `ast`: its launchers, the values each constexpr and launch option comes
    from, and the config files SGLang picks them from; written to OUT/discovery.json (docs/triton.md).

    \b
    Examples:
      astra-sglang extract silu_and_mul                      # installed sglang's JIT kernel
      astra-sglang extract rmsnorm --from flashinfer
      astra-sglang extract gelu_and_mul --knobs              # + knobbed.cu for `optimize --tuner --from DIR`
      astra-sglang extract merge_state --from ./site-packages/flashinfer
      astra-sglang extract merge_attn_states_lse --from ~/src/sglang --out work/extract/mas
      astra-sglang bench rmsnorm --baseline work/extract/rmsnorm-flashinfer/kernel.cu
      astra-sglang extract fused_moe                          # SGLang's Triton fused MoE and its config files
      astra-sglang extract _fwd_grouped_kernel_stage1 --from kernels/ops/attention/decode_attention.py
    """
    from astra_sglang.extraction.triton.extract import extract_triton, triton_source

    try:
        if triton_source(kernel, source):  # Python: ast, no libclang
            from astra_sglang.triton.moe.configs import shipped

            click.echo(extract_triton(kernel, source, out_dir, config_files=shipped).summary())
            return
    except AstraError as exc:
        raise click.ClickException(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc
    from astra_sglang.extraction.pipeline import extract as run  # libclang loads only when used

    try:
        import shutil

        from astra_sglang.progress import step

        checked = check and shutil.which("nvcc") is not None
        with step(f"extracting {kernel} (libclang{', then nvcc' if checked else ''})", say_done=False):
            result = run(kernel, source, out_dir, check=checked)
    except AstraError as exc:
        raise click.ClickException(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc
    click.echo(f"extracted {kernel} from {result.source_kind} {result.version}".rstrip()
               + f": {result.units} units, {result.lines} lines in {result.seconds:.1f}s -> {result.kernel_cu}")
    if knobs:
        from astra_sglang.extraction.knobgen import write_knobbed

        try:
            path, derivation = write_knobbed(result.kernel_cu)
        except AstraError as exc:
            raise click.ClickException(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc
        click.echo(derivation.summary(str(path or result.kernel_cu)))
