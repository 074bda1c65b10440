"""The argument sets of a timed shape, one per launch, and the check of what the timed launches computed.

No launch of a timed CUDA graph shares its arguments with another launch of the same replay, so no
launch's work can hide behind another's; each set is drawn from a seed of its own so that it can be
restored exactly. After timing, `verify` restores every set, changes one element of every input in every
other set, runs the very launches that were timed once more (a replay of the timed graph, or the eager
calls) and checks every set: every output against the fp64 reference of its inputs, every canary byte, every
input-only argument bit for bit. A candidate whose timed work differs from its checked work (it skips work
while captured, after N calls, or replays a result it computed at capture time) fails here.

With L2 "hot" the read-only inputs are one copy all launches share (they stay in L2); outputs and in-place
arguments still get a copy per launch, and a second pass changes the shared inputs too.
"""
from __future__ import annotations

from typing import Callable

import torch

from astra_sglang.harness.check import perturb
from astra_sglang.harness.compare import compare, mismatch, tolerance_of
from astra_sglang.harness.guards import outside_flag, outside_write
from astra_sglang.harness.inputs import OpArgs, allocate, checked_args, fill
from astra_sglang.specs.records import KernelSpec

SHARED = -1


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


class TimedSets:
    def __init__(self, spec: KernelSpec, shape: tuple[int, ...], dtype: str, device: torch.device, seed: int,
                 hot: bool = False):
        self.spec, self.shape, self.dtype, self.device, self.seed = spec, shape, dtype, device, seed
        self.shared = frozenset(i for i, a in enumerate(spec.tensor_args) if a.role == "in") if hot else frozenset()
        self.own = frozenset(range(len(spec.tensor_args))) - self.shared
        self.sets: list[OpArgs] = []
        self.common = allocate(spec, shape, dtype, device) if self.shared else None
        if self.common is not None:
            self._write(SHARED, self.common, False)
        self.reference = spec.reference_fn()

    # -- the sets ----------------------------------------------------------------------------------------
    def _gen(self, index: int, salt: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(self.seed * 1_000_003 + (index + 1) * 2 + salt)

    def _write(self, index: int, args: OpArgs, perturbed: bool) -> None:
        """Set `index`'s values (SHARED: the shared inputs) into `args`: as drawn for timing, or with one
        element of every input changed."""
        skip = self.own if index == SHARED else self.shared
        fill(self.spec, args, self._gen(index, 0), skip=skip)
        if perturbed:
            perturb(self.spec, args, args.clone(), self._gen(index, 1), skip=skip)

    def _new(self, guard: bool = True) -> OpArgs:
        args = allocate(self.spec, self.shape, self.dtype, self.device, guard=guard)
        for i in self.shared:  # hot L2: every set holds the one shared copy
            args.tensors[i] = self.common.tensors[i]
            if args.guards:
                args.guards[i] = self.common.guards[i]
        return args

    def own_bytes(self) -> int:
        """Device bytes one more set costs (its own tensors with their guards)."""
        probe = self.sets[0] if self.sets else self._new()
        return sum(probe.guards[i].buffer.numel() for i in self.own)

    def grow(self, count: int) -> None:
        while len(self.sets) < count:
            args = self._new()
            self._write(len(self.sets), args, False)
            self.sets.append(args)

    # -- the check after timing --------------------------------------------------------------------------
    def verify(self, run: Callable[[], None], what: str) -> str:
        """Restore every set (every other one, or all in the second pass, with one element of each input
        changed), `run` the timed launches once and check every set. '' when all hold what they should."""
        passes = [False] + ([True] if len(self.sets) == 1 or self.shared else [])
        for second in passes:
            changed = (lambda i: True) if second else (lambda i: i % 2 == 1)
            for i, args in enumerate(self.sets):
                self._write(i, args, changed(i))
            if self.common is not None:
                self._write(SHARED, self.common, second)
            torch.cuda.synchronize()
            run()
            torch.cuda.synchronize()
            wrong = self._check(changed, second)
            if wrong:
                return f"{what}, launch {wrong[0]} of {len(self.sets)}: {wrong[1]}"
        return ""

    def _expected_inputs(self, index: int, changed: bool, shared: OpArgs | None) -> OpArgs:
        scratch = allocate(self.spec, self.shape, self.dtype, self.device, guard=False)
        for i in self.shared:
            scratch.tensors[i] = shared.tensors[i]
        self._write(index, scratch, changed)
        return scratch

    def _check(self, changed: Callable[[int], bool], second: bool) -> tuple[int, str] | None:
        shared = None
        if self.common is not None:
            shared = allocate(self.spec, self.shape, self.dtype, self.device, guard=False)
            self._write(SHARED, shared, second)
        flags = []
        for i, args in enumerate(self.sets):  # device-side flags: one host sync for all sets
            inputs = self._expected_inputs(i, changed(i), shared)
            ref = inputs.upcast()
            self.reference(*ref.call_args(self.spec))
            flags.append(self._flag(args, inputs, ref))
        bad = torch.nonzero(torch.stack(flags)) if flags else torch.empty(0)
        if not bad.numel():
            return None
        index = int(bad[0, 0])
        inputs = self._expected_inputs(index, changed(index), shared)
        return index, self._explain(self.sets[index], inputs)

    def _flag(self, args: OpArgs, inputs: OpArgs, ref: OpArgs) -> torch.Tensor:
        flags = [outside_flag(self.spec, args)]
        for i, arg in enumerate(self.spec.tensor_args):
            if arg.role == "in":
                flags.append((_bits(args.tensors[i]) != _bits(inputs.tensors[i])).any())
        for i, _role in checked_args(self.spec):
            tol = tolerance_of(self.spec, self.spec.tensor_args[i], self.dtype)
            flags.append(mismatch(args.tensors[i], ref.tensors[i], tol).any())
        return torch.stack(flags).any()

    def _explain(self, args: OpArgs, inputs: OpArgs) -> str:
        outside = outside_write(self.spec, args)
        if outside:
            return outside
        for i, arg in enumerate(self.spec.tensor_args):
            if arg.role == "in" and not torch.equal(_bits(args.tensors[i]), _bits(inputs.tensors[i])):
                return f"{arg.name}: wrote into an input-only argument"
        ref = inputs.upcast()
        self.reference(*ref.call_args(self.spec))
        verdict = compare(self.spec, self.dtype, args, ref)
        return verdict.reason or "differs from the reference"
