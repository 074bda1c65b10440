"""On a GPU: the gelu and Gemma norm families, built from their sibling ops' kernel files with the manifests'
defines (first kernels and shipped patches), pass every check on every shape and dtype; against SGLang's own ops
where sgl_kernel imports; through the live patch's Python path."""
from __future__ import annotations

import pytest
import torch

from astra_sglang.baselines.adapters import KERNEL_BASELINES
from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.kernels.variants import VARIANTS, first_kernel
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.paths import patches_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

pytestmark = pytest.mark.gpu
FAMILIES = list(VARIANTS)


def _shipped(op: str) -> KernelSource:
    manifest = PatchManifest.load(patches_dir() / op)
    return KernelSource(path=str((patches_dir() / op / manifest.kernel).resolve()), defines=manifest.defines,
                        label=f"patches/{op}")


@pytest.mark.parametrize("op", FAMILIES)
def test_first_kernels_pass_everywhere(op):
    spec = get_spec(op)
    path, defines = first_kernel(op)
    shapes = resolve_shapes(spec, "quick+paper+edge+held_out")
    result = evaluate(EvalRequest(kernel=op, candidate=KernelSource(path=str(path), defines=defines), shapes=shapes,
                                  dtypes=spec.dtypes, time=False, timeout_s=900))
    assert result.ok, result.reason
    assert len(result.shapes) == len(shapes) * len(spec.dtypes) and all(s.correct for s in result.shapes)


@pytest.mark.parametrize("op", FAMILIES)
def test_shipped_patches_pass_and_are_timed_against_our_first_kernel(op):
    spec = get_spec(op)
    path, defines = first_kernel(op)
    result = evaluate(EvalRequest(kernel=op, candidate=_shipped(op), baseline=KernelSource(path=str(path), defines=defines),
                                  shapes=resolve_shapes(spec, "quick+edge+held_out"), dtypes=spec.dtypes, time=True,
                                  timeout_s=900))
    assert result.ok, result.reason
    assert all(s.correct for s in result.shapes if s.covered)
    assert all(s.speedup for s in result.shapes if s.covered and s.shape[1] >= 1024)


@pytest.mark.parametrize("op", FAMILIES)
def test_shipped_patches_against_sglangs_op(op):
    """The gate's quick shapes against what SGLang 0.5.17 runs (its fast-math fp32 gelu may be its defect)."""
    pytest.importorskip("sgl_kernel")
    spec = get_spec(op)
    result = evaluate(EvalRequest(kernel=op, candidate=_shipped(op), baseline=KernelSource(path=KERNEL_BASELINES[op]),
                                  shapes=resolve_shapes(spec, "quick"), dtypes=["bfloat16", "float16"], time=True,
                                  timeout_s=900))
    assert result.ok, result.reason
    assert all(s.correct and s.speedup for s in result.shapes if s.covered)


@pytest.mark.parametrize("op", ["gelu_and_mul", "gelu_tanh_and_mul"])
def test_gelu_kernels_match_torch_in_fp32(op):
    """Through the ABI, at values where the two gelus differ most: PyTorch's own formula, fp32."""
    from astra_sglang.harness.abi import KernelLibrary, Launcher
    from astra_sglang.harness.build import build_library

    source = _shipped(op)
    build = build_library(source.path, source.defines)
    assert build.ok, build.log[-2000:]
    lib = Launcher(KernelLibrary(build.library), 2, 0)
    x = torch.linspace(-12, 12, 2 * 4096, device="cuda").reshape(2, 4096).repeat(3, 1)
    out = torch.empty(6, 2048, device="cuda")
    assert lib([x, out], []) == 0
    torch.cuda.synchronize()
    approximate = "tanh" if op == "gelu_tanh_and_mul" else "none"
    want = torch.nn.functional.gelu(x[:, :2048].double(), approximate=approximate) * x[:, 2048:].double()
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)
