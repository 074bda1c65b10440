"""The C ABI (harness_templates/astra_abi.h) from Python: load a kernel library and launch it on torch tensors.

The same shared library serves the harness and the live SGLang patch, so this module stays free of
harness logic and keeps the per-call path short (descriptors are filled in place, no allocation).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from astra_sglang.specs.dtypes import ABI_CODES

MAX_DIMS = 4
ASTRA_OK = 0
ASTRA_UNSUPPORTED = -1
ASTRA_REPLACED = -2
"""The harness's own code for a Python callable that replaced a tensor's storage or class instead of writing
into it (gpu_eval.python_op); never returned by a kernel library."""
DTYPE_CODES = {getattr(torch, name): code for name, code in ABI_CODES.items()}
"""torch dtype -> AstraDType code of harness_templates/astra_abi.h."""


class AstraTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("stride", ctypes.c_int64 * MAX_DIMS),
    ]


class KernelLibrary:
    """A loaded kernel .so exposing `astra_launch`."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lib = ctypes.CDLL(self.path)
        try:
            self._fn = self._lib.astra_launch
        except AttributeError:
            raise RuntimeError(f"{self.path} does not export astra_launch") from None
        # No argtypes: ctypes' per-call conversion checks cost ~0.5 us; Launcher passes ctypes objects.
        self._fn.restype = ctypes.c_int
        self.address = ctypes.cast(self._fn, ctypes.c_void_p).value
        """astra_launch's address, for the C++ fast path of patched ops (patching/fastcall.cpp)."""


class Launcher:
    """Calls one library with a fixed number of tensor and scalar arguments.

    Per-call cost matters (SGLang's own ops cost 5-10 us a call): descriptors are rebuilt only when a
    tensor's (shape, strides, dtype) changes; otherwise only data pointers are written. Filling every
    field each call cost ~9 us on a 2-core CI-class CPU; this path ~3-3.5 us (benchmarks/launcher_overhead.py).
    """

    def __init__(self, library: KernelLibrary, num_tensors: int, num_scalars: int):
        self.library = library
        self._tensors = (AstraTensor * max(num_tensors, 1))()
        self._scalars = (ctypes.c_double * max(num_scalars, 1))()
        self._nt, self._ns = ctypes.c_int(num_tensors), ctypes.c_int(num_scalars)
        self._last_scalars: tuple = ()
        self._streams: dict[int, ctypes.c_void_p] = {}
        self._key: tuple | None = None
        self._fn = library._fn

    @property
    def address(self) -> int:
        """astra_launch's address (the C++ fast path calls it directly)."""
        return self.library.address

    def _describe(self, index: int, t: torch.Tensor) -> bool:
        code = DTYPE_CODES.get(t.dtype)
        if t.dim() > MAX_DIMS or code is None:
            return False
        slot = self._tensors[index]
        slot.dtype, slot.ndim = code, t.dim()
        for i, (n, s) in enumerate(zip(t.shape, t.stride())):
            slot.shape[i], slot.stride[i] = n, s
        return True

    def __call__(self, tensors: list[torch.Tensor] | tuple, scalars: list[float] | tuple = (),
                 stream: int | None = None) -> int:
        """Launch; returns the ABI code (0 ok, -1 unsupported, >0 a cudaError_t)."""
        return self.launch_keyed(tuple([(t.shape, t.stride(), t.dtype) for t in tensors]), tensors, scalars, stream)

    def launch_keyed(self, key: tuple, tensors: list[torch.Tensor] | tuple, scalars: list[float] | tuple = (),
                     stream: int | None = None) -> int:
        """`key` = tuple of every tensor's (shape, stride(), dtype), which a PatchedOp computed anyway for its
        coverage verdict: the descriptors are rebuilt only when it changes (~1 us saved a call)."""
        slots = self._tensors
        if key != self._key:
            self._key = None
            for i, t in enumerate(tensors):
                if not self._describe(i, t):
                    return ASTRA_UNSUPPORTED
            self._key = key
        for i, t in enumerate(tensors):
            slots[i].data = t.data_ptr()
        return self._launch(tensors, scalars, stream)

    def _launch(self, tensors, scalars, stream: int | None) -> int:
        scalars = tuple(scalars)  # a list never equals the cached tuple: compare like with like
        if scalars != self._last_scalars:
            for i, value in enumerate(scalars):
                self._scalars[i] = value
            self._last_scalars = scalars
        if stream is None:  # host tensors (CPU stand-in libraries in tests): no stream
            stream = torch._C._cuda_getCurrentRawStream(tensors[0].get_device()) if tensors[0].is_cuda else 0
        handle = self._streams.get(stream)
        if handle is None:  # one c_void_p per stream, not one per call
            if len(self._streams) > 64:
                self._streams.clear()
            handle = self._streams[stream] = ctypes.c_void_p(stream)
        return self._fn(self._tensors, self._nt, self._scalars, self._ns, handle)

