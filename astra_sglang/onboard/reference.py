"""The reference of an onboarded op: the tool's own fp64 reference where one of that name exists, else SGLang's
native torch version (the forward_native of the CustomOp class whose forward_cuda calls the op, or a function
named <op>_native / native_<op> / torch_<op> in its module), else the op itself (checked against nothing but
itself: said so in the spec)."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from types import ModuleType


@dataclass
class Reference:
    kind: str
    """"astra" (references/small_ops.py, fp64), "native_method", "native_function" or "original"."""
    target: str
    """module:function, or module:Class for a native method."""
    note: str


def _calls_name(fn, name: str) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    return any(isinstance(n, ast.Name) and n.id == name or isinstance(n, ast.Attribute) and n.attr == name
               for n in ast.walk(tree))


def find_reference(module: ModuleType, func: str) -> Reference:
    from astra_sglang.references import small_ops as ours

    if callable(getattr(ours, func, None)):
        return Reference("astra", f"astra_sglang.references.small_ops:{func}", "the tool's fp64 reference of that name")
    for name, obj in sorted(vars(module).items()):
        if (inspect.isclass(obj) and getattr(obj, "__module__", "") == module.__name__
                and callable(getattr(obj, "forward_native", None)) and callable(getattr(obj, "forward_cuda", None))
                and _calls_name(obj.forward_cuda, func)):
            return Reference("native_method", f"{module.__name__}:{name}",
                             f"SGLang's {name}.forward_native (its forward_cuda calls {func})")
    for name in (f"{func}_native", f"native_{func}", f"torch_{func}", f"{func}_torch"):
        if callable(getattr(module, name, None)):
            return Reference("native_function", f"{module.__name__}:{name}", f"SGLang's torch version {name}")
    return Reference("original", f"{module.__name__}:{func}",
                     "no torch version found: the op is its own reference (write one in fp64 and name it here)")
