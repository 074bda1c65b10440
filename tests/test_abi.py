"""The ctypes launcher fills descriptors right and refreshes them when a tensor's layout changes.

Its per-call cost is a benchmark, not a test: benchmarks/launcher_overhead.py."""
import ctypes
import shutil
import subprocess

import pytest
import torch

from astra_sglang.harness.abi import AstraTensor, KernelLibrary, Launcher

# A host-only stand-in for a kernel library: records what it was called with.
RECORDER = r"""
#include <stdint.h>
#include <string.h>
typedef struct { void* data; int32_t dtype; int32_t ndim; int64_t shape[4]; int64_t stride[4]; } AstraTensor;
AstraTensor seen[8]; double seen_scalars[4]; int seen_nt, seen_ns; void* seen_stream;
int astra_launch(const AstraTensor* t, int nt, const double* s, int ns, void* stream) {
  memcpy(seen, t, sizeof(AstraTensor) * nt); memcpy(seen_scalars, s, sizeof(double) * ns);
  seen_nt = nt; seen_ns = ns; seen_stream = stream; return 0;
}
"""


@pytest.fixture(scope="module")
def recorder(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.skip("needs gcc")
    folder = tmp_path_factory.mktemp("abi")
    (folder / "rec.c").write_text(RECORDER)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(folder / "rec.so"), str(folder / "rec.c")], check=True)
    return str(folder / "rec.so")


def test_descriptors_scalars_and_stream_reach_the_library(recorder):
    lib = ctypes.CDLL(recorder)
    launcher = Launcher(KernelLibrary(recorder), 2, 1)
    a = torch.empty(3, 8, dtype=torch.bfloat16)
    b = torch.empty(5, 16, dtype=torch.float16)[:, ::2]
    assert launcher([a, b], [1e-5], stream=0xABC) == 0
    seen = (AstraTensor * 8).in_dll(lib, "seen")
    assert seen[0].data == a.data_ptr() and seen[0].dtype == 2 and list(seen[0].shape[:2]) == [3, 8]
    assert seen[1].dtype == 1 and list(seen[1].stride[:2]) == [16, 2]
    assert (ctypes.c_double * 4).in_dll(lib, "seen_scalars")[0] == 1e-5
    assert ctypes.c_void_p.in_dll(lib, "seen_stream").value == 0xABC
    c = torch.empty(7, 8, dtype=torch.float32)  # new layout in slot 0: its descriptor must be rebuilt
    launcher([c, b], [2e-5], stream=1)
    assert list(seen[0].shape[:2]) == [7, 8] and seen[0].dtype == 0 and seen[0].data == c.data_ptr()
    assert (ctypes.c_double * 4).in_dll(lib, "seen_scalars")[0] == 2e-5


def test_unsupported_dtype_is_refused_before_the_call(recorder):
    launcher = Launcher(KernelLibrary(recorder), 1, 0)
    assert launcher([torch.empty(2, dtype=torch.complex64)], stream=0) == -1



def _key(tensors):
    return tuple((t.shape, t.stride(), t.dtype) for t in tensors)


def test_keyed_launch_rebuilds_descriptors_only_when_the_key_changes(recorder):
    lib = ctypes.CDLL(recorder)
    seen = (AstraTensor * 8).in_dll(lib, "seen")
    launcher = Launcher(KernelLibrary(recorder), 2, 1)
    a, b = torch.empty(3, 8, dtype=torch.bfloat16), torch.empty(8, dtype=torch.bfloat16)
    assert launcher.launch_keyed(_key([a, b]), [a, b], [1e-6], stream=7) == 0
    assert list(seen[0].shape[:2]) == [3, 8] and seen[1].ndim == 1
    a2 = torch.empty(3, 8, dtype=torch.bfloat16)  # same layout, new storage: only the pointer moves
    launcher.launch_keyed(_key([a2, b]), [a2, b], [1e-6], stream=7)
    assert seen[0].data == a2.data_ptr() and list(seen[0].shape[:2]) == [3, 8]
    c = torch.empty(5, 16, dtype=torch.float32)[:, ::2]  # new layout: rebuilt, strides included
    launcher.launch_keyed(_key([c, b]), [c, b], [2e-6], stream=8)
    assert list(seen[0].shape[:2]) == [5, 8] and list(seen[0].stride[:2]) == [16, 2] and seen[0].dtype == 0
    assert (ctypes.c_double * 4).in_dll(lib, "seen_scalars")[0] == 2e-6
    assert ctypes.c_void_p.in_dll(lib, "seen_stream").value == 8
    launcher([a, b], [1e-6], stream=7)  # the plain call and the keyed call share the descriptors safely
    launcher.launch_keyed(_key([c, b]), [c, b], [2e-6], stream=8)
    assert list(seen[0].shape[:2]) == [5, 8] and seen[0].dtype == 0


def test_keyed_launch_refuses_an_unsupported_dtype(recorder):
    launcher = Launcher(KernelLibrary(recorder), 1, 0)
    t = torch.empty(2, dtype=torch.complex64)
    assert launcher.launch_keyed(_key([t]), [t], stream=0) == -1
    assert launcher.launch_keyed(_key([t]), [t], stream=0) == -1  # not cached as described


def test_dtype_codes_match_the_header():
    """One table, both sides: every AstraDType enumerator of astra_abi.h has the code specs/dtypes.py gives it."""
    import re

    from astra_sglang.harness.abi import DTYPE_CODES
    from astra_sglang.paths import templates_dir
    from astra_sglang.specs.dtypes import ABI_CODES, ABI_NAMES

    header = (templates_dir() / "astra_abi.h").read_text()
    enum = dict((n, int(v)) for n, v in re.findall(r"(ASTRA_[A-Z0-9_]+) = (\d+)", header.split("enum AstraDType")[1]
                                                     .split("}")[0]))
    assert enum == {ABI_NAMES[name]: code for name, code in ABI_CODES.items()}
    assert {str(t).removeprefix("torch."): c for t, c in DTYPE_CODES.items()} == ABI_CODES


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.int8, torch.float64])
def test_new_dtypes_reach_the_library_with_their_codes(recorder, dtype):
    from astra_sglang.harness.abi import DTYPE_CODES

    lib = ctypes.CDLL(recorder)
    t = torch.zeros(3, 5, dtype=dtype)
    assert Launcher(KernelLibrary(recorder), 1, 0)([t]) == 0
    seen = (AstraTensor * 8).in_dll(lib, "seen")
    assert seen[0].dtype == DTYPE_CODES[dtype] and list(seen[0].shape[:2]) == [3, 5]
