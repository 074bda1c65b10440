"""`astra-sglang kernels` and `astra-sglang bench`: the ops the tool knows, and one op's kernel checked and timed
against a baseline in an isolated process."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from astra_sglang.errors import AstraError


@click.command()
@click.argument("kernel", required=False)
def kernels(kernel: str | None) -> None:
    """List the kernel specs (the package's and the user folder's) with their shape counts; a spec file
    that does not load is one error line. With KERNEL: that op only (exit 1 if its spec is bad).

    \b
    Example:
      astra-sglang kernels
      astra-sglang kernels rotary_embedding
    """
    from astra_sglang.specs.registry import get_spec, model_shapes, registry

    reg = registry()
    specs = [get_spec(kernel)] if kernel else list(reg.specs.values())
    table = Table(title="kernel specs")
    for col in ("kernel", "dims", "dtypes", "paper", "models", "edge", "held out", "SGLang targets"):
        table.add_column(col)
    unlisted = []
    for spec in specs:
        try:  # a spec that loads but whose shape sets do not resolve is one line, never the whole listing
            row = [spec.name, "x".join(spec.dims), ",".join(spec.dtypes), str(len(spec.shapes.paper)),
                   str(len(model_shapes(spec))), str(len(spec.shapes.edge) + len(spec.edge_cases)),
                   str(len(spec.shapes.held_out)), "\n".join(f"{t.module}:{t.attr}" for t in spec.sglang_targets)]
        except Exception as exc:  # noqa: BLE001 - any error of one spec's data
            if kernel:
                raise AstraError(f"{reg.paths.get(spec.name, spec.name)}: its shapes do not resolve: "
                                 f"{type(exc).__name__}: {exc}") from None
            unlisted.append(f"{reg.paths.get(spec.name, spec.name)}: skipped, its shapes do not resolve: "
                            f"{type(exc).__name__}: {exc}")
            continue
        table.add_row(*row)
    Console(width=max(Console().width, 160)).print(table)
    for op, path in sorted(reg.overrides.items()):
        if not kernel or op == kernel:
            click.echo(f"note: {op}: the user spec {path} replaces the package's")
    if not kernel:
        for line in [*reg.errors.values(), *unlisted]:
            click.echo(f"error: {line}", err=True)


@click.command()
@click.argument("kernel")
@click.option("--candidate", help="Kernel .cu to evaluate, or py:MODULE:FUNCTION for a Python op "
              "(default: the patch `launch` would serve, with its manifest's defines: the user folder's "
              "HOME/patches/KERNEL/, else the shipped patches/KERNEL/).")
@click.option("--baseline", help="Kernel .cu to compare against, e.g. an extracted DIR/kernel.cu; "
              "py:MODULE:FUNCTION for a Python op such as py:sgl_kernel:rmsnorm; 'sglang' for the first call site "
              "the installed SGLang binds; 'reference' for the tool's reference kernel, astra_sglang/kernels/KERNEL.cu "
              "(default: SGLang's own op where SGLang imports, else the reference kernel).")
@click.option("--shapes", default="quick", show_default=True,
              help="Shape set (quick, paper, models, edge, held_out, all, gate, served; join with '+'), a list like "
                   "16x4096,32x8192, or an `astra-sglang profile` JSON (the shapes the server ran).")
@click.option("--dtypes", help="Comma-separated dtypes (default: bfloat16 and float16 where the spec has them, else "
              "its first dtype).")
@click.option("-D", "defines", multiple=True, help="Compile-time knob for the candidate, NAME=VALUE (repeatable).")
@click.option("--no-check", is_flag=True, help="Time only (skip the correctness trials; every timed launch's "
              "output is still compared with the reference after timing).")
@click.option("--no-time", is_flag=True, help="Check only (skip the timing).")
@click.option("--out", type=click.Path(dir_okay=False), help="JSONL file to append results to "
              "(default: runs/bench-KERNEL-TIME.jsonl).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=900.0, show_default=True,
              help="Hard limit for the isolated evaluation, seconds.")
@click.option("--l2", type=click.Choice(["cold", "hot"]), default="cold", show_default=True,
              help="cold: every launch its own argument set, the L2 emptied before every replay (every launch reads "
                   "DRAM); hot: one input set replayed, as when the producer kernel has just written it.")
@click.option("--sandwich", is_flag=True, help="Also time each shape in place: between the GEMMs before and after "
              "the op in the model (the spec's `sandwich`), candidate and baseline in one run, speedup on the op's "
              "share; `--shapes served` is the shapes a server runs (docs/timing.md).")
@click.option("--per-call", is_flag=True, help="Instead: the patch's eager call from Python against SGLang's own "
              "call, 1/16/64 tokens at the op's model widths, as a server calls it (needs SGLang and a GPU); --out "
              "is a folder for per_call.{jsonl,md}.")
@click.option("--ncu", is_flag=True, help="Instead: Nsight Compute facts of the patch and of SGLang's op at each of "
              "--shapes, one launch each (needs ncu and a GPU); --out is a folder for ncu.{jsonl,md}.")
def bench(kernel, candidate, baseline, shapes, dtypes, defines, no_check, no_time, out, timeout, l2, sandwich,
          per_call, ncu) -> None:
    """Build, check and time KERNEL on every shape; print a table and write JSONL.

    By default the patch for KERNEL (the user folder's HOME/patches/KERNEL/ over the shipped patches/KERNEL/,
    as `launch` layers them) against SGLang's own op, or against the tool's reference kernel where SGLang does
    not import; the first line says which. Each evaluation runs in a child process
    with a hard timeout. Reports median kernel time (CUDA-graph replay, L2 cold unless --l2 hot, interleaved
    with the baseline) with its p10-p90 spread, achieved GB/s, % of an SM-copy roofline measured in the same
    run, the speedup over the baseline, and, separately, per-call time from Python ("eager": one call at a
    time through ctypes, host clock; at small shapes the host's work per call sets it, not the kernel).

    \b
    Examples:
      astra-sglang bench silu_and_mul
      astra-sglang bench fused_add_rmsnorm --shapes paper --dtypes bf16
      astra-sglang bench rmsnorm --baseline sglang
      astra-sglang bench silu_and_mul --baseline work/extract/silu_and_mul-sglang/kernel.cu --shapes 16x4096
      astra-sglang bench silu_and_mul --candidate my_silu.cu -D BLOCK=256 --l2 hot
      astra-sglang bench rmsnorm --shapes served --dtypes bf16 --sandwich
      astra-sglang bench rmsnorm --per-call
      astra-sglang bench rmsnorm --ncu --shapes paper --out ncu-rmsnorm
    """
    from astra_sglang.baselines.defaults import baseline_side, candidate_side
    from astra_sglang.harness.build import parse_defines
    from astra_sglang.harness.inputs import canonical_dtype
    from astra_sglang.harness.isolate import describe_event, evaluate, watching
    from astra_sglang.harness.records import EvalRequest, KernelSource
    from astra_sglang.harness.report import print_result, write_jsonl
    from astra_sglang.paths import writable_folder
    from astra_sglang.progress import step
    from astra_sglang.specs.registry import get_spec, shapes_given

    if no_check and no_time:
        raise AstraError("--no-check and --no-time leave nothing to do")
    spec = get_spec(kernel)
    if spec.onboard is not None and not spec.onboard.gpu_check and _has_gpu():
        from astra_sglang.onboard.gpu_check import first_gpu_run
        from astra_sglang.specs.registry import registry, reload

        first_gpu_run(spec, registry().paths[kernel], click.echo)  # what `onboard` left for a GPU
        reload()
        spec = get_spec(kernel)
    dtypes = dtypes or ",".join([d for d in ("bfloat16", "float16") if d in spec.dtypes] or spec.dtypes[:1])
    if per_call and ncu:
        raise AstraError("--per-call and --ncu are two runs: ask for one at a time")
    if per_call or ncu:
        sys.exit(_per_call(kernel, out) if per_call else _ncu(spec, shapes, out))
    try:
        dtype_list = [canonical_dtype(d) for d in dtypes.split(",") if d.strip()]
    except ValueError as exc:
        raise AstraError(str(exc)) from None
    if not dtype_list:
        raise AstraError(f"--dtypes {dtypes!r} names no dtype; {kernel} runs over {', '.join(spec.dtypes)}")
    unsupported = [d for d in dtype_list if d not in spec.dtypes]
    if unsupported:
        raise AstraError(f"{kernel} does not support {unsupported}; it supports {spec.dtypes}")
    shape_list = shapes_given(spec, shapes)  # every input is checked before anything is built
    knobs = parse_defines(defines)
    cand = candidate_side(kernel, candidate, knobs)
    base = baseline_side(spec, baseline)
    if not base.path:
        raise AstraError(f"no SGLang call site is known for {kernel}; pass --baseline")
    if not base.path.startswith("py:") and not Path(base.path).is_file():
        raise AstraError(f"baseline not found: {base.path} ({base.what}); pass --baseline")
    path = Path(out or f"runs/bench-{kernel}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    writable_folder(path.parent, "--out")
    sides = f"{cand.describe()} vs {base.describe()}"
    req = EvalRequest(kernel=kernel, candidate=KernelSource(path=cand.path, defines=cand.defines, label=cand.label),
                      baseline=KernelSource(path=base.path, defines=base.defines, label=base.label),
                      shapes=shape_list, dtypes=dtype_list, check=not no_check,
                      time=not no_time, timeout_s=timeout, compile_only=not _has_gpu(), l2=l2,
                      sandwich="any" if sandwich else "off")
    if not req.compile_only:
        click.echo(f"{kernel}: {sides}")
    with step(f"{kernel}: {'building' if req.compile_only else 'evaluating'} {cand.label} and {base.label}",
              say_done=False) as current, watching(lambda event: current.update(describe_event(event))):
        result = evaluate(req)
    if req.compile_only:
        if not result.ok:
            raise AstraError(result.reason)
        cached = " (cached)" if result.build.cached else ""
        raise AstraError(f"no CUDA GPU here: candidate and baseline built ({result.build.seconds:.1f}s{cached}); "
                         f"checking and timing need a GPU [{sides}]")
    print_result(result)
    note = eager_note(result)
    if note:
        click.echo(note)
    write_jsonl(result, path)
    click.echo(f"results: {path}")
    if not result.ok:
        sys.exit(1)


def _per_call(kernel: str, out: str | None) -> int:
    """bench --per-call: serving/per_call.py for this op's patch (the set `launch` serves)."""
    from astra_sglang.serving.per_call import CALLS_AS, TOKENS, main as per_call

    if kernel not in CALLS_AS:
        raise AstraError(f"--per-call knows how SGLang calls {', '.join(sorted(CALLS_AS))}; not {kernel}")
    if not _has_gpu():
        raise AstraError("--per-call needs a CUDA GPU (it calls SGLang's op and the patched one eagerly)")
    folder = Path(out or f"runs/per-call-{kernel}-{time.strftime('%Y%m%d-%H%M%S')}")
    code = per_call(folder, TOKENS, patches=None, ops=[kernel])
    click.echo(f"results: {folder}")
    return code


def _ncu(spec, shapes: str, out: str | None) -> int:
    """bench --ncu: profile/ncu_table.py for this op's patch and SGLang's op at the shapes asked for."""
    import shutil

    from astra_sglang.patchset.store import PatchStore
    from astra_sglang.profile.ncu_table import SGLANG, main as ncu_table
    from astra_sglang.specs.registry import shapes_given

    if spec.name not in SGLANG:
        raise AstraError(f"--ncu compares with SGLang's library for {', '.join(SGLANG)}; not {spec.name}")
    items = [f"{spec.name}:{'x'.join(map(str, s))}" for s in shapes_given(spec, shapes)]
    if not _has_gpu() or shutil.which("ncu") is None:
        raise AstraError("--ncu needs a CUDA GPU and Nsight Compute's ncu on PATH")
    entry = PatchStore().get(spec.name)
    folder = Path(out or f"runs/ncu-{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    ncu_table(folder, items, patches=entry.folder.parent)
    click.echo(f"results: {folder}")
    return 0


EAGER_HOST_BOUND = 1.5
"""An eager time this many times the graph time is the host's per-call work, not the kernel's."""


def eager_note(result) -> str:
    """One line explaining eager times far above the graph times (the same kernel, another measurement)."""
    rows = [s for s in result.shapes if s.candidate and s.eager_candidate_us]
    slow = [s for s in rows if s.eager_candidate_us > EAGER_HOST_BOUND * s.candidate.median_us]
    if not slow:
        return ""
    return (f"eager is over {EAGER_HOST_BOUND}x the graph time at {len(slow)} of {len(rows)} shapes: there the host's "
            "work per call from Python (dispatch, ctypes, launch) takes longer than the kernel, so eager measures the "
            "host; compare kernels by the graph columns (docs/timing.md)")


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False
