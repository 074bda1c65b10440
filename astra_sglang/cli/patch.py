"""`astra-sglang patch list|enable|disable|record|verify` and `astra-sglang report`: the patch set on disk, and what a
patched server did with it. Also the options every command that serves patches shares (`--patches`).

The top-level CLI adds them with `register(main)`.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

import click

from astra_sglang.baselines.adapters import sglang_baseline
from astra_sglang.errors import AstraError
from astra_sglang.patching.stats import ENV_STATS_DIR, load_stats
from astra_sglang.patchset.store import PatchStore

PATCHES_OPTION = click.option("--patches", "patches", type=click.Path(file_okay=False, path_type=Path),
                              default=None, help="Patch folder, exactly (default: $ASTRA_SGLANG_PATCHES, else the shipped patches/ with "
                              "HOME/patches over them).")


def _errors(fn):
    """AstraError -> one line on stderr, exit 1 (click's own convention)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AstraError as exc:
            raise click.ClickException(str(exc)) from exc
    return wrapper


KIND_LABELS = {"triton-config": " (configs)", "triton-launch": " (launch configs)", "triton-source": " (source variant)"}


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


@click.group("patch")
def patch_group():
    """Manage the patch set: winning kernels patched into SGLang.

    \b
    Examples:
      astra-sglang patch list
      astra-sglang patch disable merge_attn_states_lse
      astra-sglang patch verify silu_and_mul --shapes quick
    """


@patch_group.command("list")
@PATCHES_OPTION
@_errors
def list_cmd(patches):
    """List patches: op, enabled, provenance, dtypes, measured speedup, where SGLang's original is kept
    (calls of at least that many bytes run the original, measured as fast there), SGLang targets, and where
    the patch comes from (shipped, user = HOME/patches, or its folder; "over" names the one it replaces).

    \b
    Example:
      astra-sglang patch list --patches ./my-patches
    """
    store = PatchStore(patches)
    rows = []
    for e in store.entries():
        speed, defer = e.speedup_geomean(), e.manifest.defer
        method = e.manifest.provenance.method + KIND_LABELS.get(e.manifest.kind, "")
        source = f"{e.origin} (over {e.shadows})" if e.shadows else e.origin
        rows.append([e.op, ("yes" if e.enabled else "no") + (" (yours)" if e.overridden else ""), method, ",".join(e.manifest.dtypes),
                     f"{speed:.2f}x" if speed else "-", defer.describe() if defer else "-",
                     e.manifest.sglang_versions, " ".join(map(str, e.targets)), source])
    if not rows:
        click.echo(f"no patches in {store.describe()}")
        return
    click.echo(_table(rows, ["op", "enabled", "method", "dtypes", "speedup", "original kept", "sglang", "targets", "from"]))


def _set(patches, op, enabled):
    from astra_sglang.patchset.store import state_path

    entry = PatchStore(patches).set_enabled(op, enabled)
    where = f"the shipped patch, by the override in {state_path()}" if entry.overridden else str(entry.folder)
    click.echo(f"{entry.op}: {'enabled' if enabled else 'disabled'} ({where})")


@patch_group.command("enable")
@click.argument("op")
@PATCHES_OPTION
@_errors
def enable_cmd(op, patches):
    """Enable patch OP (its manifest's `enabled`; for a shipped patch, an override in the user folder).

    Example: astra-sglang patch enable rmsnorm"""
    _set(patches, op, True)


@patch_group.command("disable")
@click.argument("op")
@PATCHES_OPTION
@_errors
def disable_cmd(op, patches):
    """Disable patch OP; `launch` leaves its targets alone.  Example: astra-sglang patch disable rmsnorm"""
    _set(patches, op, False)


@patch_group.command("record")
@click.argument("rows", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--patches", "patches", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The patch folder whose manifests take the figures (e.g. patches/ in a checkout).")
@click.option("--gpu", required=True, help="The GPU the rows were measured on, as the manifests record it.")
@click.option("--date", required=True, help="The day they were measured, YYYY-MM-DD.")
@click.option("--source", default="", help="The run behind them (GPU, date, commit, command): replaces what each "
              "manifest's notes say about `measured`.")
@_errors
def record_cmd(rows, patches, gpu, date, source):
    """Record a bench run's rows (ROWS: JSONL files `bench --out` wrote) in the manifests of the patches they
    timed against SGLang's own op: `measured`, the baseline, the provenance's GPU, date and source. What the
    patch says about itself (kernel, defines, targets, enabled) is kept.

    \b
    Example:
      astra-sglang patch record OUT/kernels.jsonl --patches patches --gpu "NVIDIA H100 80GB HBM3" \\
        --date 2026-12-01 --source "H100, 2026-12-01, commit abc1234, bash benchmarks/gpu/run_all.sh OUT"
    """
    from astra_sglang.patchset.record import read_rows, record, timed_against_sglang

    try:
        found = read_rows(rows)
    except ValueError as exc:
        raise AstraError(f"{', '.join(map(str, rows))}: not bench JSONL rows ({str(exc).splitlines()[0]})") from None
    ops = sorted({r["kernel"] for r in found if timed_against_sglang(r)})
    if not ops:
        raise AstraError(f"no row in {', '.join(map(str, rows))} times a shipped patch (patches/OP) against "
                         "SGLang's own op (a py: baseline)")
    entries = {e.op: e for e in PatchStore(patches).entries()}
    missing = [op for op in ops if op not in entries]
    if missing:
        raise AstraError(f"no patch {', '.join(missing)} in {patches}")
    for op in ops:
        manifest = record(entries[op].manifest, found, gpu, date, source)
        manifest.save(entries[op].folder)
        click.echo(f"{op}: {len(manifest.measured)} measured shapes recorded in {entries[op].folder}")


VERIFY_SHAPES = "quick+held_out"


@patch_group.command("verify")
@click.argument("op")
@PATCHES_OPTION
@click.option("--shapes", default=VERIFY_SHAPES, show_default=True, help="Shape set(s) or explicit list (16x4096,...).")
@click.option("--no-time", is_flag=True, help="Correctness only.")
@click.option("--sanitize", is_flag=True, help="Then compute-sanitizer memcheck and racecheck over the patch: one "
              "launch per dtype it serves and per edge, held-out, quick and paper shape the sanitizer can afford.")
@_errors
def verify_cmd(op, patches, shapes, no_time, sanitize):
    """Re-check patch OP against SGLang's original op on this GPU (isolated harness run).

    A config patch (fused_moe) is verified file by file at the batch sizes it tunes, or at --shapes given as
    batch sizes (1,64,4096).

    \b
    Examples:
      astra-sglang patch verify fused_add_rmsnorm --shapes 1x4096,128x4096
      astra-sglang patch verify fused_moe --patches my-patches
      astra-sglang patch verify rmsnorm --no-time --sanitize
    """
    import torch

    from astra_sglang.specs.registry import shapes_given

    entry = PatchStore(patches).get(op)
    if sanitize and entry.manifest.kind != "cuda":
        raise AstraError(f"--sanitize checks CUDA kernels; {op} is a {entry.manifest.kind} patch (SGLang's own kernel)")
    tokens = None
    if entry.manifest.kind == "triton-config" and shapes != VERIFY_SHAPES:  # batch sizes, 1,64,4096
        from astra_sglang.triton.moe.shapes import parse_buckets

        tokens = parse_buckets(shapes)
    elif entry.manifest.kind not in ("triton-config", "triton-launch"):
        shape_list = shapes_given(entry.spec, shapes)  # a bad --shapes is said before the GPU is asked for
    if not torch.cuda.is_available():
        raise AstraError("patch verify needs a CUDA GPU; none is visible here")
    from astra_sglang.harness.isolate import describe_event, evaluate, watching
    from astra_sglang.harness.records import EvalRequest, KernelSource
    from astra_sglang.progress import step

    if entry.manifest.kind == "triton-config":  # each config file's table against SGLang's own pick
        from astra_sglang.triton.moe.patch import verify_requests

        reqs = [r.model_copy(update={"time": not no_time}) for r in verify_requests(entry.folder, entry.manifest, tokens)]
    elif entry.manifest.kind == "triton-source":  # each file's variants (config and knobs) against SGLang's pick
        from astra_sglang.triton.moe.source_patch import verify_requests as source_requests

        tokens = [int(t) for t in shapes.split(",")] if shapes[:1].isdigit() else None
        reqs = [r.model_copy(update={"time": not no_time}) for r in source_requests(entry.folder, entry.manifest, tokens)]
    elif entry.manifest.kind == "triton-launch":  # each table against SGLang's own pick at its measured shapes
        from astra_sglang.triton.attention.patch import verify_requests as launch_requests

        reqs = [r.model_copy(update={"time": not no_time}) for r in launch_requests(entry.manifest)]
    else:
        baseline = sglang_baseline(entry.spec)
        reqs = [EvalRequest(kernel=entry.spec.name,
                            candidate=KernelSource(path=str(entry.kernel_path), label=f"patch:{op}",
                                                   defines=dict(entry.manifest.defines)),
                            baseline=KernelSource(path=baseline, label="sglang") if baseline else None,
                            shapes=shape_list, dtypes=list(entry.manifest.dtypes),
                            time=not no_time)]
    for req in reqs:
        with step(f"verifying {req.candidate.name()}", say_done=False) as current, \
                watching(lambda event: current.update(describe_event(event))):
            result = evaluate(req)
        rows = [[f"{'x'.join(map(str, s.shape))}", s.dtype, {True: "ok", False: "FAIL", None: "-"}[s.correct],
                 f"{s.speedup:.2f}x" if s.speedup else "-", s.reason or s.baseline_defect] for s in result.shapes]
        if rows:
            click.echo(_table(rows, ["shape", "dtype", "correct", "speedup", "note"]))
        if not result.ok:
            raise AstraError(f"patch {op} failed verification at stage {result.stage}: {result.reason}")
        speed = result.geomean_speedup
        click.echo(f"{op}: {req.candidate.name()} verified on {result.gpu}"
                   + (f", geomean speedup {speed:.2f}x" if speed else ""))
    if sanitize:
        sanitize_patch(entry, echo=click.echo)


SANITIZE_SHAPES = "edge+held_out+quick+paper"


def sanitize_patch(entry, echo) -> None:
    """compute-sanitizer (harness/sanitize.py) over a CUDA patch: AstraError on a finding, or where it cannot run."""
    from astra_sglang.harness.sanitize import SanitizeRequest, sanitize, small_shapes
    from astra_sglang.specs.registry import resolve_shapes

    req = SanitizeRequest(kernel=entry.spec.name, source=str(entry.kernel_path), defines=dict(entry.manifest.defines),
                          shapes=small_shapes(entry.spec, resolve_shapes(entry.spec, SANITIZE_SHAPES)),
                          dtypes=list(entry.manifest.dtypes))
    for report in sanitize(req):
        said = report.detail.strip().splitlines()[0] if report.detail.strip() else ""
        if not report.ran:
            raise AstraError(f"compute-sanitizer {report.tool} could not check {entry.op} here: {said}")
        if not report.ok and not report.findings:  # it did not finish: nothing was checked, nothing was found
            raise AstraError(f"patch {entry.op}: compute-sanitizer {report.tool} did not finish"
                             + (f": {said}" if said else ""))
        if not report.ok:
            raise AstraError(f"patch {entry.op}: compute-sanitizer {report.tool} found {report.findings} problem(s)"
                             + (f": {said}" if said else ""))
        echo(f"{entry.op}: compute-sanitizer {report.tool} clean over {report.launches} launches "
             f"({len(req.shapes)} shapes x {len(req.dtypes)} dtypes)")


def _latest_stats_dir(root: Path) -> Path:
    """A folder of stats files, or the newest run folder inside it."""
    if list(root.glob("astra-*.json")):
        return root
    runs = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime) if root.is_dir() else []
    if not runs:
        raise AstraError(f"no astra-sglang stats files in {root}")
    return runs[-1]


@click.command("report")
@click.option("--stats-dir", type=click.Path(path_type=Path), default=None,
              help="Stats folder (default: $ASTRA_SGLANG_STATS_DIR, else the newest run in ./astra-stats).")
@_errors
def report_cmd(stats_dir):
    """Per-process engagement table of a patched server: calls, kernel calls, fallbacks, calls deferred to the
    original (the manifest's `defer`), shadow checks.

    \b
    Example:
      astra-sglang report --stats-dir astra-stats/20261121-101500
    """
    folder = _latest_stats_dir(stats_dir or Path(os.environ.get(ENV_STATS_DIR) or "astra-stats"))
    procs = load_stats(folder)
    rows = []
    for p in procs:
        for r in p.ops.values():
            timing = (f"{r.patched.median_us:.1f}/{r.original.median_us:.1f}" if r.patched.median_us is not None
                      and r.original.median_us is not None else "-")
            rows.append([str(p.pid), p.mechanism, r.op, str(r.calls), str(r.kernel_calls), str(r.fallbacks),
                         str(r.deferred), f"{r.shadow_mismatches}/{r.shadow_checks}", timing,
                         "DISABLED: " + r.disabled_reason if r.disabled else ""])
    if not rows:
        raise AstraError(f"no patched ops recorded in {folder}")
    click.echo(f"stats: {folder} ({len(procs)} processes)")
    click.echo(_table(rows, ["pid", "mechanism", "op", "calls", "kernel", "fallback", "deferred", "mismatch/checks",
                             "us ours/orig", "status"]))


def register(main: click.Group) -> None:
    for command in (patch_group, report_cmd):
        main.add_command(command)
