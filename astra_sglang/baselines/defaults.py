"""What `astra-sglang bench OP` compares when it is not told: the patch for OP against SGLang's own op.

Candidate: the patch set's kernel for OP (the user folder's HOME/patches/OP/ over the shipped patches/OP/, the
manifest's kernel file and defines), else the tool's reference kernel. Baseline: the op SGLang runs on CUDA
(`KERNEL_BASELINES`; for a user spec's op, the spec's first SGLang call site) where SGLang and the package behind
that op import here, else the tool's reference kernel (astra_sglang/kernels/OP.cu), with the reason.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from astra_sglang.baselines.adapters import KERNEL_BASELINES, sglang_baseline
from astra_sglang.baselines.resolve import resolve_python
from astra_sglang.errors import AstraError
from astra_sglang.kernels.knobs import check_knob_values
from astra_sglang.kernels.variants import first_kernel
from astra_sglang.patchset.store import PatchStore
from astra_sglang.paths import extracted_kernel, user_specs_dir
from astra_sglang.specs.records import KernelSpec
from astra_sglang.specs.registry import get_spec, registry

OP_PACKAGES = {"merge_state": "flashinfer", "rotary_embedding": "tvm_ffi"}
"""The package SGLang's op comes from, where it is not sgl_kernel (flashinfer's base-2 merge; the rotary embedding's
JIT kernel, which SGLang builds and loads through tvm_ffi)."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a kernel file (or py:MODULE:FUNCTION) with its defines, and what it is."""
    path: str
    label: str
    what: str
    defines: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.label} ({self.what})"


def reference(op: str) -> Side:
    path, defines = first_kernel(op)
    return Side(str(path), f"ours:{op}", "the tool's reference kernel", defines)


def missing_for(op: str) -> str | None:
    """The first package SGLang's op needs that does not import here (None: SGLang's op is available)."""
    for package in ("sglang", OP_PACKAGES.get(op, "sgl_kernel")):
        if importlib.util.find_spec(package) is None:
            return package
    return None


def users_op(op: str) -> bool:
    """An op whose spec the user folder holds (`onboard` wrote it): the package knows no baseline for it."""
    path = registry().paths.get(op)
    return op not in KERNEL_BASELINES and path is not None and path.parent.resolve() == user_specs_dir().resolve()


def first_kernel_of(spec: KernelSpec) -> Side | None:
    """An onboarded op's first kernel where it has no patch: its original extracted (`extract OP` wrote
    work/extract/OP-SOURCE/kernel.cu), else the op itself called from the harness (its spec's adapter)."""
    if spec.onboard is None:
        return None
    found = extracted_kernel(spec)
    if found is not None:
        return Side(str(found[0].resolve()), f"extracted:{spec.name}", f"its original, extracted from {found[1]}")
    return Side(f"py:{spec.onboard.call}", f"op:{spec.name}", "SGLang's op itself, the first kernel: no kernel "
                "of ours yet (`optimize` writes one)")


def candidate_side(op: str, candidate: str | None, knobs: dict[str, str], patches: PatchStore | None = None) -> Side:
    """--candidate, else the patch set's winning patch for `op` (the user folder's over the shipped one, as
    `launch` serves them), else an onboarded op's first kernel, else the tool's reference kernel."""
    if candidate and candidate.startswith("py:"):
        if knobs:
            raise AstraError(f"--candidate {candidate} is a Python op: -D knobs are for a kernel .cu")
        resolve_python(candidate, "--candidate")
        return Side(candidate, candidate, "given")
    if candidate:
        if not Path(candidate).is_file():
            raise AstraError(f"--candidate {candidate}: no such file (a kernel .cu, or py:MODULE:FUNCTION)")
        _check_knobs(Path(candidate), knobs, candidate)
        return Side(candidate, candidate, "given", dict(knobs))
    store = patches or PatchStore()
    entry = store.find(op)
    if entry is not None:
        _check_knobs(entry.kernel_path, knobs, entry.label)
        what = entry.describe() + ("" if entry.enabled else ", disabled in the patch set")
        return Side(str(entry.kernel_path.resolve()), entry.label, what, {**entry.manifest.defines, **knobs})
    first = first_kernel_of(get_spec(op))
    if first is not None:
        if knobs and first.path.startswith("py:"):
            raise AstraError(f"{op} has no kernel yet (its first kernel is SGLang's op itself): -D knobs are for a "
                             "kernel .cu")
        _check_knobs(Path(first.path), knobs, first.label)
        return Side(first.path, first.label, first.what + f"; no patch for {op} in {store.describe()}", dict(knobs))
    side = reference(op)
    _check_knobs(Path(side.path), knobs, side.label)
    return Side(side.path, side.label, side.what + f"; no patch for {op} in {store.describe()}",
                {**side.defines, **knobs})


def _check_knobs(source: Path, knobs: dict[str, str], label: str) -> None:
    if knobs and source.is_file():
        check_knob_values(source.read_text(errors="replace"), knobs, label)


def baseline_side(spec: KernelSpec, baseline: str | None) -> Side:
    if baseline == "sglang":
        path = sglang_baseline(spec)
        return Side(path, path, "what the installed SGLang calls")
    if baseline == "reference":
        return reference(spec.name)
    if baseline and baseline.startswith("py:"):
        resolve_python(baseline, "--baseline")  # before anything is built for the other side
        return Side(baseline, baseline, "given")
    if baseline:
        if not Path(baseline).is_file():
            raise AstraError(f"--baseline {baseline}: no such file (a kernel .cu, py:MODULE:FUNCTION, 'sglang' or "
                             "'reference')")
        return Side(baseline, baseline, "given")
    if spec.onboard is not None:  # called as the op itself takes its arguments (the adapter `onboard` wrote)
        return Side(f"py:{spec.onboard.call}", f"py:{spec.onboard.entry}", "SGLang's own op, the onboarded entry")
    missing = missing_for(spec.name)
    if missing is None and spec.name in KERNEL_BASELINES:
        path = KERNEL_BASELINES[spec.name]
        return Side(path, path, "SGLang's own op")
    if missing is None and users_op(spec.name) and sglang_baseline(spec):
        path = sglang_baseline(spec)  # `onboard` wrote the spec from this call site: it is what the patch replaces
        return Side(path, path, "SGLang's own op, the user spec's call site")
    side = reference(spec.name)
    why = f"{missing} is not importable here" if missing else f"no SGLang op is known for {spec.name}"
    return Side(side.path, side.label, f"{side.what}: {why}; run in SGLang's environment to compare with SGLang's op",
                side.defines)
