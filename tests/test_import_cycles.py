"""No import cycles in the package: every `import` / `from ... import` of a package module counts, at module
level, inside functions and under TYPE_CHECKING alike (a lazy import only hides a cycle until someone moves
it). The checker is tried on a small package with cycles first, so a pass means something."""
from __future__ import annotations

import ast
from pathlib import Path

import astra_sglang


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the package rooted at `root` (a folder with __init__.py)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports anywhere in its file (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:  # `from pkg import sub` imports the submodule, else pkg itself
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
    return (found & known) - {name}


def cycles(root: Path) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    files = module_files(root)
    graph = {name: imports_of(name, path, set(files)) for name, path in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_checker_finds_lazy_type_checking_and_relative_cycles(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg import b\n",  # lazy, inside a function
        "pkg/b.py": "from pkg.a import f\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import X\n",
        "pkg/sub/d.py": "from . import c\nX = 1\n",
        "pkg/e.py": "import pkg.a\nimport os\n",  # depends on a cycle, is not in one
    })
    assert cycles(tmp_path / "pkg") == [["pkg.a", "pkg.b"], ["pkg.sub.c", "pkg.sub.d"]]


def test_checker_passes_a_package_without_cycles(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "from pkg import a\n", "pkg/a.py": "from pkg.b import x\n",
                      "pkg/b.py": "x = 1\n"})
    assert cycles(tmp_path / "pkg") == []


def test_astra_sglang_has_no_import_cycles():
    root = Path(astra_sglang.__file__).parent
    assert len(module_files(root)) > 50  # the whole package was read
    assert cycles(root) == []
