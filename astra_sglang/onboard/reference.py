"""The reference of an onboarded op.

A torch reference computed in fp64 where one is found -- the user's (`--reference MODULE:FUNC`), the tool's own
of that name whose parameters are the spec's arguments, SGLang's native torch version (the forward_native of the
CustomOp class whose forward_cuda calls the op, or a function named <op>_native / native_<op> / torch_<op> in
its module) -- is *proposed*: it serves on CPU and is accepted only once it agrees with the op on the GPU (the
first GPU run, onboard/gpu_check.py). Without one the op itself is the reference: the oracle, run on the GPU in
its own dtype, with a tolerance derived from its own run-to-run and upcast differences.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from dataclasses import dataclass
from types import ModuleType

from astra_sglang.errors import AstraError


@dataclass
class Reference:
    kind: str
    """"user", "astra" (references/small_ops.py, fp64), "native_method", "native_function" or "oracle"."""
    target: str
    """module:function, or module:Class for a native method; for the oracle, the op."""
    note: str

    @property
    def is_oracle(self) -> bool:
        return self.kind == "oracle"


def _calls_name(fn, name: str) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    return any(isinstance(n, ast.Name) and n.id == name or isinstance(n, ast.Attribute) and n.attr == name
               for n in ast.walk(tree))


def _parameters(fn) -> list[str]:
    try:
        return [p for p in inspect.signature(fn).parameters if p != "self"]
    except (TypeError, ValueError):
        return []


def user_reference(target: str, arguments: list[str]) -> Reference:
    """--reference MODULE:FUNC: importable here, taking the spec's arguments in order."""
    module, sep, attr = target.partition(":")
    if not sep:
        raise AstraError(f"--reference {target!r}: write MODULE:FUNCTION")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise AstraError(f"--reference {target}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    params = _parameters(fn)
    if params and params[:len(arguments)] != arguments:
        raise AstraError(f"--reference {target} takes ({', '.join(params)}); the spec's arguments are "
                         f"({', '.join(arguments)}), in that order")
    return Reference("user", target, "the user's torch reference")


def find_reference(module: ModuleType | None, module_name: str, func: str, arguments: list[str]) -> Reference:
    """The torch reference to propose for `module_name:func` whose spec arguments are `arguments`, else the
    oracle. `module` is the imported module (None where only its source was read: SGLang's native versions
    need the import)."""
    from astra_sglang.references import small_ops as ours

    own = getattr(ours, func, None)
    if callable(own) and _parameters(own) == arguments:
        return Reference("astra", f"astra_sglang.references.small_ops:{func}",
                         "the tool's fp64 reference of that name")
    if module is not None:
        for name, obj in sorted(vars(module).items()):
            if (inspect.isclass(obj) and getattr(obj, "__module__", "") == module.__name__
                    and callable(getattr(obj, "forward_native", None)) and callable(getattr(obj, "forward_cuda", None))
                    and _calls_name(obj.forward_cuda, func)):
                return Reference("native_method", f"{module.__name__}:{name}",
                                 f"SGLang's {name}.forward_native (its forward_cuda calls {func})")
        for name in (f"{func}_native", f"native_{func}", f"torch_{func}", f"{func}_torch"):
            if callable(getattr(module, name, None)):
                return Reference("native_function", f"{module.__name__}:{name}", f"SGLang's torch version {name}")
    return Reference("oracle", f"{module_name}:{func}",
                     "no torch reference found: the op itself on the GPU, in its own dtype (pass --reference "
                     "MODULE:FUNC to propose one)")
