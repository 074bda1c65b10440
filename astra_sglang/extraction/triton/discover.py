"""Find a `@triton.jit` kernel, its launchers and the values it is launched with, by reading the source with
`ast` (Triton kernels are Python: no compiler front end needed, nothing is imported or run).

A launch is `kernel[grid](...)` anywhere in a module; each argument is traced to where its value comes from:
a literal, a local name the launcher assigns literals to (the hard-coded block sizes of SGLang's attention
launchers), or an expression of the inputs. A `**config` splat hands the kernel's remaining constexprs and
Triton's launch options (num_warps, num_stages) over to a config dict: for fused MoE, SGLang's per-GPU files.
"""
from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.extraction.triton.records import KernelParam, Launch, LaunchArg, TritonKernel

JIT_DECORATORS = ("jit", "autotune", "heuristics")


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target)


def _is_triton_kernel(fn: ast.FunctionDef) -> bool:
    """@triton.jit, @triton.autotune(...), @triton.heuristics(...), or a bare @jit imported from triton."""
    for d in fn.decorator_list:
        name = _decorator_name(d)
        if name.split(".")[-1] in JIT_DECORATORS and (name.startswith("triton") or name == "jit"):
            return True
    return False


def _params(fn: ast.FunctionDef) -> list[KernelParam]:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    defaults = [None] * (len(fn.args.posonlyargs + fn.args.args) - len(fn.args.defaults)) + list(fn.args.defaults)
    defaults += list(fn.args.kw_defaults)
    out = []
    for arg, default in zip(args, defaults):
        constexpr = arg.annotation is not None and ast.unparse(arg.annotation).endswith("constexpr")
        out.append(KernelParam(name=arg.arg, constexpr=constexpr,
                               default=None if default is None else ast.unparse(default)))
    return out


def parse(path: Path) -> ast.Module:
    try:
        return ast.parse(Path(path).read_text(), filename=str(path))
    except (OSError, SyntaxError) as exc:
        raise AstraError(f"cannot read Python source {path}: {exc}") from None


def kernels_in(path: Path) -> list[TritonKernel]:
    """Every Triton kernel defined at module level in `path`, with its launches in the same file."""
    tree = parse(path)
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and _is_triton_kernel(node):
            decorators = [_decorator_name(d) for d in node.decorator_list]
            found.append(TritonKernel(name=node.name, file=str(path), line=node.lineno, decorators=decorators,
                                      params=_params(node), autotuned=any(d.endswith("autotune") for d in decorators)))
    for kernel in found:
        kernel.launches = launches_of(kernel, path, tree)
    return found


def find_kernel(path: Path, name: str) -> TritonKernel:
    kernels = kernels_in(path)
    for kernel in kernels:
        if kernel.name == name:
            return kernel
    raise AstraError(f"no @triton.jit kernel {name!r} in {path}; kernels there: "
                     f"{', '.join(k.name for k in kernels) or 'none'}")


def _literals(fn: ast.FunctionDef, name: str) -> list | None:
    """The literals `fn` assigns to local `name` (every branch), or None where one assignment is not a
    literal or the name is a parameter (its value comes from the caller)."""
    params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    if name in params:
        return None
    values = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if not isinstance(node.value, ast.Constant):
                return None
            values.append(node.value.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name) \
                and node.target.id == name:
            return None
    return values or None


def _arg(name: str, value: ast.expr, fn: ast.FunctionDef) -> LaunchArg:
    text = ast.unparse(value)
    if isinstance(value, ast.Constant):
        return LaunchArg(name=name, source="constant", values=[value.value], expr=text)
    if isinstance(value, ast.Name):
        literals = _literals(fn, value.id)
        if literals is not None:
            return LaunchArg(name=name, source="local", values=list(dict.fromkeys(literals)), expr=text)
    return LaunchArg(name=name, source="expression", expr=text)


def launches_of(kernel: TritonKernel, path: Path, tree: ast.Module | None = None) -> list[Launch]:
    """Every `kernel[grid](...)` in `path`, with each argument named (positional ones by the kernel's
    parameter order) and traced."""
    tree = tree or parse(path)
    names = [p.name for p in kernel.params]
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == kernel.name:
            continue
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == kernel.name):
                continue
            args = [_arg(names[i] if i < len(names) else f"arg{i}", v, fn) for i, v in enumerate(node.args)]
            args += [_arg(k.arg, k.value, fn) for k in node.keywords if k.arg is not None]
            splats = [ast.unparse(k.value) for k in node.keywords if k.arg is None]
            out.append(Launch(function=fn.name, file=str(path), line=node.lineno, grid=ast.unparse(node.func.slice),
                              args=args, splats=splats))
    return sorted(out, key=lambda launch: launch.line)


def function_names(path: Path) -> list[str]:
    return [n.name for n in parse(path).body if isinstance(n, ast.FunctionDef)]


def env_reads(path: Path) -> list[str]:
    """Names of the environment variables `path` reads: os.environ.get("X", ...), os.getenv("X"),
    os.environ["X"]."""
    names = []
    for node in ast.walk(parse(path)):
        key = None
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv") and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            names.append(key.value)
    return list(dict.fromkeys(names))


def source_hash(paths: list[Path]) -> str:
    """sha256 over the files' bytes, in the given order (kernel file first, then launchers)."""
    digest = hashlib.sha256()
    for path in dict.fromkeys(Path(p) for p in paths):
        digest.update(path.read_bytes())
    return digest.hexdigest()
