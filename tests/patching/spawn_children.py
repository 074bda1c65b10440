"""Functions run in children started with multiprocessing spawn (fresh interpreters, as SGLang's workers)."""
from __future__ import annotations

import os


def standin_launcher(wrong: bool = False):
    """A CPU stand-in for the ctypes launcher: computes silu_and_mul with torch (off by one if `wrong`)."""
    import torch

    def launch(tensors, scalars):
        x, out = tensors
        d = out.shape[-1]
        out.copy_(torch.nn.functional.silu(x[..., :d].float()) * x[..., d:].float() + (1.0 if wrong else 0.0))
        return 0

    return launch


def _use_standin():
    from astra_sglang.patching import runtime

    runtime.set_launcher_factory(lambda entry, store: standin_launcher(), device_type="cpu")


def _call_and_report(mechanism_check):
    import torch

    import astra_fake_kernels
    import astra_fake_layers
    from astra_sglang.patching import runtime

    x = torch.randn(3, 16)
    y = astra_fake_layers.forward(x)
    ref = torch.nn.functional.silu(x[:, :8]) * x[:, 8:]
    rt = runtime.current()
    path = rt.stats.write() if rt else None
    stats = rt.stats.snapshot().model_dump() if rt else None
    return {"pid": os.getpid(), "close": bool(torch.allclose(y, ref, atol=1e-5)), "stats": stats,
            "stats_file": str(path) if path else None, "check": mechanism_check(astra_fake_layers, astra_fake_kernels)}


def import_hook_child():
    """The sitecustomize (PYTHONPATH) installed the finder at interpreter start; importing the target
    module patches it."""
    import sys

    from astra_sglang.patching.hook import AstraFinder

    _use_standin()
    hooked = any(isinstance(f, AstraFinder) for f in sys.meta_path)
    return _call_and_report(lambda layers, kernels: {
        "finder_installed": hooked,
        "layers_patched": hasattr(layers.silu_and_mul, "__astra_op__"),
        "kernels_patched": hasattr(kernels.silu_and_mul, "__astra_op__")})


def plugin_child():
    """What SGLang's scheduler process does first: load_plugins() (entry points of sglang.srt.plugins)."""
    _use_standin()
    from sglang.srt.plugins import load_plugins

    load_plugins()
    return _call_and_report(lambda layers, kernels: {
        "layers_wrapped": getattr(layers.silu_and_mul, "__wrapped__", None) is not None,
        "same_in_kernels": layers.silu_and_mul is kernels.silu_and_mul})
