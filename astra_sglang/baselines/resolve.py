"""A `py:MODULE:FUNCTION` side (a baseline or candidate that is a Python op) resolved before anything is built:
the module imports, the attribute is there, it is callable. The import runs in a short-lived child process,
as the evaluation itself does: importing SGLang's ops can load CUDA libraries, which the command's own process
keeps away from (its evaluations and builds run in children).

Run as `python -m astra_sglang.baselines.resolve py:MODULE:FUNCTION`: prints "ok", or one line saying why not.
"""
from __future__ import annotations

import re
import subprocess
import sys

from astra_sglang.errors import AstraError

PY_PATH = re.compile(r"^py:([A-Za-z_][\w.]*):([A-Za-z_]\w*)$")
RESOLVE_TIMEOUT_S = 300
"""SGLang's first import on a cold machine takes tens of seconds."""


def check_form(path: str, option: str) -> tuple[str, str]:
    """(module, function) of `path`; AstraError where it is not py:MODULE:FUNCTION."""
    match = PY_PATH.match(path)
    if not match:
        raise AstraError(f"{option} {path}: write py:MODULE:FUNCTION, e.g. py:sgl_kernel:rmsnorm")
    return match.group(1), match.group(2)


def why_not(module: str, name: str) -> str | None:
    """Here, in this process: why MODULE:NAME is no callable (one line), or None."""
    import importlib
    import importlib.util

    try:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return f"no module named {module.split('.')[0]!r} is installed here"
        imported = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the import raises is the user's to see, in one line
        return f"importing {module} fails: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if not hasattr(imported, name):
        return f"module {module} has no attribute {name!r}"
    value = getattr(imported, name)
    if not callable(value):
        return f"{module}.{name} is a {type(value).__name__}, not a function"
    return None


def resolve_python(path: str, option: str = "--baseline") -> None:
    """AstraError, one line naming the module or the attribute, unless `path` names a callable that imports."""
    module, name = check_form(path, option)
    try:
        proc = subprocess.run([sys.executable, "-m", "astra_sglang.baselines.resolve", path], capture_output=True,
                              text=True, timeout=RESOLVE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AstraError(f"{option} {path}: importing {module} took over {RESOLVE_TIMEOUT_S}s") from None
    said = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and said == ["ok"]:
        return
    detail = said[-1] if said else (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    raise AstraError(f"{option} {path}: {detail}"[:400])


def main(argv: list[str]) -> int:
    from astra_sglang.paths import user_ops_dir

    sys.path.append(str(user_ops_dir()))  # reference modules `onboard` wrote, as the registry adds them
    module, name = PY_PATH.match(argv[0]).groups()
    why = why_not(module, name)
    print(why or "ok", flush=True)
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
