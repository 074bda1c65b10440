"""SGLang's Triton attention kernels as tuning targets: where each kernel and its launcher live, and the config
SGLang picks itself, found by running SGLang's own launcher with a kernel that records its launch.

The launchers hard-code their block sizes and launch options (decode) or take them from a selection
function keyed by GPU capability and head dim (extend). Copying either would drift from SGLang; instead the
launcher is called on meta tensors (shapes and strides, no data, no GPU) with the module's kernel swapped for
a `Recorder` for the duration of the call, and the launch's keywords are SGLang's pick. Off a GPU the
extend selection's capability is set for the call (default: an H100's, 9.0).
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.triton.attention.space import AttnConfig, AttnShape


@dataclass(frozen=True)
class AttnTarget:
    name: str
    module: str
    kernel: str
    """The `@triton.jit` kernel the config applies to (a module global the launcher launches)."""
    launcher: str
    file: str
    """The kernel's file inside the sglang package."""
    bucket_dims: tuple[str, str]


TARGETS = {
    "decode_attention": AttnTarget("decode_attention", "sglang.kernels.ops.attention.decode_attention",
                                   "_fwd_grouped_kernel_stage1", "_decode_grouped_att_m_fwd",
                                   "kernels/ops/attention/decode_attention.py", ("batch", "kv_len")),
    "extend_attention": AttnTarget("extend_attention", "sglang.kernels.ops.attention.extend_attention",
                                   "_fwd_kernel", "extend_attention_fwd",
                                   "kernels/ops/attention/extend_attention.py", ("extend", "prefix")),
}
H100_CAPABILITY = (9, 0)


def target(name: str) -> AttnTarget:
    if name not in TARGETS:
        raise AstraError(f"no Triton attention target {name!r}; known: {', '.join(TARGETS)}")
    return TARGETS[name]


def discover(name: str, root: Path | None = None):
    """The kernel as `ast` finds it in the installed source (records.TritonKernel), checked to be launched by
    the launcher the patch and the pick rely on."""
    from astra_sglang.extraction.triton.discover import find_kernel
    from astra_sglang.triton.moe.configs import package_dir

    t = target(name)
    path = Path(root or package_dir()) / t.file
    if not path.is_file():
        raise AstraError(f"source not found: {path}")
    kernel = find_kernel(path, t.kernel)
    if t.launcher not in {launch.function for launch in kernel.launches}:
        raise AstraError(f"{t.kernel} is not launched by {t.launcher} in {path.name}: SGLang's source changed")
    return kernel


def sglang_module(name: str):
    """The target's module as SGLang imports it. Where `sglang.kernels`'s package init cannot import (a CPU
    machine without SGLang's server dependencies), its packages are entered as bare namespaces first, so that
    the kernel files (which import triton, torch and each other only) load as they are."""
    t = target(name)
    try:
        return importlib.import_module(t.module)
    except ImportError as exc:
        if "sglang.kernels" in sys.modules and getattr(sys.modules["sglang.kernels"], "__file__", None):
            raise AstraError(f"cannot import {t.module}: {exc}") from None
        first = exc
    from astra_sglang.triton.moe.configs import package_dir

    root = package_dir()
    for package in ("sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.attention"):
        if package not in sys.modules:
            module = types.ModuleType(package)
            module.__path__ = [str(root.joinpath(*package.split(".")[1:]))]
            sys.modules[package] = module
    try:
        return importlib.import_module(t.module)
    except ImportError as exc:
        raise AstraError(f"cannot import {t.module}: {first}; on its own: {exc}") from None


class Recorder:
    """Stands in for a Triton kernel: `kernel[grid](*args, **kwargs)` records the launch, runs nothing."""

    def __init__(self):
        self.launches: list[tuple[tuple, tuple, dict]] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((tuple(grid), args, kwargs))
        return launch


@contextlib.contextmanager
def swapped(module, **attrs):
    """Module globals set for the duration (restored even when the call raises)."""
    old = {k: getattr(module, k) for k in attrs if hasattr(module, k)}
    try:
        for k, v in attrs.items():
            setattr(module, k, v)
        yield
    finally:
        for k in attrs:
            if k in old:
                setattr(module, k, old[k])
            else:
                delattr(module, k)


def _meta(*shape, dtype=None):
    import torch

    return torch.empty(shape, device="meta", dtype=dtype or torch.bfloat16)


def record_launch(name: str, shape: AttnShape, bucket: tuple[int, int], splits: int = 8,
                  capability: tuple[int, int] | None = None) -> tuple[tuple, dict]:
    """(grid, keywords) SGLang's own launcher hands its kernel at this shape and bucket."""
    import torch

    t = target(name)
    module = sglang_module(name)
    recorder = Recorder()
    a, b = bucket
    extra = {} if capability is None else {"_is_cuda": True, "CUDA_CAPABILITY": capability, "_is_hip": False}
    i32 = torch.int32
    with swapped(module, **{t.kernel: recorder}, **extra):
        if name == "decode_attention":
            q = _meta(a, shape.heads, shape.head_dim)
            kv = _meta(a * b, shape.kv_heads, shape.head_dim)
            module._decode_grouped_att_m_fwd(
                q, kv, kv, _meta(a, shape.heads, splits, shape.head_dim, dtype=torch.float32),
                _meta(a, shape.heads, splits, dtype=torch.float32), _meta(a + 1, dtype=i32), _meta(a * b, dtype=i32),
                _meta(a, dtype=i32), splits, shape.head_dim ** -0.5, 0.0)
        else:
            q = _meta(a, shape.heads, shape.head_dim)
            kv = _meta(a, shape.kv_heads, shape.head_dim)
            pool = _meta(a + b, shape.kv_heads, shape.head_dim)
            module.extend_attention_fwd(q, kv, kv, _meta(a, shape.heads, shape.head_dim), pool, pool,
                                        _meta(2, dtype=i32), _meta(2, dtype=i32), _meta(b, dtype=i32), None, True,
                                        None, a, 1.0, 1.0)
    if len(recorder.launches) != 1:
        raise AstraError(f"{t.launcher} launched {t.kernel} {len(recorder.launches)} times for one call: "
                         "SGLang's launcher changed")
    grid, _, kwargs = recorder.launches[0]
    return grid, kwargs


def sglang_pick(name: str, shape: AttnShape, bucket: tuple[int, int], splits: int = 8,
                capability: tuple[int, int] | None = None) -> AttnConfig:
    """The config SGLang launches with at this shape and bucket (its own code decides)."""
    if name == "decode_attention" and shape.group < 2:
        raise AstraError(f"decode_attention tunes the grouped (GQA) kernel; {shape.describe()} runs SGLang's "
                         "per-head kernel (_fwd_kernel_stage1), which is not a target")
    _, kwargs = record_launch(name, shape, bucket, splits, capability)
    return AttnConfig.from_launch(name, kwargs)
