"""What `onboard` checks on CPU before any GPU time is spent, and what it leaves for the first GPU run.

On CPU: the spec loads; the proposed torch reference runs at the smallest recorded shape in fp64 and writes
every output; the op itself, where it imports and runs on CPU, agrees with that reference there; every SGLang
target exists in the installed source. Left for the first GPU run (onboard/gpu_check.py): the tolerance from
the op's own run-to-run and upcast differences, the reference against the op on the GPU (or the op as its own
reference), the dtypes the op runs in.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from astra_sglang.errors import AstraError
from astra_sglang.specs.records import KernelSpec


def _resolve(target: str):
    import importlib

    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def run_on(spec: KernelSpec, fn, shape: tuple[int, ...], dtype: str, device, seed: int = 0, fp64: bool = False):
    """(inputs, results): `fn` called once on fresh arguments at `shape` on `device` (fp64 copies with `fp64`)."""
    from astra_sglang.harness.inputs import allocate, fill

    args = fill(spec, allocate(spec, shape, dtype, device, guard=False),
                torch.Generator(device=device).manual_seed(seed))
    ran = args.upcast() if fp64 else args.clone()
    fn(*ran.call_args(spec))
    return args, ran


def unwritten(spec: KernelSpec, args) -> list[str]:
    return [a.name for a, t in zip(spec.tensor_args, args.tensors)
            if a.role == "out" and t.dtype.is_floating_point and bool(t.isnan().any())]


FLOAT_DTYPES = ("bfloat16", "float16", "float32")


@dataclass
class CpuCheck:
    done: list[str]
    pending: list[str]
    runs_in: list[str] = field(default_factory=list)
    """Float dtypes the calls did not record that the op also runs in here (on CPU)."""


def cpu_check(spec_path: Path, ops_dir: Path, shapes: list[tuple[int, ...]], dtypes: list[str],
              live: bool) -> CpuCheck:
    """What was checked and what is left for the first GPU run; AstraError with the first failure."""
    from astra_sglang.harness.compare import compare
    from astra_sglang.extraction.static_targets import static_check
    from astra_sglang.patchset.manifest import Target
    from astra_sglang.specs.registry import load_spec_file

    spec = load_spec_file(spec_path)
    result = CpuCheck([f"spec loads ({len(spec.arguments)} arguments, dims {'x'.join(spec.dims)})"],
                      ["the tolerance: the op's own run-to-run and upcast differences on the GPU"])
    done, pending = result.done, result.pending
    if not shapes:
        raise AstraError(f"{spec.name}: no recorded call gives every dim (no complete shape)")
    shape = min(shapes, key=lambda s: spec.call_bytes(s, dtypes[0]))
    where = "x".join(map(str, shape))
    sys.path.insert(0, str(ops_dir))
    try:
        reference = None
        if spec.reference_dtype == "float64":
            try:
                _, reference = run_on(spec, _resolve(spec.reference), shape, dtypes[0], "cpu", fp64=True)
            except Exception as exc:  # noqa: BLE001 - the user's code: one line
                raise AstraError(f"{spec.name}: the reference {spec.reference} fails at {where} on CPU: "
                                 f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
            if unwritten(spec, reference):
                raise AstraError(f"{spec.name}: the reference leaves {', '.join(unwritten(spec, reference))} "
                                 "unwritten: check the roles")
            done.append(f"reference runs at {where} (fp64, CPU)")
            pending.append(f"the reference {spec.reference} against the op")
        else:
            pending.append("the op as its own reference (no torch reference: pass --reference to propose one)")
        if live and torch.cuda.is_available():  # a CUDA op handed CPU tensors may fault rather than refuse
            pending.append("the op itself (this machine has a GPU: the first GPU run calls it there)")
        elif live:
            try:
                _, ran = run_on(spec, _resolve(spec.onboard.call), shape, dtypes[0], "cpu")
            except Exception as exc:  # noqa: BLE001 - a CUDA-only op
                pending.append(f"the op itself (on CPU: {type(exc).__name__}: {exc})".splitlines()[0][:160])
            else:
                verdict = compare(spec, dtypes[0], ran, reference) if reference is not None else None
                done.append(f"the op runs at {where} on CPU" + ("" if verdict is None else
                            ", agreeing with the reference" if verdict.ok else
                            f"; differs from the reference there ({verdict.reason})"))
                if dtypes[0] in FLOAT_DTYPES:
                    result.runs_in = [d for d in FLOAT_DTYPES if d not in dtypes
                                      and _runs(spec, spec.onboard.call, shape, d)]
        else:
            pending.append("the op itself (its module does not import here: read from its source)")
    finally:
        sys.path.remove(str(ops_dir))
    for t in spec.sglang_targets:
        check = static_check(Target(t.module, t.attr))
        done.append(f"target {t.module}:{t.attr}: {check.status}")
    return result


def _runs(spec: KernelSpec, call: str, shape: tuple[int, ...], dtype: str) -> bool:
    try:
        run_on(spec, _resolve(call), shape, dtype, "cpu")
    except Exception:  # noqa: BLE001 - not in this dtype
        return False
    return True
