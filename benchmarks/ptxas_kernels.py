"""Registers and spill bytes per kernel instantiation of a kernel file (ptxas -v through the harness build),
optionally with the register path's launch bound changed (the register figures of docs/kernels.md).
CPU only (nvcc, sm_90 unless --arch).

Usage:
    python3 benchmarks/ptxas_kernels.py patches/rmsnorm/kernel.cu --grep "rms_reg_kernel<__nv_bfloat16, 8, 256, 4"
    python3 benchmarks/ptxas_kernels.py patches/rmsnorm/kernel.cu --reg-min-blocks 3 --grep rms_reg_kernel
    python3 benchmarks/ptxas_kernels.py patches/fused_add_rmsnorm/kernel.cu --spills   # only kernels that spill
--reg-min-blocks N asks ptxas for N blocks per SM on the register path with more than one vector a thread
(the `VPT == 1 ? ... : 1` launch bound becomes `: N`), i.e. a register cap, without editing the file.
"""
import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from astra_sglang.harness.build import build_library

BOUND = "VPT == 1 ? 2048 / (THREADS * ROWS) : 1)"


def per_kernel(log: str) -> dict[str, tuple[int, int]]:
    """Demangled kernel -> (registers, spill bytes stored + loaded) from a `-Xptxas -v` log."""
    out, name = {}, None
    filt = shutil.which("c++filt")
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            name = subprocess.run([filt, m.group(1)], capture_output=True, text=True).stdout.strip() if filt else m.group(1)
        elif name and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            out[name] = (out.get(name, (0, 0))[0], int(m.group(1)) + int(m.group(2)))
        elif name and (m := re.search(r"Used (\d+) registers", line)):
            out[name] = (int(m.group(1)), out.get(name, (0, 0))[1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("-D", dest="defines", action="append", default=[], help="NAME=VALUE")
    ap.add_argument("--reg-min-blocks", type=int)
    ap.add_argument("--grep", default="", help="only kernels whose demangled name contains this")
    ap.add_argument("--spills", action="store_true", help="only kernels that spill")
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args()
    text = Path(args.source).read_text()
    if args.reg_min_blocks:
        if BOUND not in text:
            raise SystemExit(f"{args.source} has no register-path launch bound `{BOUND}`")
        text = text.replace(BOUND, BOUND[:-2] + f"{args.reg_min_blocks})")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.cu"
        source.write_text(text)
        build = build_library(source, dict(d.split("=", 1) for d in args.defines), args.arch)
    if not build.ok:
        raise SystemExit(build.log[-2000:])
    log = (Path(build.library).parent / "build.log").read_text()
    for name, (regs, spill) in sorted(per_kernel(log).items()):
        if args.grep in name and (spill or not args.spills):
            print(f"{regs:4d} registers {spill:5d} spill bytes  {name[:160]}")


if __name__ == "__main__":
    main()
