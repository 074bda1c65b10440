"""On a GPU: the shipped topk_softmax kernel and our first kernel against the fp64 reference at odd shapes (tokens x
experts x top-k x renormalize x gating dtype, rows padded apart, all-tied and large logits), through the harness's
checks, and against SGLang's own op where sgl_kernel imports."""
from __future__ import annotations

import math

import pytest
import torch

from astra_sglang.baselines.adapters import KERNEL_BASELINES
from astra_sglang.harness.abi import KernelLibrary, Launcher
from astra_sglang.harness.build import build_library
from astra_sglang.harness.isolate import evaluate
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.paths import kernels_dir, patches_dir
from astra_sglang.references import moe_routing
from astra_sglang.specs.registry import get_spec, resolve_shapes

pytestmark = pytest.mark.gpu
TOKENS = [1, 3, 17, 300, 2048]
ROUTERS = [(8, 1), (8, 2), (60, 4), (64, 6), (128, 8), (256, 8), (256, 1), (128, 2), (64, 1), (60, 6)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
SHIPPED = patches_dir() / "topk_softmax" / "kernel.cu"
FIRST = kernels_dir() / "topk_softmax.cu"


@pytest.fixture(scope="module")
def kernels() -> dict[str, Launcher]:
    out = {}
    for name, path in (("shipped", SHIPPED), ("first", FIRST)):
        build = build_library(path)
        assert build.ok, build.log[-3000:]
        out[name] = Launcher(KernelLibrary(build.library), 3, 1)
    return out


def _logits(tokens: int, experts: int, dtype: torch.dtype, mode: str) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(tokens * 1009 + experts)
    x = moe_routing.distinct_logits((tokens, experts), dtype, gen, {})
    if mode == "padded":  # rows 8 elements apart: a view of a wider buffer
        x = torch.cat([x, torch.zeros(tokens, 8, device="cuda")], dim=1)[:, :experts]
    if mode == "tied":
        x[0] = 0.0
    if mode == "large":
        x = x * 30.0
    return x.to(dtype)


def _expect(x: torch.Tensor, k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.empty(x.shape[0], k, dtype=torch.float64, device=x.device)
    ids = torch.empty(x.shape[0], k, dtype=torch.int32, device=x.device)
    moe_routing.topk_softmax(w, ids, x, renormalize)
    return w, ids


def _run(fn, x: torch.Tensor, k: int, renormalize: bool) -> tuple[int, torch.Tensor, torch.Tensor]:
    w = torch.full((x.shape[0], k), math.nan, device=x.device)
    ids = torch.full((x.shape[0], k), -7, dtype=torch.int32, device=x.device)
    code = fn([w, ids, x], [float(renormalize)])
    torch.cuda.synchronize()
    return code, w, ids


def _assert_matches(w, ids, want_w, want_ids):
    assert torch.equal(ids, want_ids)
    assert bool(((w.double() - want_w).abs() <= 1e-6 + 1e-5 * want_w.abs()).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("experts, k", ROUTERS)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("kernel", ["shipped", "first"])
def test_matches_the_reference(kernels, kernel, tokens, experts, k, renormalize, dtype):
    for mode in ("plain", "padded", "tied", "large"):
        x = _logits(tokens, experts, dtype, mode)
        code, w, ids = _run(kernels[kernel], x, k, renormalize)
        assert code == 0, (mode, code)
        _assert_matches(w, ids, *_expect(x, k, renormalize))


@pytest.mark.parametrize("experts, k", [(384, 8), (512, 8), (512, 16), (1024, 8), (7, 3), (1, 1), (33, 32)])
def test_other_expert_counts_are_computed_or_declined(kernels, experts, k):
    """Past 512 experts (or 16 picks) the shipped kernel declines (SGLang's op serves the call); the first kernel
    takes any count."""
    x = _logits(9, experts, torch.bfloat16, "plain")
    want = _expect(x, k, True)
    for name, fn in kernels.items():
        code, w, ids = _run(fn, x, k, True)
        if code == -1 and name == "shipped":
            assert experts > 512 or k > 16
            continue
        assert code == 0, name
        _assert_matches(w, ids, *want)


@pytest.mark.parametrize("kernel", [SHIPPED, FIRST], ids=["shipped", "first"])
def test_harness_checks_pass_on_every_set(kernel):
    spec = get_spec("topk_softmax")
    shapes = resolve_shapes(spec, "quick+edge+held_out+models")
    result = evaluate(EvalRequest(kernel="topk_softmax", candidate=KernelSource(path=str(kernel)), shapes=shapes,
                                  dtypes=spec.dtypes, time=False, timeout_s=900))
    assert result.ok, result.reason
    assert all(s.correct for s in result.shapes if s.covered)
    assert all(s.covered for s in result.shapes if s.shape[1] <= 512)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("renormalize", [False, True])
def test_same_ids_and_weights_as_sglangs_op(kernels, dtype, renormalize):
    pytest.importorskip("sgl_kernel")
    module, name = KERNEL_BASELINES["topk_softmax"].removeprefix("py:").split(":")
    sglang_op = getattr(__import__(module, fromlist=[name]), name)
    for tokens in TOKENS:
        for experts, k in ROUTERS:
            x = _logits(tokens, experts, dtype, "plain")
            w = torch.empty(tokens, k, device="cuda")
            ids = torch.empty(tokens, k, dtype=torch.int32, device="cuda")
            sglang_op(w, ids, x, renormalize)
            code, ours_w, ours_ids = _run(kernels["shipped"], x, k, renormalize)
            assert code == 0
            assert torch.equal(ours_ids, ids), (tokens, experts, k)
            torch.testing.assert_close(ours_w, w, atol=1e-6, rtol=1e-5)


def test_shipped_patch_is_timed_against_sglangs_op():
    """What `astra-sglang bench topk_softmax` runs: the shipped patch against SGLang's op, quick shapes."""
    pytest.importorskip("sgl_kernel")
    spec = get_spec("topk_softmax")
    result = evaluate(EvalRequest(kernel="topk_softmax", candidate=KernelSource(path=str(SHIPPED)),
                                  baseline=KernelSource(path=KERNEL_BASELINES["topk_softmax"]),
                                  shapes=resolve_shapes(spec, "quick"), dtypes=["bfloat16"], time=True, timeout_s=900))
    assert result.ok, result.reason
    assert all(s.correct and s.speedup for s in result.shapes if s.covered)
