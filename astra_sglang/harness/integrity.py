"""What a Python candidate (`py:MODULE:FUNC`) could patch to fake a figure, watched for change.

A `py:` candidate runs inside the evaluation's process: importing it, or any call of it, could replace the
timer (torch.cuda.Event.elapsed_time, CUDAGraph.replay, time.perf_counter), the synchronization, a tensor
method the comparison uses, or the harness's own functions. `Integrity` holds every such object as it was
after the baseline was loaded and before the candidate was; `changed()` names the first one that is no longer
the same object. The timing itself calls the primitives it bound at import (timing.py, timed_run.py), so a
patch cannot change a figure before it is found.

In-process code can still read the harness's memory (the reference of a trial, say): `py:` is for trusted
callables (SGLang's own ops, peers); candidates of the LLM path are kernel files, built and screened.
"""
from __future__ import annotations

import sys
import time
import types

import torch

WATCHED: dict[str, tuple[object, tuple[str, ...] | None]] = {
    "torch.cuda": (torch.cuda, ("synchronize", "current_stream", "default_stream", "Stream", "Event", "CUDAGraph",
                                "graph", "_sleep", "mem_get_info", "stream")),
    "torch.cuda.Event": (torch.cuda.Event, None),
    "torch.cuda.CUDAGraph": (torch.cuda.CUDAGraph, None),
    "torch.cuda.Stream": (torch.cuda.Stream, None),
    "time": (time, ("perf_counter", "perf_counter_ns", "time", "monotonic")),
    "torch": (torch, ("isnan", "isfinite", "isinf", "where", "equal", "nonzero", "stack", "cat", "zeros", "empty",
                      "full", "randn", "rand", "randint", "sum", "abs", "allclose", "Generator", "Tensor")),
    "torch.Tensor": (torch.Tensor, None),
}
"""Objects whose attributes are watched: the names listed, or (None) every attribute of the class."""
OWN = ("astra_sglang.harness.", "astra_sglang.specs.", "astra_sglang.references.")
LIBRARIES = ("torch", "sglang", "sgl_kernel", "flashinfer", "triton")
"""A replacement defined in one of these is a library's own patch (SGLang patches some of torch when a baseline
first imports it), not the candidate's."""


def _attributes(owner: object, names: tuple[str, ...] | None) -> dict[str, object]:
    if names is None:
        return dict(vars(owner))
    return {n: getattr(owner, n) for n in names if hasattr(owner, n)}


def _own_modules() -> dict[str, object]:
    """Every function and class of the harness's loaded modules, and every method of those classes."""
    out: dict[str, object] = {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or not name.startswith(OWN):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", "") == name:
                out[f"{name}.{attr}"] = value
                if isinstance(value, type):
                    out.update({f"{name}.{attr}.{k}": v for k, v in vars(value).items() if callable(v)})
    return out


def snapshot() -> dict[str, object]:
    seen = {f"{where}.{n}": v for where, (owner, names) in WATCHED.items()
            for n, v in _attributes(owner, names).items()}
    seen.update(_own_modules())
    return seen


class Integrity:
    def __init__(self) -> None:
        self.seen = snapshot()

    def changed(self) -> str:
        """'' while every watched object is the one seen at the start, or was replaced by a library's own; else
        the first one that is not."""
        now = snapshot()
        for name, value in self.seen.items():
            new = now.get(name)
            if new is not value and not str(getattr(new, "__module__", "") or "").startswith(LIBRARIES):
                return name
        return ""
