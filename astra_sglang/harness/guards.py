"""Writes a kernel must not make: outside the logical tensors it was handed (into the canary bytes around
them, or the gaps between strided rows), and into any input-only argument.

Checked after every call of the correctness trials and after the verified replays of the timed graph; the
reason names the argument and the element offset of the first offending byte.
"""
from __future__ import annotations

import torch

from astra_sglang.harness.inputs import Guarded, OpArgs
from astra_sglang.harness.limits import CANARY
from astra_sglang.specs.records import KernelSpec


def logical_mask(guard: Guarded, tensor: torch.Tensor) -> torch.Tensor:
    """True at every byte of the buffer that belongs to an element of the (strided) tensor."""
    size = tensor.element_size()
    marks = torch.zeros(guard.extent // size, dtype=torch.int32, device=tensor.device)
    marks.as_strided(tensor.shape, tensor.stride()).fill_(1)
    mask = torch.zeros_like(guard.buffer, dtype=torch.bool)
    mask[guard.pre:guard.pre + guard.extent] = marks.repeat_interleave(size).bool()
    return mask


def _where(guard: Guarded, tensor: torch.Tensor, byte: int) -> str:
    size = tensor.element_size()
    if byte < guard.pre:
        return f"{(guard.pre - byte + size - 1) // size} elements before its start"
    end = guard.pre + guard.extent
    if byte >= end:
        return f"element +{(byte - end) // size} past its end"
    element = (byte - guard.pre) // size
    row_stride = tensor.stride(-2) if tensor.dim() > 1 else tensor.numel()
    return f"the gap after row {element // row_stride} (element {element} of the buffer)"


def _first(bad: torch.Tensor) -> int | None:
    index = torch.nonzero(bad)
    return int(index[0, 0]) if index.numel() else None


def outside_write(spec: KernelSpec, args: OpArgs) -> str:
    """'' when every canary byte of every tensor argument is intact, else where the first write landed."""
    for arg, tensor, guard in zip(spec.tensor_args, args.tensors, args.guards):
        if guard is None:
            continue
        canary = guard.buffer != CANARY
        if guard.strided:
            canary &= ~logical_mask(guard, tensor)
        else:
            canary[guard.pre:guard.pre + guard.extent] = False
        byte = _first(canary)
        if byte is not None:
            return f"{arg.name}: wrote outside the tensor, at {_where(guard, tensor, byte)}"
    return ""


def snapshot_inputs(spec: KernelSpec, args: OpArgs) -> list[torch.Tensor | None]:
    """Copies of every input-only argument's bytes (its guard bytes included), taken before a call."""
    if not args.guards:
        return [t.clone() if a.role == "in" else None for a, t in zip(spec.tensor_args, args.tensors)]
    return [g.buffer.clone() if a.role == "in" else None for a, g in zip(spec.tensor_args, args.guards)]


def input_written(spec: KernelSpec, args: OpArgs, before: list[torch.Tensor | None]) -> str:
    """'' when every input-only argument is bit-for-bit what it was before the call."""
    for i, (arg, tensor, saved) in enumerate(zip(spec.tensor_args, args.tensors, before)):
        if saved is None:
            continue
        guard = args.guards[i] if args.guards else None
        now = guard.buffer if guard is not None else tensor
        changed = now.view(torch.uint8).reshape(-1) != saved.view(torch.uint8).reshape(-1)
        byte = _first(changed)
        if byte is None:
            continue
        if guard is None:
            return f"{arg.name}: wrote into an input-only argument (byte {byte})"
        inside = guard.pre <= byte < guard.pre + guard.extent and (
            not guard.strided or bool(logical_mask(guard, tensor)[byte]))
        if inside:
            element = (byte - guard.pre) // tensor.element_size()
            return f"{arg.name}: wrote into an input-only argument, at element {element}"
        return f"{arg.name}: wrote outside the tensor, at {_where(guard, tensor, byte)}"
    return ""


def violation(spec: KernelSpec, args: OpArgs, before: list[torch.Tensor | None]) -> str:
    """The first forbidden write of the call that `before` was taken for: into an input, or outside a tensor."""
    return input_written(spec, args, before) or outside_write(spec, args)


def outside_flag(spec: KernelSpec, args: OpArgs) -> torch.Tensor:
    """`outside_write` as a device-side flag (no host sync): True when some canary byte was overwritten."""
    flags = [torch.zeros((), dtype=torch.bool, device=args.tensors[0].device)] if args.tensors else []
    for tensor, guard in zip(args.tensors, args.guards):
        if guard is None:
            continue
        canary = guard.buffer != CANARY
        if guard.strided:
            flags.append((canary & ~logical_mask(guard, tensor)).any())
        else:
            flags.append(canary[:guard.pre].any() | canary[guard.pre + guard.extent:].any())
    return torch.stack(flags).any() if flags else torch.zeros((), dtype=torch.bool)
