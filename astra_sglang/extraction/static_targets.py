"""Patch targets found statically: does an installed package's source bind "module:attr" at module level?
Nothing is imported (SGLang's packages pull CUDA-only code on import, and bind their kernel names only under
`if _is_cuda:`), so the check runs on any machine: before a patch is loaded, by onboarding, by the tuner bar's
import check of SGLang's own scripts."""
from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from astra_sglang.patchset.manifest import Target

Status = Literal["ok", "not-installed", "missing-module", "missing-attr"]


@dataclass(frozen=True)
class TargetCheck:
    target: Target
    status: Status
    detail: str = ""


def package_installed(name: str) -> bool:
    return name in sys.modules or importlib.util.find_spec(name) is not None


def module_source(module: str) -> Path | None:
    """The .py file of `module` found by walking package folders, importing nothing (find_spec on a dotted
    name would import its parents, and SGLang's packages pull CUDA-only code on import)."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top) if top not in sys.modules else sys.modules[top].__spec__
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for folder in spec.submodule_search_locations or []:
        base = Path(folder).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names a module binds at import time, in every branch (`if _is_cuda: from sgl_kernel import f`),
    plus whether it has a star import (then any name may exist)."""
    names: set[str] = set()
    star = False

    def bind(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                bind(elt)

    def walk(body: list[ast.stmt]) -> None:
        nonlocal star
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                for inner in ast.walk(node):  # `global f` inside a function binds a module name too
                    if isinstance(inner, ast.Global):
                        names.update(inner.names)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        star = True
                    else:
                        names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    bind(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                bind(node.target)
            for field in ("body", "orelse", "finalbody"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    walk(getattr(node, field, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                walk(handler.body)

    walk(tree.body)
    return names, star


def static_check(target: Target) -> TargetCheck:
    """Does the installed package's source bind `target` at module level? Imports nothing, so it works on a
    machine without CUDA, where SGLang binds its kernel names only under `if _is_cuda:`."""
    if not package_installed(target.package):
        return TargetCheck(target, "not-installed", f"{target.package} is not installed")
    path = module_source(target.module)
    if path is None:
        return TargetCheck(target, "missing-module", f"no module {target.module} in the installed {target.package}")
    names, star = _top_level_names(ast.parse(path.read_text(), filename=str(path)))
    if target.attr in names:
        return TargetCheck(target, "ok", str(path))
    if star:
        return TargetCheck(target, "ok", f"{path} (star import: not provable statically)")
    return TargetCheck(target, "missing-attr", f"{target.module} binds no {target.attr!r} ({path})")
