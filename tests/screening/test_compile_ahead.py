"""Compiling ahead with real Triton on CPU (no GPU, no CUDA context: the compile processes and this test run under
a stand-in driver naming an sm_90 target; ptxas ships with Triton): the specializations a launch records are
compiled by the pool into the shared cache, once each, and the launch path then finds every one of them (the
key the worker looks up is the key compiled)."""
from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

import probing_kernel  # noqa: E402 - imported as the host is (no stand-in driver yet), like the compile processes

from astra_sglang.optimize.tuner.compile_ahead import HitCounter, StubDriver, record, stand_in  # noqa: E402
from astra_sglang.optimize.tuner.compile_pool import CompilePool  # noqa: E402


@pytest.fixture
def hopper(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset; 3.6 fuses by default
    previous = driver._active
    driver.set_active(StubDriver(GPUTarget("cuda", 90, 32)))
    yield tmp_path / "cache"
    driver._active = previous


def _load(path, source: str):
    """A kernel module written to `path` and imported under its file name (not importable by name elsewhere)."""
    import importlib.util
    import sys

    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _launch(kernel, n: int, block: int, stride: int = 1):
    x, y = torch.empty(1024, dtype=torch.bfloat16), torch.empty(1024, dtype=torch.bfloat16)
    kernel[(1,)](x, y, n, stride, BLOCK=block, SCALE=2.0, num_warps=4, num_stages=2)


def _warm(kernel, n: int, block: int, stride: int = 1):
    """The launch path up to the kernel lookup (what a first launch does before it runs the kernel)."""
    x, y = torch.empty(1024, dtype=torch.bfloat16), torch.empty(1024, dtype=torch.bfloat16)
    kernel.warmup(x, y, n, stride, BLOCK=block, SCALE=2.0, num_warps=4, num_stages=2, grid=(1,))


def test_recorded_specializations_are_compiled_once_and_found(hopper):
    from scale_kernel import scale_kernel

    jobs = []
    with record(jobs):
        for n, block in ((100, 64), (96, 64), (97, 64), (100, 128), (96, 64)):
            _launch(scale_kernel, n, block)
    assert len(jobs) == 5 and jobs[0].target == ("cuda", 90, 32)
    assert not scale_kernel.device_caches[0][0]  # recording compiled nothing
    # n=100 and n=97 specialize alike (not divisible by 16), n=96 does not; the repeated launch is the same job
    assert len({j.digest() for j in jobs}) == 3
    with CompilePool(2, hopper) as pool:
        outcomes = [pool.submit(j).result() for j in jobs]
        assert pool.jobs == 3
    assert all(o.ok for o in outcomes), outcomes
    scale_kernel.device_caches.clear()
    with HitCounter() as counter:
        for n, block in ((100, 64), (96, 64), (100, 128)):
            _warm(scale_kernel, n, block)
    assert (counter.hits, counter.misses) == (3, 0)
    with HitCounter() as counter:
        _warm(scale_kernel, 100, 64, stride=2)  # stride 1 was a constant: another specialization, not compiled
    assert (counter.hits, counter.misses) == (0, 1)


def test_a_kernel_that_does_not_compile_fails_its_job(hopper, tmp_path):
    bad = tmp_path / "broken_kernel.py"
    module = _load(bad, "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                        "def broken(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), undefined_name)\n")
    jobs = []
    with record(jobs):
        module.broken[(1,)](torch.empty(64), BLOCK=64)
    assert jobs[0].path == str(bad)  # the compile process loads it from its file
    with CompilePool(1, hopper) as pool:
        outcome = pool.submit(jobs[0]).result()
    assert not outcome.ok and "undefined_name" in outcome.reason


def test_a_module_that_probes_the_device_on_import_compiles_ahead(hopper):
    """The compile processes see no GPU; the kernel's module, imported there, asks Triton's driver which backend
    it runs on and then torch for the device (SGLang's FLA utils). Imported under the stand-in driver it raised
    ("No CUDA GPUs are available" on the GPU host) and every config failed at "compile": the module is imported
    before the stand-in is active, as the host is, and compiles; the launch then finds the cubin."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("probing_again", probing_kernel.__file__)
    with stand_in(("cuda", 90, 32)), pytest.raises((RuntimeError, AssertionError)):  # the order that failed
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    jobs = []
    with record(jobs):
        x = torch.empty(256, dtype=torch.float32)
        probing_kernel.probed_kernel[(1,)](x, x, 200, BLOCK=256)
    with CompilePool(1, hopper) as pool:
        outcome = pool.submit(jobs[0]).result()
    assert outcome.ok and outcome.ahead, outcome.reason
    probing_kernel.probed_kernel.device_caches.clear()
    with HitCounter() as counter:
        probing_kernel.probed_kernel.warmup(x, x, 200, BLOCK=256, grid=(1,))
    assert (counter.hits, counter.misses) == (1, 0)


def test_a_module_the_compile_process_cannot_import_is_left_to_the_worker(hopper, tmp_path):
    """An import error in the compile process is the host's, not the config's: the job says so once per module
    (`ahead=False`, where it was raised) and the screening worker compiles the kernel itself."""
    module = _load(tmp_path / "unimportable_kernel.py",
                   "import triton\nimport triton.language as tl\nimport os\n\n"
                   "if os.environ.get('CUDA_VISIBLE_DEVICES') == '':\n"
                   "    raise RuntimeError('No CUDA GPUs are available')\n\n\n@triton.jit\n"
                   "def k(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n")
    jobs = []
    with record(jobs):
        for block in (64, 128):
            module.k[(1,)](torch.empty(128), BLOCK=block)
    with CompilePool(1, hopper) as pool:
        outcomes = [pool.submit(j).result() for j in jobs]
    assert all(not o.ok and not o.ahead for o in outcomes)
    assert all("No CUDA GPUs are available (at unimportable_kernel.py:6)" in o.reason for o in outcomes), outcomes
