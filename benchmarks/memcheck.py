"""compute-sanitizer memcheck of every shipped patch: odd, edge, held-out and model shapes, three dtypes.

Usage (GPU machine, repo root): compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 benchmarks/memcheck.py [op ...]
Each patch's library is built first (outside the sanitizer is fine: the build is cached), then launched
once per (shape, dtype) on fresh inputs and synchronized, so an out-of-bounds or misaligned access is
reported against that launch. Prints one line per op; the sanitizer's exit code says whether it was clean.
"""
import sys

import torch

from astra_sglang.harness.abi import KernelLibrary, Launcher
from astra_sglang.harness.build import build_library
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.patchset.store import PatchStore
from astra_sglang.specs.registry import get_spec, resolve_shapes

MAX_ELEMENTS = 1 << 24  # the sanitizer slows every access: keep each launch small


def main(ops: list[str]) -> None:
    gen = torch.Generator("cuda").manual_seed(0)
    for entry in PatchStore("patches").entries():
        if ops and entry.op not in ops:
            continue
        spec = get_spec(entry.op)
        build = build_library(entry.kernel_path, dict(entry.manifest.defines), None)
        assert build.ok, build.log[-500:]
        launcher = Launcher(KernelLibrary(build.library), len(spec.tensor_args), len(spec.scalar_args))
        shapes = [s for s in dict.fromkeys(resolve_shapes(spec, "edge+held_out+quick+paper"))
                  if spec.supports(s) and torch.Size(s).numel() <= MAX_ELEMENTS]
        launches = uncovered = 0
        for dtype in spec.dtypes:
            for shape in shapes:
                args = fill(spec, allocate(spec, shape, dtype, "cuda"), gen)
                code = launcher(args.tensors, args.scalars)
                torch.cuda.synchronize()
                launches += code == 0
                uncovered += code == -1
                assert code in (0, -1), f"{entry.op} {shape} {dtype}: ABI code {code}"
        print(f"memcheck {entry.op}: {launches} launches, {uncovered} not covered, "
              f"{len(shapes)} shapes x {len(spec.dtypes)} dtypes", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
