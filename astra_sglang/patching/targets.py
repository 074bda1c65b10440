"""Patch targets: "module:attr" names SGLang calls, resolved live and rebound (checked without an import:
extraction/static_targets.py).

A target is a module global in a calling module (e.g. `sglang.srt.layers.layernorm:rmsnorm`, bound from
sgl_kernel at import). Replacing only the defining module is not enough: `from x import f` copies the
reference, so `rebind` also rewrites every already-imported module global that *is* the original.
"""
from __future__ import annotations

import importlib
import sys
import types

from astra_sglang.errors import AstraError
from astra_sglang.patchset.manifest import Target


def resolve(target: Target) -> object:
    """Import the target's module and return the bound object; AstraError when either is missing."""
    try:
        module = importlib.import_module(target.module)
    except ModuleNotFoundError as exc:
        raise AstraError(f"patch target {target}: cannot import {target.module} ({exc})") from exc
    try:
        return getattr(module, target.attr)
    except AttributeError:
        raise AstraError(f"patch target {target}: {target.module} has no {target.attr!r} "
                         f"(installed version not covered, or not a CUDA build)") from None


def rebind(target: Target, original: object, replacement: object) -> list[str]:
    """Set `target` to `replacement`, and every other imported module global that is `original` too.

    Returns the "module:attr" names rewritten (the target first). Modules imported later that copy the
    name from one of these modules get the replacement.
    """
    module = sys.modules[target.module]
    setattr(module, target.attr, replacement)
    done = [str(target)]
    for name, mod in list(sys.modules.items()):
        if mod is module or not isinstance(mod, types.ModuleType):
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for attr, value in items:
            if value is original:
                try:
                    setattr(mod, attr, replacement)
                    done.append(f"{name}:{attr}")
                except (AttributeError, TypeError):
                    pass
    return done
