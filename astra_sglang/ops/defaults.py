"""What `astra-sglang bench OP` compares when it is not told: the shipped patch against SGLang's own op.

Candidate: the patch set's kernel for OP (patches/OP/, the manifest's kernel file and defines), else the tool's
reference kernel. Baseline: the op SGLang runs on CUDA (`KERNEL_BASELINES`) where SGLang and the package
behind that op import here, else the tool's reference kernel (astra_sglang/kernels/OP.cu), with the reason.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from astra_sglang.ops.adapters import KERNEL_BASELINES, sglang_baseline
from astra_sglang.ops.variants import first_kernel
from astra_sglang.patching.manifest import MANIFEST, PatchManifest
from astra_sglang.specs.records import KernelSpec

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


def candidate_side(op: str, candidate: str | None, knobs: dict[str, str], patches: Path) -> Side:
    if candidate:
        return Side(candidate, candidate, "given", dict(knobs))
    folder = patches / op
    if (folder / MANIFEST).is_file():
        manifest = PatchManifest.load(folder)
        what = "the shipped patch" + ("" if manifest.enabled else ", disabled in the patch set")
        return Side(str((folder / manifest.kernel).resolve()), f"patches/{op}", what, {**manifest.defines, **knobs})
    side = reference(op)
    return Side(side.path, side.label, side.what + f"; no patch for {op} in {patches}", {**side.defines, **knobs})


def baseline_side(spec: KernelSpec, baseline: str | None) -> Side:
    if baseline == "sglang":
        path = sglang_baseline(spec)
        return Side(path, path, "what the installed SGLang calls")
    if baseline == "reference":
        return reference(spec.name)
    if baseline:
        return Side(baseline, baseline, "given")
    missing = missing_for(spec.name)
    if missing is None and spec.name in KERNEL_BASELINES:
        path = KERNEL_BASELINES[spec.name]
        return Side(path, path, "SGLang's own op")
    side = reference(spec.name)
    why = f"{missing} is not importable here" if missing else f"no SGLang op is known for {spec.name}"
    return Side(side.path, side.label, f"{side.what}: {why}; run in SGLang's environment to compare with SGLang's op",
                side.defines)
