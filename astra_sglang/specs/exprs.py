"""Dim expressions of a spec ("2*d", "hidden // group_size", "min(tokens, max_pos) * rope_dim"): integers,
named dims, + - * // %, unary minus, min() and max(). Parsed once into closures, evaluated per call without
ast (the live patch's hot path) and traceable by dynamo."""
from __future__ import annotations

import ast
import operator
from typing import Callable

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}
_CALLS = {"min": min, "max": max}


def compile_dim(expr: str | int) -> Callable[[dict], int]:
    """A shape expression as nested closures over named dims; ValueError names what is not allowed."""
    if isinstance(expr, bool) or not isinstance(expr, (str, int)):
        raise ValueError(f"a dim expression is an integer or a string, got {expr!r}")
    if isinstance(expr, int):
        return lambda dims: expr

    def build(node: ast.AST) -> Callable[[dict], int]:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            value = node.value
            return lambda dims: value
        if isinstance(node, ast.Name):
            name = node.id
            return lambda dims: dims[name]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            fn, left, right = _OPS[type(node.op)], build(node.left), build(node.right)
            return lambda dims: fn(left(dims), right(dims))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = build(node.operand)
            return lambda dims: -inner(dims)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS
                and node.args and not node.keywords):
            fn, parts = _CALLS[node.func.id], [build(a) for a in node.args]
            return lambda dims: fn(p(dims) for p in parts)
        raise ValueError(f"unsupported dim expression {expr!r} (integers, dim names, + - * // %, min, max)")

    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise ValueError(f"not a dim expression: {expr!r}") from None
    return build(tree.body)


def dim_names(expr: str | int) -> list[str]:
    """The dims an expression uses."""
    if isinstance(expr, int):
        return []
    tree = ast.parse(expr, mode="eval")
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls})


def eval_dim(expr: str | int, dims: dict[str, int]) -> int:
    """Evaluate a shape expression such as "2*d" or "tokens" over named dims."""
    return compile_dim(expr)(dims)
