"""What `optimize` checks before anything is built, so a bad input or a machine that cannot time is one line in
the first second, not after a minute of builds: every op's shapes, the baseline, the GPU list or Ray address,
and that some GPU will check and time the candidates.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.errors import AstraError

GPU_ID = re.compile(r"^(\d+|GPU-[0-9A-Fa-f-]+|MIG-[\w/-]+)$")
"""What CUDA_VISIBLE_DEVICES takes: an index or a GPU / MIG UUID."""
RAY_ADDRESS = re.compile(r"^(auto|local|ray://[\w.-]+(:\d+)?|[\w.-]+:\d+)$")


@dataclass(frozen=True)
class Preflight:
    """The command line's say on what the run needs."""

    ops: list[str]
    shapes: str
    baseline: str | None
    gpus: str | None
    ray: str | None
    llm: bool
    compile_only: bool
    out: str | None = None


def check_gpus(text: str | None, none_ok: bool = True) -> None:
    """AstraError where a --gpus list names something CUDA_VISIBLE_DEVICES would not take (or, without
    `none_ok`, says none)."""
    if text is None or (none_ok and text.strip().lower() in ("", "none")):
        return
    bad = [g for g in (g.strip() for g in text.split(",")) if not GPU_ID.match(g)]
    if bad:
        raise AstraError(f"--gpus {text}: {bad[0]!r} is no GPU; give indices such as 0,1 (or GPU UUIDs)"
                         + (", or none" if none_ok else ""))


def check_ray(address: str | None) -> None:
    if address is None:
        return
    if not RAY_ADDRESS.match(address):
        raise AstraError(f"--ray {address}: give auto (the cluster this machine belongs to), local, "
                         "ray://HEAD:10001 or HEAD:6379")
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise AstraError(f"--ray {address}: ray is not installed here (pip install -e '.[ray]')")


def check_inputs(run: Preflight) -> None:
    """Shapes, GPU list and Ray address: whatever evaluates the candidates."""
    from astra_sglang.specs.registry import get_spec, resolve_shapes

    from astra_sglang.paths import writable_folder

    check_gpus(run.gpus)
    check_ray(run.ray)
    if run.out:
        writable_folder(Path(run.out), "--out")
    for op in run.ops:
        resolve_shapes(get_spec(op), run.shapes)


def check_harness(run: Preflight) -> None:
    """What the harness's own evaluator needs: a baseline that exists, and a GPU to check and time on (a Ray
    cluster brings its own; --compile-only asks the agents for builds only)."""
    from astra_sglang.optimize.pool.devices import probe, visible_gpus

    if run.baseline and run.baseline.startswith("py:"):
        from astra_sglang.baselines.resolve import resolve_python

        resolve_python(run.baseline, "--baseline")
    elif run.baseline and not Path(run.baseline).is_file():
        raise AstraError(f"--baseline {run.baseline}: no such file (a kernel .cu, or py:MODULE:FUNCTION)")
    if run.ray or visible_gpus(run.gpus) or (run.llm and run.compile_only):
        return
    # No GPU listed (or --gpus none): the evaluations still run in a child that sees what torch sees here
    if probe().name:  # torch in a short-lived child: this process holds no CUDA context
        return
    said = "--gpus none, and torch sees no CUDA device" if run.gpus is not None else "torch sees no CUDA device"
    whose = "the agents'" if run.llm else "the tuner's"
    raise AstraError(f"no CUDA GPU to evaluate on ({said}): {whose} candidates are checked and timed on one; run "
                     "where one is, or give --ray workers that have one"
                     + (", or --compile-only to build the candidates only" if run.llm else ""))
