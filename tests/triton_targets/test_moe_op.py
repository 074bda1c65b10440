"""The evaluator's fused MoE op: configs named in the attribute, SGLang's override applied per batch size,
Triton's resource errors declining the shape. SGLang's fused_experts runs on CUDA only: a stand-in that
computes the reference and records the config it was handed takes its place here."""
from __future__ import annotations

import contextlib

import pytest
import torch

from astra_sglang.harness.gpu_eval import python_op
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.specs.registry import get_spec
from astra_sglang.triton.moe import op as moe_op
from astra_sglang.triton.moe.reference import fused_moe as reference
from astra_sglang.triton.moe.space import MoeConfig

SHAPE = (5, 8, 16, 32, 2)


class OutOfResources(Exception):
    """Named as Triton's: the op tells it apart by name (triton.runtime.errors.OutOfResources)."""


class FakeSGLang:
    def __init__(self, fail_above: int | None = None):
        self.active = None
        self.seen: list[dict | None] = []
        self.fail_above = fail_above

    @contextlib.contextmanager
    def override_config(self, config):
        self.active = config
        yield
        self.active = None

    def fused_experts(self, hidden, w1, w2, output, moe_runner_config):
        assert moe_runner_config.inplace and moe_runner_config.num_experts == moe_runner_config.num_local_experts
        self.seen.append(self.active)
        if self.fail_above and self.active and self.active["BLOCK_SIZE_M"] > self.fail_above:
            raise OutOfResources("out of resource: shared memory, Required: 300000, Hardware limit: 232448")
        weights, ids, logits = output
        out = hidden.double()
        reference(out, w1.double(), w2.double(), logits.double(), torch.empty_like(weights, dtype=torch.float64))
        hidden.copy_(out)

    def entry_points(self):
        runner = lambda **kw: type("Cfg", (), kw)  # noqa: E731 - MoeRunnerConfig's keywords, as attributes
        return self.fused_experts, self.override_config, runner, lambda *a: a


@pytest.fixture
def fake(monkeypatch):
    sglang = FakeSGLang(fail_above=64)
    monkeypatch.setattr(moe_op, "_sglang", sglang.entry_points)
    return sglang


def _args(shape=SHAPE):
    spec = get_spec("fused_moe")
    return fill(spec, allocate(spec, shape, "bfloat16", "cpu", guard=False), torch.Generator().manual_seed(0))


def test_names_round_trip():
    table = {1: MoeConfig(16, 32, 64, 1, 4, 4), 64: MoeConfig(64, 64, 32, 8)}
    name = moe_op.table_name(table)
    assert name.isidentifier() and moe_op.parse_table(name) == table
    assert moe_op.config_name(table[64]) == "config_m64n64k32g8wdsd"
    with pytest.raises(AttributeError):
        moe_op.no_such_op  # noqa: B018


def test_sglang_pick_leaves_the_config_to_sglang(fake):
    args = _args()
    moe_op.sglang_pick(*args.call_args(get_spec("fused_moe")))
    assert fake.seen == [None]


def test_a_table_applies_the_nearest_batch_size(fake):
    table = {1: MoeConfig(16, 32, 64, 1, 4, 4), 64: MoeConfig(32, 64, 32, 8)}
    op = getattr(moe_op, moe_op.table_name(table))
    spec = get_spec("fused_moe")
    for tokens, expect in ((5, table[1]), (40, table[64])):
        args = _args((tokens, *SHAPE[1:]))
        expected = args.upcast()
        reference(*expected.tensors)
        op(*args.call_args(spec))
        assert fake.seen[-1] == expect.sglang()
        assert torch.allclose(args.tensors[0].double(), expected.tensors[0], atol=0.05, rtol=0.05)
        assert torch.allclose(args.tensors[4].double(), expected.tensors[4], atol=1e-6)


def test_a_config_the_gpu_cannot_run_declines_the_shape(fake):
    spec = get_spec("fused_moe")
    launch = python_op(spec, "py:astra_sglang.triton.moe.op:" + moe_op.config_name(MoeConfig(128, 64, 64, 1, 4, 3)))
    args = _args()
    assert launch(args.tensors, args.scalars) == -1  # ASTRA_UNSUPPORTED: "not covered", never a crash
    ok = python_op(spec, "py:astra_sglang.triton.moe.op:" + moe_op.config_name(MoeConfig(64, 64, 64, 1, 4, 3)))
    assert ok(args.tensors, args.scalars) == 0


def test_other_errors_are_not_hidden(fake, monkeypatch):
    def broken(*a, **k):
        raise KeyError("BLOCK_SIZE_M")

    monkeypatch.setattr(fake, "fused_experts", broken)
    with pytest.raises(KeyError):
        moe_op.sglang_pick(*_args().call_args(get_spec("fused_moe")))
