"""Triton compiles ahead of the GPU, on every CPU core, into Triton's on-disk cache.

The screening worker records what its launch of each config would compile, without compiling or launching:
Triton's `knobs.runtime.jit_cache_hook` is called on every in-memory cache miss with the specialization data of
the launch (signature, constexprs, the pointer-alignment and integer attributes of the actual arguments,
options); returning True skips that compile and launch (`record`). A process pool compiles each recorded
specialization with Triton's own `JITFunction.preload` (the public way to compile from specialization data),
under a stand-in driver that names the worker's GPU target: no CUDA context, no GPU. `triton.compile` keys its
cache by the source's hash, the backend (ptxas version, arch), the options and the cache-invalidating
environment, all equal on both sides, so the worker's first launch of the config finds the cubin and only
loads it. `HitCounter` counts, through `knobs.compilation.listener`, which compiles in the worker found the
cache (the hit rate the benchmark reports).

The compile processes see no GPU (CUDA_VISIBLE_DEVICES=""), and the stand-in driver is active only around
`preload`, never while the kernel's module is imported: code that probes the device at import time believes
Triton's active driver (SGLang's FLA utils, imported with SGLang's kernels, ask it for the backend and, told
"cuda", call `torch.cuda.get_device_name(0)`: "No CUDA GPUs are available" where libcuda is present but no device
is visible). Imported as the host is (no visible device: the probes fall back as on a CPU host), the module
defines the same kernel source; the worker's hit rate checks it. A module that cannot be imported at all is not
the config's fault: its jobs come back `ahead=False` and the worker compiles those kernels itself (slower, never
wrong), the import error and where it was raised kept as the reason.

Integer arguments specialize on their value (== 1, divisible by 16): fused MoE's padded row count and token
count change with the batch size, so one config compiles again at some batch sizes; recording per batch size
catches those, and identical specializations are compiled once (compile_pool.CompilePool dedupes by digest).
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from astra_sglang.errors import describe
from astra_sglang.triton.screen_records import CompileJob, CompileOutcome

SIMULATED_DIR = "astra-simulated"
"""Where simulated compiles leave their marker inside the cache dir (screen_simulate.py reads it)."""


class StubDriver:
    """Triton's active driver as far as `JITFunction.preload` needs one: device 0 of a named target."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        return self.target


def _kernel(job: CompileJob):
    """The JITFunction a job names: its module imported by name, else loaded from its file under that name."""
    module = sys.modules.get(job.module)
    if module is None:
        try:
            module = importlib.import_module(job.module)
        except ImportError:
            if not job.path:
                raise
            spec = importlib.util.spec_from_file_location(job.module, job.path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[job.module] = module
            spec.loader.exec_module(module)
    fn = module
    for part in job.qualname.split("."):
        fn = getattr(fn, part)
    return fn


_UNIMPORTABLE: dict[str, str] = {}
"""module -> why this compile process could not import it (tried once, not once per job)."""


def _located(exc: BaseException) -> str:
    """`describe(exc)` and the innermost frame it was raised in (file:line), so that a failure says where."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" (at {Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno})" if tb is not None else ""
    return describe(exc)[:300 - len(where)] + where


@contextmanager
def stand_in(target: tuple[str, int, int]):
    """Triton's active driver replaced by a `StubDriver` of `target` while within; the previous one (often none
    yet) put back after."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    previous = driver._active
    driver.set_active(StubDriver(GPUTarget(*target)))
    try:
        yield
    finally:
        driver._active = previous


def compile_job(job: CompileJob) -> CompileOutcome:
    """Compile one specialization into the cache (runs in a compile process)."""
    start = time.perf_counter()
    if job.kind == "simulated":
        spec = json.loads(job.data)
        marker = Path(os.environ["TRITON_CACHE_DIR"]) / SIMULATED_DIR / job.digest()
        if marker.exists():
            return CompileOutcome(ok=True, cached=True)
        time.sleep(spec.get("seconds", 0.0))
        if spec.get("fail"):
            return CompileOutcome(ok=False, seconds=time.perf_counter() - start, reason=spec["fail"])
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(job.data)
        return CompileOutcome(ok=True, seconds=time.perf_counter() - start)
    if job.module in _UNIMPORTABLE:
        return CompileOutcome(ok=False, ahead=False, reason=_UNIMPORTABLE[job.module])
    try:
        kernel = _kernel(job)  # before the stand-in driver: see the module's docstring
    except Exception as exc:  # noqa: BLE001 - the host's fault, not the config's: the worker compiles it
        _UNIMPORTABLE[job.module] = f"compile process cannot import {job.module}: {_located(exc)}"[:300]
        return CompileOutcome(ok=False, ahead=False, seconds=time.perf_counter() - start,
                              reason=_UNIMPORTABLE[job.module])
    counter = HitCounter()
    try:
        with stand_in(job.target), counter:
            kernel.preload(job.data)
    except Exception as exc:  # noqa: BLE001 - a config Triton cannot compile fails alone
        return CompileOutcome(ok=False, seconds=time.perf_counter() - start, reason=_located(exc))
    return CompileOutcome(ok=True, seconds=time.perf_counter() - start, cached=counter.hits > 0)


class HitCounter:
    """Counts Triton compiles that found the on-disk cache (hits) and those that ran (misses), while active."""

    def __init__(self):
        self.hits = self.misses = 0
        self._previous = None

    def _listen(self, *, cache_hit: bool, **_) -> None:
        if cache_hit:
            self.hits += 1
        else:
            self.misses += 1

    def __enter__(self) -> "HitCounter":
        import triton

        self._previous = triton.knobs.compilation.listener
        triton.knobs.compilation.listener = self._listen
        return self

    def __exit__(self, *exc) -> None:
        import triton

        triton.knobs.compilation.listener = self._previous


@contextmanager
def record(jobs: list[CompileJob]):
    """Within: every Triton launch whose kernel is not in memory yet is recorded into `jobs` and skipped (not
    compiled, not launched). What the launches compute meanwhile is garbage: callers only record."""
    import triton
    from triton.runtime.driver import driver

    target = driver.active.get_current_target()
    where = (target.backend, int(target.arch), int(target.warp_size))

    def hook(*, fn, compile, **_) -> bool:
        module = sys.modules.get(fn.module)
        jobs.append(CompileJob(module=fn.module, path=getattr(module, "__file__", "") or "", qualname=fn.name,
                               data=compile["specialization_data"], target=where))
        return True

    previous = triton.knobs.runtime.jit_cache_hook
    triton.knobs.runtime.jit_cache_hook = hook
    try:
        yield jobs
    finally:
        triton.knobs.runtime.jit_cache_hook = previous
