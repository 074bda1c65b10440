"""The package's folders are its layers: a module imports only from its own layer or the layers below it, and
no two modules import each other through any chain. Every `import` / `from ... import` of a package module
counts, at module level, inside functions and under TYPE_CHECKING alike (a lazy import only hides a tie until
someone moves it). Each checker is tried on a small package that breaks its rule first, so a pass means
something."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

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


LAYERS = (
    "astra_sglang", "astra_sglang.errors", "astra_sglang.paths", "astra_sglang.progress", "astra_sglang.stats",
    "astra_sglang.specs",          # op specs: records, registry, shape sets
    "astra_sglang.references",     # fp64 torch references of the ops
    "astra_sglang.kernels",        # our first kernels, their variants and knob comments
    "astra_sglang.harness",        # the isolated evaluator: build, check, time, profile, sanitize
    "astra_sglang.patchset",       # the patch format on disk: manifest, store
    "astra_sglang.extraction",     # SGLang's kernels as standalone harnesses; Triton source discovery
    "astra_sglang.baselines",      # SGLang's ops in the spec convention, peers, what bench compares with
    "astra_sglang.triton",         # SGLang's Triton kernels as targets: shared records
    "astra_sglang.triton.moe",     # fused MoE: config files, op, space, patch writer
    "astra_sglang.triton.attention",  # decode / extend attention: launch, op, space, patch writer
    "astra_sglang.optimize.pool",  # builds and evaluations in flight on a host's GPUs or a Ray cluster
    "astra_sglang.optimize.records", "astra_sglang.optimize.winner",  # what every optimizer produces
    "astra_sglang.optimize.tuner",   # the built-in CUDA knob tuner and the Triton config tuners
    "astra_sglang.optimize.agents",  # the LLM loop (its finalists are tuned by the tuner)
    "astra_sglang.optimize",       # one op's run, a job of several, where a run starts, which ops
    "astra_sglang.patching",       # the in-server runtime
    "astra_sglang.serving",        # SGLang servers: start, benchmark, A/B
    "astra_sglang.profile",        # where a live server spends its GPU time
    "astra_sglang.onboard",        # a spec for another SGLang op
    "astra_sglang.cli",            # every click command; nothing below imports it
)
"""Low to high. A module belongs to the longest entry its name starts with."""


def layer_of(module: str, layers: tuple[str, ...]) -> int:
    """Index in `layers` of the longest entry that is `module` or a package above it."""
    best = max((e for e in layers if module == e or module.startswith(e + ".")), key=len, default=None)
    if best is None:
        raise AssertionError(f"{module} belongs to no layer: place it in LAYERS")
    return layers.index(best)


def upward_imports(root: Path, layers: tuple[str, ...]) -> list[str]:
    """Every import of a module in a higher layer, as "importer (layer) -> imported (layer)"."""
    files = module_files(root)
    found = []
    for name, path in files.items():
        mine = layer_of(name, layers)
        for dep in sorted(imports_of(name, path, set(files))):
            theirs = layer_of(dep, layers)
            if theirs > mine:
                found.append(f"{name} ({layers[mine]}) -> {dep} ({layers[theirs]})")
    return found


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


SMALL_LAYERS = ("pkg", "pkg.low", "pkg.mid", "pkg.mid.inner", "pkg.top")


def test_layer_checker_finds_lazy_type_checking_and_relative_upward_imports(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "def f():\n    from pkg.top import cmd\n",  # lazy, inside a function
        "pkg/mid/__init__.py": "from pkg.low import a\n",  # downward: fine
        "pkg/mid/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .inner import c\n",
        "pkg/mid/inner/__init__.py": "",
        "pkg/mid/inner/c.py": "from .. import b\nfrom ...low import a\n",  # its parent layer, and below
        "pkg/top/__init__.py": "",
        "pkg/top/cmd.py": "import pkg.mid.b\n",
    })
    assert upward_imports(tmp_path / "pkg", SMALL_LAYERS) == [
        "pkg.low.a (pkg.low) -> pkg.top.cmd (pkg.top)",
        "pkg.mid.b (pkg.mid) -> pkg.mid.inner.c (pkg.mid.inner)",
    ]


def test_layer_checker_passes_downward_imports_and_places_every_module(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/low/__init__.py": "", "pkg/low/a.py": "x = 1\n",
                      "pkg/top/__init__.py": "", "pkg/top/cmd.py": "from pkg.low.a import x\n"})
    assert upward_imports(tmp_path / "pkg", SMALL_LAYERS) == []
    with pytest.raises(AssertionError, match="^pkg belongs to no layer"):
        upward_imports(tmp_path / "pkg", SMALL_LAYERS[1:])


def test_astra_sglang_imports_only_downward():
    root = Path(astra_sglang.__file__).parent
    assert upward_imports(root, LAYERS) == []


def test_astra_sglang_has_no_import_cycles():
    root = Path(astra_sglang.__file__).parent
    assert len(module_files(root)) > 50  # the whole package was read
    assert cycles(root) == []



def test_pyproject_lists_every_package_of_the_tree():
    """A folder of astra_sglang/ with an __init__.py that pyproject's package list lacks would be missing from the
    built wheel (an editable install does not show it); the data folders pyproject maps in are listed too."""
    import tomllib

    package = Path(astra_sglang.__file__).resolve().parent
    config = tomllib.loads((package.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(("astra_sglang", *init.parent.relative_to(package).parts))
               for init in package.rglob("__init__.py") if "__pycache__" not in init.parts}
    assert set(config["packages"]) == folders | set(config["package-dir"])
