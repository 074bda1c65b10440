"""The replacement launcher's choices (which calls the variant runs, with which split, what it launches), and the
evaluator op that installs it around SGLang's fused_experts for one call. Without a GPU the kernels are stand-ins
that record their launches; what the variant computes is tested under Triton's interpreter
(test_splitk_interpreted.py)."""
from __future__ import annotations

import contextlib
import sys
import types

import pytest
import torch
from moe_standins import Recorder, sglang_launcher

from astra_sglang.triton.moe import op as moe_op
from astra_sglang.triton.moe import provider as provider_mod
from astra_sglang.triton.moe import source_op, splitk, splitk_launch
from astra_sglang.triton.moe.shapes import QUANT_FLAGS
from astra_sglang.triton.moe.knobs import SplitK, Variant
from astra_sglang.triton.moe.space import MoeConfig
from astra_sglang.triton.moe.splitk_launch import SplitLauncher, fixed

CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4}
E, INTER, HIDDEN, TOPK = 4, 48, 64, 2


def gemm(tokens: int, down: bool, **flags):
    """Positional arguments as SGLang's fused_experts passes them, keywords for the rest."""
    n, k = (HIDDEN, INTER) if down else (2 * INTER, HIDDEN)
    A = torch.zeros(tokens * TOPK if down else tokens, k, dtype=torch.bfloat16)
    B = torch.zeros(E, n, k, dtype=torch.bfloat16)
    C = torch.empty(tokens, TOPK, n, dtype=torch.bfloat16) if down else torch.empty(tokens * TOPK, n,
                                                                                   dtype=torch.bfloat16)
    ids = torch.zeros(tokens, TOPK, dtype=torch.int32)
    args = (A, B, None, C, None, None, None, torch.ones(tokens, TOPK), ids, torch.zeros(64, dtype=torch.int32),
            torch.zeros(4, dtype=torch.int32), torch.tensor([16]), down, 1 if down else TOPK, dict(CONFIG))
    return args, dict(compute_type="bf16", use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False,
                      use_int4_w4a16=False, per_channel_quant=False, **flags)


@pytest.fixture
def reduced(monkeypatch):
    """The reduce kernel's calls (a Triton launch otherwise)."""
    calls = []
    module = types.ModuleType("astra_sglang.triton.moe.splitk_reduce")
    module.reduce_into = lambda ws, c, rows, n, split: calls.append((tuple(ws.shape), c, rows, n, split))
    monkeypatch.setitem(sys.modules, "astra_sglang.triton.moe.splitk_reduce", module)
    return calls


def test_the_chosen_split_runs_the_variant_into_a_workspace(reduced):
    original, kernel = sglang_launcher(), Recorder()
    launcher = SplitLauncher(original, kernel, fixed(1, 4, E, INTER, HIDDEN))
    up_args, up_kwargs = gemm(3, down=False)
    launcher(*up_args, **up_kwargs)
    assert len(original.calls) == 1 and not kernel.launches  # split 1: SGLang's launcher, untouched
    args, kwargs = gemm(3, down=True)
    launcher(*args, **kwargs)
    (grid, launched), = kernel.launches
    assert grid == (64 // 16 * (HIDDEN // 32), 4) and launched["SPLIT_K"] == 4
    assert launched["stride_ck"] == 3 * TOPK * HIDDEN and launched["c_ptr"].dtype == torch.float32
    assert set(launched) == set(splitk.PARAMS + splitk.ADDED) | {"num_warps"}
    assert launched["MUL_ROUTED_WEIGHT"] is True and launched["top_k"] == 1 and launched["even_Ks"] is False
    assert reduced == [((4, 3 * TOPK, HIDDEN), args[3], 3 * TOPK, HIDDEN, 4)]


@pytest.mark.parametrize("flag", QUANT_FLAGS[1:] + splitk_launch.FUSED)
def test_calls_the_variant_does_not_cover_go_to_sglang(flag, reduced):
    original, kernel = sglang_launcher(), Recorder()
    launcher = SplitLauncher(original, kernel, lambda call: 8)
    args, kwargs = gemm(1, down=True)
    launcher(*args, **{**kwargs, flag: True})
    assert len(original.calls) == 1 and not kernel.launches and not reduced


def test_a_workspace_past_int32_offsets_keeps_sglangs_launch(reduced):
    original, kernel = sglang_launcher(), Recorder()
    launcher = SplitLauncher(original, kernel, lambda call: 16)
    args, kwargs = gemm(1, down=True)
    ids = torch.zeros(2**23, TOPK, dtype=torch.int32).expand(2**23, TOPK)  # 2^24 slots x 64 x 16 > 2^31
    launcher(*args[:8], ids, *args[9:], **kwargs)
    assert len(original.calls) == 1 and not kernel.launches


def test_the_choice_is_planned_once_per_call_form(reduced):
    seen = []
    launcher = SplitLauncher(sglang_launcher(), Recorder(), lambda call: seen.append(call) or 2)
    for _ in range(3):
        launcher(*gemm(5, down=True)[0], **gemm(5, down=True)[1])
    launcher(*gemm(6, down=True)[0], **gemm(6, down=True)[1])
    assert [c.tokens for c in seen] == [5, 6] and seen[0].dtype == "bfloat16"
    assert (seen[0].experts, seen[0].n, seen[0].k) == (E, HIDDEN, INTER) and dict(seen[0].config) == CONFIG


def test_a_launcher_of_another_signature_is_refused():
    def other(A, B, C, config):
        pass

    with pytest.raises(splitk.SourceMismatch, match="has no parameter bias"):
        SplitLauncher(other, Recorder(), lambda call: 1)


def test_an_agent_variant_runs_at_split_one_too(reduced):
    original, kernel = sglang_launcher(), Recorder()
    launcher = SplitLauncher(original, kernel, fixed(1, 1, E, INTER, HIDDEN), variant_at_one=True)
    args, kwargs = gemm(2, down=False)
    launcher(*args, **kwargs)
    (grid, launched), = kernel.launches
    assert not original.calls and grid[1] == 1 and launched["c_ptr"] is args[3] and launched["stride_ck"] == 0
    assert not reduced


@pytest.fixture
def fake_sglang(monkeypatch):
    """SGLang's fused MoE module as the provider sees it: fused_experts calls its module global launcher for
    both GEMMs, as SGLang's does."""
    module = types.ModuleType(provider_mod.FUSED_MOE_MODULE)
    module.invoke_fused_moe_kernel = sglang_launcher()
    monkeypatch.setitem(sys.modules, provider_mod.FUSED_MOE_MODULE, module)
    seen = []

    def fused_experts(hidden, w1, w2, output, moe_runner_config):
        tokens = hidden.shape[0]
        seen.append(module.invoke_fused_moe_kernel)
        for down in (False, True):
            args, kwargs = gemm(tokens, down)
            module.invoke_fused_moe_kernel(*args, **kwargs)

    runner = lambda **kw: types.SimpleNamespace(**kw)  # noqa: E731
    monkeypatch.setattr(moe_op, "_sglang", lambda: (fused_experts, lambda c: contextlib.nullcontext(), runner,
                                                    lambda *a: a))
    kernel = Recorder()
    monkeypatch.setattr(provider_mod.KernelSourceProvider, "kernel", property(lambda self: kernel))
    source_op.provider.cache_clear()
    yield module, seen, kernel
    source_op.provider.cache_clear()


def _tensors(tokens):
    return (torch.zeros(tokens, HIDDEN, dtype=torch.bfloat16), torch.zeros(E, 2 * INTER, HIDDEN),
            torch.zeros(E, HIDDEN, INTER), torch.randn(tokens, E), torch.empty(tokens, TOPK))


def test_the_op_installs_the_variant_for_the_call_only(fake_sglang, reduced):
    module, seen, kernel = fake_sglang
    original = module.invoke_fused_moe_kernel
    table = {1: Variant(MoeConfig(16, 32, 64, 1, 4, 3), SplitK(1, 2)), 64: Variant(MoeConfig(16, 32, 64, 1, 4, 3))}
    op = getattr(source_op, source_op.table_name(table))
    op(*_tensors(2))
    assert isinstance(seen[-1], SplitLauncher) and module.invoke_fused_moe_kernel is original
    assert [grid[1] for grid, _ in kernel.launches] == [2] and len(original.calls) == 1  # up: SGLang's
    op(*_tensors(50))  # nearest key 64: no split, SGLang's launcher for both GEMMs
    assert seen[-1] is original and len(original.calls) == 3 and len(kernel.launches) == 1


def test_the_launcher_is_put_back_when_the_call_fails(fake_sglang, monkeypatch):
    module, seen, kernel = fake_sglang
    original = module.invoke_fused_moe_kernel

    def fault(grid):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(Recorder, "__getitem__", lambda self, grid: fault(grid))
    op = getattr(source_op, source_op.table_name({1: Variant(MoeConfig(16, 32, 64, 1), SplitK(2, 2))}))
    with pytest.raises(RuntimeError, match="illegal memory access"):
        op(*_tensors(1))
    assert module.invoke_fused_moe_kernel is original


@pytest.mark.parametrize("source", ["splitk", "agent-0123456789abcdef"])
def test_op_names_round_trip(source):
    table = {1: Variant(MoeConfig(16, 64, 128, 1, 4, 4), SplitK(1, 4)), 4096: Variant(MoeConfig(64, 128, 64, 8))}
    name = source_op.table_name(table, source)
    assert name.isidentifier() and source_op.parse(name) == (source, table)
    assert source_op.candidate_path(table, source) == source_op.MODULE + name
    with pytest.raises(AttributeError):
        source_op.no_such_op  # noqa: B018


def test_the_screening_hook_runs_the_variant_with_the_config_alone(fake_sglang, reduced, monkeypatch):
    module, seen, kernel = fake_sglang
    overrides = []

    @contextlib.contextmanager
    def override(config):
        overrides.append(config)
        yield

    fused_experts = moe_op._sglang()[0]
    monkeypatch.setattr(moe_op, "_sglang", lambda: (fused_experts, override, None, None))
    hidden, w1, w2, logits, weights = _tensors(1)
    config = {**MoeConfig(16, 32, 64, 1, 4, 3).sglang(), "SPLIT_K_DOWN": 4}
    source_op.screen(hidden, w1, w2, (weights, None, logits), None, config)
    assert overrides == [MoeConfig(16, 32, 64, 1, 4, 3).sglang()] and isinstance(seen[-1], SplitLauncher)
    assert [grid[1] for grid, _ in kernel.launches] == [4]
    assert callable(getattr(source_op, "screen_agent0123456789abcdef"))
