"""Per-call cost of the ctypes launcher (harness.abi.Launcher) on the host, with a host-only stand-in
library: the Python-side overhead a patched op adds before the kernel launch itself.

Usage: python3 benchmarks/launcher_overhead.py     (needs gcc; no GPU)
"""
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from astra_sglang.harness.abi import KernelLibrary, Launcher

STAND_IN = "int astra_launch(const void* t, int nt, const double* s, int ns, void* stream) { return 0; }\n"

with tempfile.TemporaryDirectory() as tmp:
    (Path(tmp) / "noop.c").write_text(STAND_IN)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", f"{tmp}/noop.so", f"{tmp}/noop.c"], check=True)
    launcher = Launcher(KernelLibrary(f"{tmp}/noop.so"), 3, 1)
    tensors = [torch.empty(128, 4096), torch.empty(128, 4096), torch.empty(4096)]
    for _ in range(1000):
        launcher(tensors, [1e-6], stream=0)
    calls = 20000
    start = time.perf_counter()
    for _ in range(calls):
        launcher(tensors, [1e-6], stream=0)
    print(f"ctypes launcher: {(time.perf_counter() - start) / calls * 1e6:.2f} us per call (3 tensors, 1 scalar)")
