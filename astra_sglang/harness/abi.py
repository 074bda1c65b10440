"""The C ABI (harness_templates/astra_abi.h) from Python: load a kernel library and launch it on torch tensors.

The same shared library serves the harness and the live SGLang patch, so this module stays free of
harness logic and keeps the per-call path short (descriptors are filled in place, no allocation).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

MAX_DIMS = 4
ASTRA_OK = 0
ASTRA_UNSUPPORTED = -1
DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


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
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [ctypes.POINTER(AstraTensor), ctypes.c_int, ctypes.POINTER(ctypes.c_double),
                             ctypes.c_int, ctypes.c_void_p]


class Launcher:
    """Calls one library with a fixed number of tensor and scalar arguments; reuses its descriptor arrays."""

    def __init__(self, library: KernelLibrary, num_tensors: int, num_scalars: int):
        self.library = library
        self._tensors = (AstraTensor * max(num_tensors, 1))()
        self._scalars = (ctypes.c_double * max(num_scalars, 1))()
        self._nt, self._ns = num_tensors, num_scalars

    def __call__(self, tensors: list[torch.Tensor] | tuple, scalars: list[float] | tuple = (),
                 stream: int | None = None) -> int:
        """Launch; returns the ABI code (0 ok, -1 unsupported, >0 a cudaError_t)."""
        for slot, t in zip(self._tensors, tensors):
            if t.dim() > MAX_DIMS or t.dtype not in DTYPE_CODES:
                return ASTRA_UNSUPPORTED
            slot.data = t.data_ptr()
            slot.dtype = DTYPE_CODES[t.dtype]
            slot.ndim = t.dim()
            for i, (n, s) in enumerate(zip(t.shape, t.stride())):
                slot.shape[i] = n
                slot.stride[i] = s
        for i, value in enumerate(scalars):
            self._scalars[i] = value
        if stream is None:
            stream = current_stream(tensors[0].device)
        return self.library._fn(self._tensors, self._nt, self._scalars, self._ns, stream)


def current_stream(device: torch.device) -> int:
    """Raw cudaStream_t of torch's current stream (the cheap accessor; torch.cuda.current_stream is slower)."""
    return torch._C._cuda_getCurrentRawStream(device.index if device.index is not None else torch.cuda.current_device())
