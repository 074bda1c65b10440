"""The dims of an onboarded op and every tensor argument's shape over them, from the recorded calls.

Two axes are one dim when they take the same size in every recorded call. `tokens` is the leading axis of the
op's main tensor (its first input of the highest rank); where the calls never vary it, only leading axes (and
per-row vectors) count as tokens, so a weight of the hidden size is not mistaken for a token count that happens
to equal it. An axis of size 1 in every call stays the literal 1; a size twice (or half) a named dim's in every
call is written over it ("2*d"), the smaller sizes named first; a size equal to a field of the `--model` config
is named after the field (hidden, intermediate, heads, kv_heads, head_dim) and joins the `models` shape set.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from astra_sglang.errors import AstraError
from astra_sglang.onboard.signature import Param
from astra_sglang.specs.calls import CallRecord
from astra_sglang.specs.exprs import eval_dim

LAST_AXIS_NAMES = {"vocab": ("probs", "logits", "scores", "prob"), "experts": ("gating_output", "router_logits"),
                   "topk": ("topk_weights", "topk_ids", "topk_idx", "topk_indices")}
"""Names of the last axis of familiar arguments, where no model field names it."""
HEAD_AXES = {"q": "heads", "query": "heads", "k": "kv_heads", "key": "kv_heads", "v": "kv_heads", "value": "kv_heads"}
"""[tokens, heads, head_dim] tensors of attention ops: the middle axis by the tensor's name, the last is head_dim."""
PER_ROW_NAMES = ("weight", "gamma", "gemma", "beta", "bias", "scale")
"""A 1-d tensor with one of these in its name is per column (the hidden size), not per row, when both fit."""


@dataclass
class DimPlan:
    dims: list[str]
    shapes: list[tuple[int, ...]]
    model_dims: dict[str, str]


def _vectors(tensors: list[Param], calls: list[CallRecord]) -> dict[tuple[str, int], tuple[int, ...]]:
    ranks = {}
    for i, call in enumerate(calls):
        for p in tensors:
            rank = len(call.tensors[p.name].shape)
            if ranks.setdefault(p.name, rank) != rank:
                raise AstraError(f"{p.name} has {ranks[p.name]} dims in one recorded call and {rank} in call {i}: "
                                 "onboard takes calls of one layout")
    return {(p.name, a): tuple(c.tensors[p.name].shape[a] for c in calls)
            for p in tensors for a in range(ranks[p.name])}


def plan_dims(params: list[Param], calls: list[CallRecord], model: dict | None) -> DimPlan:
    """Name the dims of the recorded calls and write every tensor parameter's shape over them (in place)."""
    tensors = [p for p in params if p.kind == "tensor"]
    full = [c for c in calls if all(p.name in c.tensors for p in tensors)]
    if not full:
        missing = sorted({p.name for p in tensors for c in calls[:1] if p.name not in c.tensors})
        raise AstraError(f"no recorded call gives every tensor argument (missing {', '.join(missing)})")
    vectors = _vectors(tensors, full)
    ranked = [p for p in tensors if p.role != "out"] or tensors
    main = max(ranked, key=lambda p: sum(1 for (n, _) in vectors if n == p.name))
    if not any(n == main.name for n, _ in vectors):
        raise AstraError(f"{main.name} is a 0-d tensor: onboard needs a tensor with a token axis")
    tokens = vectors[(main.name, 0)]
    varies = len(set(tokens)) > 1
    rank = {p.name: sum(1 for (n, _) in vectors if n == p.name) for p in tensors}
    width = vectors.get((main.name, rank[main.name] - 1))

    def is_tokens(name: str, axis: int) -> bool:
        if vectors[(name, axis)] != tokens:
            return False
        if varies or (name, axis) == (main.name, 0):
            return True
        if rank[name] == 1:  # a per-row vector, unless it is named like a weight and the width fits too
            return not (vectors[(name, 0)] == width and any(w in name.lower() for w in PER_ROW_NAMES))
        return axis == 0

    fields = {v: k for k, v in (model or {}).items() if k != "name" and isinstance(v, int)}
    named: dict[tuple[int, ...], str | int] = {}
    model_dims: dict[str, str] = {}
    order: list[str] = []

    def name_of(key: tuple[str, int]) -> str | int:
        vec = vectors[key]
        if is_tokens(*key):
            return "tokens"
        if vec in named:
            return named[vec]
        if set(vec) == {1}:
            return 1
        for known, dim in list(named.items()):
            if isinstance(dim, str) and dim in order:
                if vec == tuple(2 * k for k in known):
                    return f"2*{dim}"
                if known == tuple(2 * v for v in vec):
                    return f"{dim} // 2"
        field = fields.get(vec[0]) if len(set(vec)) == 1 else None
        hint = next((n for n, args in LAST_AXIS_NAMES.items() if key[0] in args and key[1] == rank[key[0]] - 1), "")
        if not hint and rank[key[0]] == 3 and key[0].lower() in HEAD_AXES:
            hint = HEAD_AXES[key[0].lower()] if key[1] == 1 else "head_dim"
        base = field or hint or "d"
        dim, i = base, 1
        while dim in order or dim == "tokens":
            dim, i = f"{base}{i}", i + 1
        named[vec] = dim
        order.append(dim)
        if field:
            model_dims[dim] = field
        return dim

    # the smallest sizes first: they become the dims, the larger ones expressions over them ("2*d" after "d")
    for key in sorted(vectors, key=lambda k: (vectors[k], k[1])):
        name_of(key)
    for p in tensors:
        p.shape = [name_of((p.name, a)) for a in range(rank[p.name])]
    dims = ["tokens", *order]
    return DimPlan(dims, _shapes(tensors, calls, dims), model_dims)


def _solve(expr) -> tuple[str, int]:
    """(dim, k) where `expr` is "dim" or "k*dim": the dim's value is the size over k; ("", 1) otherwise."""
    if isinstance(expr, str):
        match = re.fullmatch(r"\s*(?:(\d+)\s*\*\s*)?([A-Za-z_]\w*)\s*", expr)
        if match:
            return match.group(2), int(match.group(1) or 1)
    return "", 1


def _shapes(tensors: list[Param], calls: list[CallRecord], dims: list[str]) -> list[tuple[int, ...]]:
    """Each call's dim tuple (deduplicated, in order); AstraError naming a call whose tensors do not fit."""
    shapes: list[tuple[int, ...]] = []
    for i, call in enumerate(calls):
        values: dict[str, int] = {}
        for p in tensors:
            for expr, size in zip(p.shape, call.tensors[p.name].shape if p.name in call.tensors else []):
                dim, factor = _solve(expr)
                if dim in dims and size % factor == 0:
                    values.setdefault(dim, size // factor)
        if not all(d in values for d in dims):
            continue  # a call that leaves out an optional tensor carrying a dim
        for p in tensors:
            if p.name not in call.tensors:
                continue
            want = [eval_dim(e, values) for e in p.shape]
            if want != list(call.tensors[p.name].shape):
                raise AstraError(f"recorded call {i}: {p.name} is {call.tensors[p.name].shape}, not "
                                 f"{want} = [{', '.join(map(str, p.shape))}] as the other calls say")
        shape = tuple(values[d] for d in dims)
        if shape not in shapes:
            shapes.append(shape)
    return shapes
