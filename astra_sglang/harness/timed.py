"""The argument sets of a timed shape (one per launch, in the arena the checks used), their preparation before
every replay, and the check of what the timed launches left in them.

Before every replay, candidate's and baseline's alike (`prepare`): in-place arguments back to their drawn
values, one element of every input of every set changed anew (the last change undone), and the outputs given
a pre-state of prestate.KINDS drawn at random. So no replay finds its outputs already holding its results or
its inputs as the last replay left them: a kernel that caches results, skips work its outputs say is done, or
computes at capture time what it replays, is wrong in the replay after.

After a checked replay (`check_left`), every launched set is compared exactly as the replay left it: its
outputs and in-place arguments against the fp64 reference of the inputs it was handed, its canary bytes, its
input-only arguments bit for bit against the drawn values plus the current change. Before that, with no host
synchronization between the replay and them, per-set fingerprints of the outputs are taken on the timing stream
(`fingerprints`); fingerprints taken again after a device-wide synchronization must equal them, or work of the
timed launches went on after the stream had passed them (another stream, a host thread).

With L2 "hot" the read-only inputs are one row all sets share (they stay in L2).
"""
from __future__ import annotations

import torch

from astra_sglang.harness import draw, prestate
from astra_sglang.harness.arena import Arena
from astra_sglang.harness.compare import compare, mismatch, tolerance_of
from astra_sglang.harness.draw import Change, bits
from astra_sglang.harness.guards import outside_write
from astra_sglang.harness.inputs import OpArgs, allocate, checked_args, fill

SHARED = -1


class TimedSets:
    def __init__(self, arena: Arena, seed: int):
        self.arena, self.spec, self.seed = arena, arena.spec, seed
        self.shape, self.dtype, self.device = arena.shape, arena.dtype, arena.device
        self.reference = self.spec.reference_fn()
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.changes: dict[int, Change | None] = {}
        self.previous: dict[int, Change | None] = {}
        self.kind: prestate.Kind = "nan"
        self.finite: dict[int, torch.Tensor] = {}
        for k in range(arena.count):
            self._write(k, arena.args(k), arena.shared)
        if arena.shared:
            self._write(SHARED, arena.args(0), arena.own)
        self.inplace = {i: arena.rows(i).clone() for i, a in enumerate(self.spec.tensor_args) if a.role == "inplace"}

    @property
    def count(self) -> int:
        return self.arena.count

    def _seeded(self, index: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(self.seed * 1_000_003 + (index + 1) * 2)

    def _write(self, index: int, args: OpArgs, skip: frozenset[int]) -> None:
        fill(self.spec, args, self._seeded(index), skip=skip)

    def own_bytes(self) -> int:
        return sum(self.arena.slabs[i][0].numel() for i in self.arena.own)

    # -- before every replay ------------------------------------------------------------------------------
    def prepare(self, kind: prestate.Kind) -> None:
        """Back to the drawn values, a new one-element change per input and set, `kind` in the outputs."""
        spec, arena = self.spec, self.arena
        self.previous = dict(self.changes)
        for i, change in self.changes.items():
            if change is not None and i not in self.inplace:
                change.undo(arena.rows(i))
        for i, drawn in self.inplace.items():
            arena.rows(i).copy_(drawn)
        self.changes = {i: draw.perturb_rows(a, arena.rows(i), self.gen, arena.dims)
                        for i, a in enumerate(spec.tensor_args) if a.role != "out"}
        self.kind = kind
        self.finite = {}
        for i, arg in enumerate(spec.tensor_args):
            if arg.role == "out" and kind == "finite":  # one draw every set shares: one set's worth of memory
                self.finite[i] = prestate.finite_values(arena.args(0).tensors[i], self.gen)
                arena.rows(i).copy_(self.finite[i].expand_as(arena.rows(i)))
            elif arg.role == "out" and kind == "nan":
                draw.poison(arena.rows(i))

    # -- after a checked replay ---------------------------------------------------------------------------
    def fingerprints(self) -> torch.Tensor:
        """int64 [sets, checked args]: the sum of every output's and in-place argument's bit patterns per set,
        computed on the current stream (no synchronization)."""
        sums = []
        for i, _role in checked_args(self.spec):
            rows = bits(self.arena.rows(i))
            sums.append(rows.to(torch.int64) if rows.dim() == 1 else
                        rows.sum(dim=tuple(range(1, rows.dim())), dtype=torch.int64))
        return torch.stack(sums, dim=1)

    def expected_inputs(self, k: int, changes: dict[int, Change | None] | None = None) -> OpArgs:
        """Set `k`'s inputs as the last preparation left them (or with `changes` instead), unguarded."""
        scratch = allocate(self.spec, self.shape, self.dtype, self.device, guard=False)
        self._write(k, scratch, self.arena.shared)
        if self.arena.shared:
            self._write(SHARED, scratch, self.arena.own)
        for i, change in (self.changes if changes is None else changes).items():
            if change is not None:
                change.on_row(0 if i in self.arena.shared else k, scratch.tensors[i])
        return scratch

    def check_left(self, order: list[int], what: str, early: torch.Tensor | None = None,
                   tail: int | None = None) -> str:
        """'' when every set launched in `order` (its last `tail` launches only, where given) holds what its
        launch should have left; else the first offence, by its position in `order`."""
        skip = max(0, len(order) - tail) if tail else 0
        launched = order[skip:]
        torch.cuda.synchronize()
        if early is not None:
            late = torch.nonzero((self.fingerprints() != early).any(dim=1))
            if late.numel():
                return (f"{what}: set {int(late[0, 0])}'s outputs changed after the timed launches ended on the "
                        "stream (work left running on another stream or thread, outside the timed region)")
        outside = torch.zeros(self.count, dtype=torch.bool, device=self.device)
        for i in range(len(self.spec.tensor_args)):
            outside |= self.arena.outside_rows(i).expand(self.count)  # a shared argument's one row: every set's
        flags = []
        for k in launched:
            inputs = self.expected_inputs(k)
            ref = inputs.for_reference(self.spec)
            self.reference(*ref.call_args(self.spec))
            flags.append(self._flag(self.arena.args(k), inputs, ref) | outside[k])
        bad = torch.nonzero(torch.stack(flags)) if flags else torch.empty(0)
        if not bad.numel():
            return ""
        position = int(bad[0, 0])
        return f"{what}, launch {skip + position} of {len(order)}: {self._explain(launched[position])}"

    def _flag(self, args: OpArgs, inputs: OpArgs, ref: OpArgs) -> torch.Tensor:
        flags = []
        for i, arg in enumerate(self.spec.tensor_args):
            if arg.role == "in":
                flags.append((bits(args.tensors[i]) != bits(inputs.tensors[i])).any())
        for i, _role in checked_args(self.spec):
            tol = tolerance_of(self.spec, self.spec.tensor_args[i], self.dtype)
            flags.append(mismatch(args.tensors[i], ref.tensors[i], tol).any())
        return torch.stack(flags).any()

    def _explain(self, k: int) -> str:
        args = self.arena.args(k)
        outside = outside_write(self.spec, args)
        if outside:
            return outside
        inputs = self.expected_inputs(k)
        for i, arg in enumerate(self.spec.tensor_args):
            if arg.role == "in" and not torch.equal(bits(args.tensors[i]), bits(inputs.tensors[i])):
                return f"{arg.name}: wrote into an input-only argument"
        ref = inputs.for_reference(self.spec)
        self.reference(*ref.call_args(self.spec))
        verdict = compare(self.spec, self.dtype, args, ref, before=self._before(k, inputs),
                          held=prestate.HELD[self.kind] if self.kind != "stale" else "the previous launch's results")
        return verdict.reason or "differs from the reference"

    def _before(self, k: int, inputs: OpArgs) -> list[torch.Tensor | None]:
        """What set `k`'s outputs and in-place arguments held before the launch (for the reason's wording)."""
        before: list[torch.Tensor | None] = [None] * len(inputs.tensors)
        prior = None
        if self.kind == "stale":  # the results of the previous preparation's inputs
            prior = self.expected_inputs(k, self.previous).for_reference(self.spec)
            self.reference(*prior.call_args(self.spec))
        for i, arg in enumerate(self.spec.tensor_args):
            if arg.role == "inplace":
                before[i] = inputs.tensors[i]
            elif arg.role == "out":
                t = inputs.tensors[i]
                before[i] = (self.finite[i] if self.kind == "finite" else
                             prior.tensors[i].to(t.dtype) if prior is not None else _poisoned_like(t))
        return before


def _poisoned_like(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(t)
    draw.poison(out)
    return out
