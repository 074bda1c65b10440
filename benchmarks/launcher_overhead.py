"""Host cost of a patched op's eager call, without the kernel: a host-only stand-in library behind the C ABI
(astra_launch returns at once) and CPU tensors, so only the Python/ctypes/C++ work before a launch is timed.

Rows: the raw ctypes Launcher; PatchedOp's Python path (fast path off); PatchedOp through the C++ fast path
(patching/fastcall.cpp). Output allocation (rmsnorm's out, merge's two outs) is included, as in a real call.
Then the Python-only pieces of two other call kinds:
- SGLang's all-keyword rope call, through PatchedOp's Python path and the C++ fast path (bound to spec order
  by the call form's plan, patching/binding.py), and that binding beside inspect.Signature.bind alone;
- a triton-launch patch (patching/triton_launch.py) around a stand-in kernel object: what the patch adds to
  one eager launch of extend attention (shape lookup, config choice, count, new grid and keywords).
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
from astra_sglang.patching.patched_op import PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.paths import templates_dir
from astra_sglang.specs.registry import get_spec

STAND_IN = '#include "astra_abi.h"\nASTRA_ENTRY { return 0; }\n'
CALLS = 20000


# SGLang 0.5.17's signatures, as the patch binds calls by them (bodies never run: every call is the kernel's).
def _silu_and_mul(input, out=None):
    pass


def _rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    pass


def _fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    pass


def _merge_state_v2(v_a, s_a, v_b, s_b, v_merged=None, s_merged=None):
    pass


ORIGINALS = {"silu_and_mul": _silu_and_mul, "rmsnorm": _rmsnorm, "fused_add_rmsnorm": _fused_add_rmsnorm,
             "merge_attn_states_lse": _merge_state_v2}
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
                                    ORIGINALS[op], OpStats(op), device_type="cpu")
                assert (patched._fast is not None) == (fast == "1"), "fast path unavailable"
                row.append(per_call_us(patched.fn, args))
                record = patched.stats.record()
                assert record.fallbacks == 0 and record.kernel_calls == record.calls, (op, patched.stats.reasons)
            print(f"{op:24s} {row[0]:16.2f} {row[1]:17.2f} {row[2]:14.2f}")

        keyword_calls(library)
    launch_patch()


def keyword_calls(library: KernelLibrary) -> None:
    spec = get_spec("rotary_embedding")

    def apply_rope_with_cos_sin_cache_inplace(q, k, cos_sin_cache, positions, *, is_neox, rope_dim=0,
                                              fused_args=None):  # SGLang 0.5.17's (sglang.kernels.ops.attention.rope)
        pass

    # RotaryEmbedding.forward_cuda's call: every argument by keyword.
    call = dict(positions=torch.zeros(16, dtype=torch.int64), q=torch.empty(16, 32, 128, dtype=torch.bfloat16),
                k=torch.empty(16, 8, 128, dtype=torch.bfloat16), cos_sin_cache=torch.empty(4096, 128),
                is_neox=True, fused_args=None)
    row = []
    for fast in ("0", "1"):
        os.environ[fastcall.ENV_FASTCALL] = fast
        op = PatchedOp(spec, Launcher(library, len(spec.tensor_args), len(spec.scalar_args)),
                       apply_rope_with_cos_sin_cache_inplace, OpStats(spec.name), device_type="cpu")
        assert (op._fast is not None) == (fast == "1"), "fast path unavailable"
        op.fn(**call)  # the shape's verdict, once
        row.append(per_call_us(lambda: op.fn(**call), ()))
        record = op.stats.record()
        assert record.fallbacks == 0 and record.kernel_calls == record.calls, op.stats.reasons
    planned = per_call_us(lambda: op._bind((), call), ())
    bind = per_call_us(lambda: op._signature.bind(**call), ())
    print(f"\nrotary_embedding, SGLang's all-keyword call: PatchedOp python {row[0]:.2f} us, C++ {row[1]:.2f} us; "
          f"binding it to the spec {planned:.2f} us with the call form's plan kept, Signature.bind alone "
          f"(what every call ran before plans) {bind:.2f} us")


class _StandInKernel:
    """A JITFunction's launch surface: kernel[grid](*args, **kwargs), launching nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def launch_patch() -> None:
    from astra_sglang.patching.stats import OpStats as Stats
    from astra_sglang.patching.triton_launch import LaunchPatch
    from astra_sglang.patchset.manifest import LaunchTable

    table = LaunchTable(kernel="extend_attention", heads=32, kv_heads=8, head_dim=128, dtype="bfloat16",
                        device="GPU", triton="3.6.0", by="extend", max_key=4096,
                        configs={1024: "m128n128w8s1", 2048: "m128n128w8s1", 4096: ""})
    kernel = _StandInKernel()
    patch = LaunchPatch(kernel, "extend_attention", [table], Stats("extend_attention"), "m", "_fwd_kernel")
    q, k = torch.empty(2048, 32, 128, dtype=torch.bfloat16), torch.empty(4096, 8, 128, dtype=torch.bfloat16)
    args = (q, k, k, q, *[None] * 20)
    kwargs = dict(kv_group_num=4, BLOCK_DMODEL=128, BLOCK_DPE=0, BLOCK_DV=128, BLOCK_M=128, BLOCK_N=64,
                  Lq=128, Lv=128, USE_CUSTOM_MASK=False, IS_CAUSAL=True, SKIP_PREFIX_CUSTOM_MASK=False,
                  STORE_TRANSPOSE=False, num_warps=8, num_stages=1)
    grid = (8, 32, 16)
    direct = per_call_us(lambda: kernel[grid](*args, **kwargs), ())
    patched = per_call_us(lambda: patch.fn[grid](*args, **kwargs), ())
    print(f"extend attention launch through a triton-launch patch: {patched:.2f} us against {direct:.2f} us direct "
          f"(stand-in kernel: the patch's own Python, {patched - direct:.2f} us a launch)")


if __name__ == "__main__":
    main()
