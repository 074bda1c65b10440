"""Every argument set of one (spec, shape, dtype), for the checks and the timed launches alike.

Per tensor argument one slab: `count` guarded buffers of the argument's layout (inputs.layout) back to back,
each in its own canary bytes. The correctness trials take their sets from the same slabs the timed launches
use, so a kernel meets the same pointers, the same allocation (its size, as the driver reports it, included)
and the same alignment in both. A [count, *shape] view of an argument across all sets (`rows`) lets the
preparation before every timed replay (prestate kinds, restoring in-place arguments, changing one element
of every input) and the fingerprints after it run as one launch per argument, whatever the count.

With hot L2 the read-only inputs have one row that every set shares.
"""
from __future__ import annotations

import math

import torch

from astra_sglang.harness.inputs import _arg_dtype, Layout, OpArgs, layout, scalar_value
from astra_sglang.harness.limits import CANARY
from astra_sglang.specs.records import KernelSpec


def layouts(spec: KernelSpec, shape: tuple[int, ...], dtype: str) -> list[Layout]:
    return [layout(a, spec.arg_shape(a, shape), _arg_dtype(a, dtype)) for a in spec.tensor_args]


def set_bytes(spec: KernelSpec, shape: tuple[int, ...], dtype: str, shared: frozenset[int] = frozenset()) -> int:
    """Device bytes one more set costs: its own guarded buffers (shared arguments not counted), and the copy of
    its in-place arguments that the timing restores them from before every replay (timed.TimedSets)."""
    ws = layouts(spec, shape, dtype)
    pristine = sum(math.prod(w.shape) * w.dtype.itemsize for a, w in zip(spec.tensor_args, ws) if a.role == "inplace")
    return sum(w.nbytes for i, w in enumerate(ws) if i not in shared) + pristine


class Arena:
    def __init__(self, spec: KernelSpec, shape: tuple[int, ...], dtype: str, device, count: int,
                 shared: frozenset[int] = frozenset()):
        self.spec, self.shape, self.dtype, self.device, self.count = spec, tuple(shape), dtype, device, count
        self.shared = shared
        self.layouts = layouts(spec, self.shape, dtype)
        self.slabs = [torch.full((1 if i in shared else count, w.nbytes), CANARY, dtype=torch.uint8, device=device)
                      for i, w in enumerate(self.layouts)]
        dims = spec.dims_of(self.shape)
        self.scalars = [dims[a.dim] if a.dim else scalar_value(a) for a in spec.scalar_args]
        self.dims = dims
        self._sets: dict[int, OpArgs] = {}

    @property
    def own(self) -> frozenset[int]:
        """Arguments every set has a copy of (all but the shared ones)."""
        return frozenset(range(len(self.layouts))) - self.shared

    def _row(self, i: int, k: int) -> int:
        return 0 if i in self.shared else k

    def args(self, k: int) -> OpArgs:
        """Set `k`'s arguments: the same tensor objects (and pointers) every time."""
        if not 0 <= k < self.count:
            raise IndexError(f"set {k} of {self.count}")
        if k not in self._sets:
            buffers = [slab[self._row(i, k)] for i, slab in enumerate(self.slabs)]
            self._sets[k] = OpArgs([w.tensor(b) for w, b in zip(self.layouts, buffers)], list(self.scalars),
                                   [w.guard(b) for w, b in zip(self.layouts, buffers)], dict(self.dims))
        return self._sets[k]

    def rows(self, i: int) -> torch.Tensor:
        """Argument `i` across every set: a [sets, *shape] view into its slab (one row where it is shared)."""
        w, slab = self.layouts[i], self.slabs[i]
        size = torch.empty((), dtype=w.dtype).element_size()
        flat = slab.view(-1).view(w.dtype)
        return flat.as_strided((slab.shape[0], *w.shape), (slab.shape[1] // size, *w.strides), w.pre // size)

    def outside_rows(self, i: int) -> torch.Tensor:
        """bool [rows]: the canary bytes around argument `i` of that set were written (device-side, no sync)."""
        w, slab = self.layouts[i], self.slabs[i]
        canary = slab != CANARY
        if not w.strided:
            return canary[:, :w.pre].any(dim=1) | canary[:, w.pre + w.extent:].any(dim=1)
        from astra_sglang.harness.guards import logical_mask

        mask = logical_mask(w.guard(slab[0]), self.args(0).tensors[i])
        return (canary & ~mask).any(dim=1)

    def nbytes(self) -> int:
        return sum(s.numel() for s in self.slabs)
