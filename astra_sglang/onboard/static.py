"""An op's Python signature read from source, importing nothing where the module does not import here.

SGLang's modules pull CUDA-only code and heavy packages on import (torchvision, transformers, sgl_kernel), so on a
machine without a GPU `onboard` reads the installed module's source with `ast`: the function's definition in any
branch (`if _is_cuda: def gelu_and_mul(...)`), following `from X import f` and `f = g` to where `f` is defined.
A live function is read the same way from `inspect.getsource`, so both give one `Signature`.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astra_sglang.errors import AstraError
from astra_sglang.extraction.static_targets import module_source

NO_DEFAULT = object()
OTHER_DEFAULT = "<expression>"
"""A default that is not a literal (a dtype, a constant): the parameter is bound by name and left at it."""
MAX_HOPS = 4


@dataclass(frozen=True)
class SigParam:
    name: str
    annotation: str = ""
    default: Any = NO_DEFAULT
    keyword: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT


@dataclass
class Signature:
    """What `onboard` reads from an op's definition."""

    name: str
    params: list[SigParam]
    returns: str = ""
    """The return annotation as written ("torch.Tensor", "None", "Tuple[torch.Tensor, torch.Tensor]"; "": none)."""
    returned: list[str] = field(default_factory=list)
    """What its return statements return, the first one with values: one entry per tuple element, the name where
    it is a plain name ("out"), "" otherwise; empty where every return is bare."""
    like: dict[str, str] = field(default_factory=dict)
    """Locals allocated like a parameter: `out = torch.empty_like(input)` -> {"out": "input"}."""
    doc: str = ""
    origin: str = ""
    """Where it was read: the file, with ' (statically)' where the module was not imported."""
    source: str = ""
    """The definition's source text (what the testing agent is shown where it writes a reference)."""


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return NO_DEFAULT
    try:
        return ast.literal_eval(node)
    except ValueError:
        return OTHER_DEFAULT


def from_def(node: ast.FunctionDef | ast.AsyncFunctionDef, origin: str = "") -> Signature:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [SigParam(a.arg, ast.unparse(a.annotation) if a.annotation else "", _literal(d))
              for a, d in zip(positional, defaults) if a.arg not in ("self", "cls")]
    params += [SigParam(a.arg, ast.unparse(a.annotation) if a.annotation else "", _literal(d), keyword=True)
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    returned: list[str] = []
    like: dict[str, str] = {}
    for inner in ast.walk(node):
        if isinstance(inner, ast.Return) and inner.value is not None and not returned:
            values = inner.value.elts if isinstance(inner.value, ast.Tuple) else [inner.value]
            returned = [v.id if isinstance(v, ast.Name) else "" for v in values]
        elif isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.targets[0], ast.Name):
            call = inner.value
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.args
                    and call.func.attr in ("empty_like", "zeros_like", "ones_like")
                    and isinstance(call.args[0], ast.Name)):
                like[inner.targets[0].id] = call.args[0].id
    return Signature(node.name, params, ast.unparse(node.returns) if node.returns else "", returned, like,
                     ast.get_docstring(node) or "", origin, ast.unparse(node))


def _definitions(tree: ast.Module, name: str) -> tuple[list[ast.AST], list[tuple[str, str]], list[str]]:
    """Module-level (any branch) definitions of `name`: function defs, `from M import x as name` (module, x),
    and `name = other` aliases."""
    defs, imports, aliases = [], [], []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                defs.append(node)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imports.extend((node.module, a.name) for a in node.names if (a.asname or a.name) == name)
            elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                  and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)):
                aliases.append(node.value.id)
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for f in ("body", "orelse", "finalbody"):
                    walk(getattr(node, f, []) or [])
                for handler in getattr(node, "handlers", []) or []:
                    walk(handler.body)

    walk(tree.body)
    return defs, imports, aliases


def static_signature(module: str, name: str, hops: int = MAX_HOPS) -> Signature:
    """`module:name`'s signature from the installed source; AstraError naming what was not found."""
    path = module_source(module)
    if path is None:
        raise AstraError(f"cannot read {module}: no such module installed here (not importable, no source found)")
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    defs, imports, aliases = _definitions(tree, name)
    if defs:  # several (one per platform branch): the first, the CUDA one in SGLang's modules
        return from_def(defs[0], f"{path} (statically)")
    for target in aliases:
        if hops:
            return static_signature(module, target, hops - 1)
    for source_module, attr in imports:
        if hops and module_source(source_module) is not None:
            return static_signature(source_module, attr, hops - 1)
    where = f" (imported from {imports[0][0]}, whose source is not installed here)" if imports else ""
    raise AstraError(f"{module} defines no function {name!r} in its source{where}")


def live_signature(fn) -> Signature:
    """A live function's signature: its source where Python has it (the same reading as `static_signature`),
    else `inspect.signature` (no return statements or docstring parameters then)."""
    target = inspect.unwrap(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
        node = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        return from_def(node, inspect.getsourcefile(target) or "")
    except (OSError, TypeError, SyntaxError, StopIteration):
        pass
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise AstraError(f"{getattr(fn, '__name__', fn)}: no Python signature to read (a builtin or torch op); "
                         "onboard its Python wrapper") from None
    params = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        ann = p.annotation if p.annotation is not p.empty else ""
        ann = ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))
        params.append(SigParam(p.name, ann, NO_DEFAULT if p.default is p.empty else p.default,
                               p.kind is p.KEYWORD_ONLY))
    ret = sig.return_annotation
    returns = "" if ret is sig.empty else ret if isinstance(ret, str) else getattr(ret, "__name__", str(ret))
    return Signature(getattr(fn, "__name__", "op"), params, returns, doc=inspect.getdoc(fn) or "", origin="inspect")
