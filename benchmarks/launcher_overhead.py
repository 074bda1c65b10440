"""Host cost of a patched op's eager call, without the kernel: a host-only stand-in library behind the C ABI
(astra_launch returns at once) and CPU tensors, so only the Python/ctypes/C++ work before a launch is timed.

Rows: the raw ctypes Launcher; PatchedOp's Python path (fast path off); PatchedOp through the C++ fast path
(patching/fastcall.cpp). Output allocation (rmsnorm's out, merge's two outs) is included, as in a real call.
Usage: python3 benchmarks/launcher_overhead.py     (needs g++ and CUDA headers; no GPU)
"""
import os
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from astra_sglang.harness.abi import KernelLibrary, Launcher
from astra_sglang.patching import fastcall
from astra_sglang.patching.ops import PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.paths import templates_dir
from astra_sglang.specs.registry import get_spec

STAND_IN = '#include "astra_abi.h"\nASTRA_ENTRY { return 0; }\n'
CALLS = 20000
CASES = {  # op -> positional arguments as SGLang passes them
    "fused_add_rmsnorm": lambda: (torch.empty(16, 4096), torch.empty(16, 4096), torch.empty(4096), 1e-6),
    "rmsnorm": lambda: (torch.empty(16, 4096), torch.empty(4096), 1e-6),
    "silu_and_mul": lambda: (torch.empty(16, 2 * 14336),),
    "merge_attn_states_lse": lambda: (torch.empty(16, 32, 128), torch.empty(16, 32), torch.empty(16, 32, 128),
                                      torch.empty(16, 32)),
}


def per_call_us(fn, args) -> float:
    for _ in range(1000):
        fn(*args)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn(*args)
        best = min(best, (time.perf_counter() - start) / CALLS * 1e6)
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "noop.cpp").write_text(STAND_IN)
        subprocess.run(["g++", "-shared", "-fPIC", "-O2", f"-I{fastcall._cuda_include()}", f"-I{templates_dir()}",
                        "-o", f"{tmp}/noop.so", f"{tmp}/noop.cpp"], check=True)
        library = KernelLibrary(f"{tmp}/noop.so")
        print(f"{'op':24s} {'ctypes launcher':>16s} {'PatchedOp python':>17s} {'PatchedOp C++':>14s}   (us per call)")
        for op, make in CASES.items():
            spec, args = get_spec(op), make()
            row = []
            launcher = Launcher(library, len(spec.tensor_args), len(spec.scalar_args))
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            tensors += [torch.empty(1) for _ in range(len(spec.tensor_args) - len(tensors))]
            scalars = [a for a in args if not isinstance(a, torch.Tensor)]
            row.append(per_call_us(lambda *a: launcher(tensors, scalars), ()))
            for fast in ("0", "1"):
                os.environ[fastcall.ENV_FASTCALL] = fast
                patched = PatchedOp(spec, Launcher(library, len(spec.tensor_args), len(spec.scalar_args)),
                                    lambda *a: None, OpStats(op), device_type="cpu")
                assert (patched._fast is not None) == (fast == "1"), "fast path unavailable"
                row.append(per_call_us(patched.fn, args))
            print(f"{op:24s} {row[0]:16.2f} {row[1]:17.2f} {row[2]:14.2f}")


if __name__ == "__main__":
    main()
