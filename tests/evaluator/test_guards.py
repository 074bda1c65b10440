"""Guard regions: every tensor inside canary bytes at a 16-byte (not 256) offset; writes outside it and into
inputs are found and named with the argument and the element offset."""
import math

import pytest
import torch

from astra_sglang.harness.guards import outside_flag, outside_write, snapshot_inputs, violation
from astra_sglang.harness.inputs import ALIGN_SHIFT, allocate, fill
from astra_sglang.harness.limits import CANARY
from astra_sglang.specs.records import KernelSpec
from astra_sglang.specs.registry import get_spec


def _args(spec_name="silu_and_mul", shape=(5, 12), dtype="bfloat16"):
    spec = get_spec(spec_name)
    return spec, fill(spec, allocate(spec, shape, dtype, "cpu"), torch.Generator().manual_seed(0))


@pytest.mark.parametrize("shape", [(1, 1), (3, 11), (5, 4100), (64, 4096)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_tensors_sit_inside_intact_canaries_at_a_16_byte_offset(shape, dtype):
    spec, args = _args(shape=shape, dtype=dtype)
    for tensor, guard in zip(args.tensors, args.guards):
        assert tensor.data_ptr() - guard.buffer.data_ptr() == guard.pre and guard.pre % 256 == ALIGN_SHIFT
        assert bool((guard.buffer[:guard.pre] == CANARY).all())
        assert bool((guard.buffer[guard.pre + guard.extent:] == CANARY).all())
        assert guard.extent == tensor.numel() * tensor.element_size()
    assert outside_write(spec, args) == "" and not bool(outside_flag(spec, args))


def test_an_argument_the_spec_aligns_further_starts_that_far_past_256_bytes():
    spec = get_spec("per_token_group_quant_fp8")  # SGLang's JIT quant refuses an x less than 32-byte aligned
    args = allocate(spec, (3, 384), "bfloat16", "cpu")
    offsets = {a.name: g.pre % 256 for a, g in zip(spec.tensor_args, args.guards)}
    assert offsets == {"x": 32, "x_q": ALIGN_SHIFT, "x_s": ALIGN_SHIFT}
    assert all(t.data_ptr() - g.buffer.data_ptr() == g.pre for t, g in zip(args.tensors, args.guards))
    raw = spec.model_dump()
    raw["arguments"][0]["align"] = 24
    with pytest.raises(ValueError, match="align"):
        KernelSpec.model_validate(raw)


@pytest.mark.parametrize("offset, where", [(0, "element +0 past its end"), (7, "element +3 past its end"),
                                           (-1, "1 elements before its start"), (-4, "2 elements before its start")])
def test_a_write_outside_a_tensor_is_named_with_its_offset(offset, where):
    spec, args = _args()
    guard = args.guards[1]
    byte = guard.pre + guard.extent + offset if offset >= 0 else guard.pre + offset
    guard.buffer[byte] = 0
    assert outside_write(spec, args) == f"out: wrote outside the tensor, at {where}"
    assert bool(outside_flag(spec, args))


def test_an_input_written_is_told_from_a_write_beside_it():
    spec, args = _args()
    before = snapshot_inputs(spec, args)
    args.tensors[0][2, 5] = args.tensors[0][2, 5] + 1
    row = args.tensors[0].shape[1]
    assert violation(spec, args, before) == f"input: wrote into an input-only argument, at element {2 * row + 5}"
    spec, args = _args()
    before = snapshot_inputs(spec, args)
    args.guards[0].buffer[args.guards[0].pre - 1] = 0
    assert violation(spec, args, before).startswith("input: wrote outside the tensor, at 1 elements before")
    spec, args = _args()
    before = snapshot_inputs(spec, args)
    args.tensors[1].fill_(3.0)  # outputs may be written
    assert violation(spec, args, before) == ""


def test_nan_inputs_compare_by_bits():
    spec, args = _args()
    args.tensors[0][0, 0] = math.nan
    before = snapshot_inputs(spec, args)
    assert violation(spec, args, before) == ""  # NaN != NaN as a value, equal as bits


def _strided_spec() -> KernelSpec:
    spec = get_spec("silu_and_mul")
    args = [a.model_copy(update={"strided": True}) if a.name == "out" else a for a in spec.arguments]
    return spec.model_copy(update={"arguments": args})


def test_strided_arguments_have_guarded_gaps_between_rows():
    spec = _strided_spec()
    args = fill(spec, allocate(spec, (4, 8), "bfloat16", "cpu"), torch.Generator().manual_seed(0))
    out, guard = args.tensors[1], args.guards[1]
    assert out.stride(0) == 8 + ALIGN_SHIFT // 2 and not out.is_contiguous()
    out.fill_(1.0)  # every logical element written: canaries intact
    assert outside_write(spec, args) == ""
    gap = guard.pre + 8 * 2  # the first byte after row 0
    guard.buffer[gap] = 0
    assert outside_write(spec, args) == "out: wrote outside the tensor, at the gap after row 0 (element 8 of the buffer)"
    assert bool(outside_flag(spec, args))


def test_unguarded_allocation_is_plain():
    spec = get_spec("silu_and_mul")
    args = allocate(spec, (2, 4), "float32", "cpu", guard=False)
    assert args.guards == [] and outside_write(spec, args) == ""
