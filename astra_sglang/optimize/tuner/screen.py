"""Build every configuration of a derived kernel alone before the search, and leave out those that fail.

Knobs derived from an extracted original (extraction/knobgen.py) are candidate values nobody vetted: a
vector width the source's traits do not define, a block size a static_assert refuses. One round-1
evaluation builds several configurations into one file, so one bad value would fail the others with it.
Building each one alone first (in parallel, into the build cache) turns a bad value into an invalid
configuration, recorded in tuner.jsonl, and the search goes on with the rest.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

from astra_sglang.errors import AstraError
from astra_sglang.kernels.knobs import DERIVED_MARK, Config


def first_error(log: str) -> str:
    """The compiler's first error line, shortened (a whole nvcc log is no message)."""
    line = next((ln for ln in log.splitlines() if re.search(r"\berror\b", ln)), log.strip()[-200:] or "failed")
    return line.strip()[:200]


def buildable(tuning, space: list[Config]) -> list[Config]:
    """The configurations of `space` whose lone build succeeds (all of them for a hand-written kernel, or
    where no nvcc is here to tell: remote workers then report the failing builds themselves)."""
    if DERIVED_MARK not in tuning.source or shutil.which("nvcc") is None:
        return space
    from astra_sglang.harness.build import build_library

    paths = [tuning.write(f"screen-{j:02d}", {s: config for s in tuning.shapes}, f"build check {config}")
             for j, config in enumerate(space)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        infos = list(pool.map(lambda p: build_library(p, arch=tuning.arch), paths))
    names = [k.name for k in tuning.knobs]
    good = []
    with tuning.log.open("a") as log:
        for config, path, info in zip(space, paths, infos):
            if info.ok:
                good.append(config)
                continue
            error = first_error(info.log)
            log.write(json.dumps({"tag": "build-check", "candidate": path.name, "ok": False, "config": config,
                                  "reason": error}) + "\n")
            tuning.echo(f"  invalid configuration {', '.join(f'{n}={v}' for n, v in zip(names, config))}: "
                        f"does not build ({error})")
    if not good:
        raise AstraError(f"{tuning.spec.name}: no configuration of the derived knobs builds; the first: "
                         f"{first_error(infos[0].log)}")
    return good
