"""The harness's own inputs (init, edge-case fills) through a spec's reference, compared with an fp64 run of the
same reference: a spec whose draws or edge cases its own reference cannot pass fails here, before any kernel.
Shared by the op families' tests (imported by this unique name)."""
from __future__ import annotations

import torch

from astra_sglang.harness.compare import compare
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.specs.registry import get_spec, resolve_shapes


def assert_reference_passes_its_own_check(op: str, dtype: str, shape_sets: str = "edge",
                                          max_rows: int | None = None) -> None:
    spec = get_spec(op)
    for shape in resolve_shapes(spec, shape_sets):
        if max_rows is not None and shape[0] > max_rows:
            continue
        for edge in [None, *spec.edge_cases]:
            args = fill(spec, allocate(spec, shape, dtype, "cpu"), torch.Generator().manual_seed(3), edge)
            ref = args.upcast()
            spec.reference_fn()(*ref.call_args(spec))
            spec.reference_fn()(*args.call_args(spec))
            verdict = compare(spec, dtype, args, ref)
            assert verdict.ok, (shape, edge and edge.name, verdict.reason)
