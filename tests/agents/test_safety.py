import re
from pathlib import Path

import pytest

from astra_sglang.harness.safety import UnsafeCode, check_source, ensure_safe
from astra_sglang.paths import kernels_dir, patches_dir

UNSAFE = sorted((Path(__file__).parent / "fixtures" / "unsafe").glob("*.cu"))
ROOT = Path(__file__).parents[1]
SAFE = (sorted(kernels_dir().glob("*.cu")) + sorted((ROOT / "fixtures" / "honest").glob("*.cu"))
        + sorted(patches_dir().glob("*/kernel.cu")))  # shipped kernels: an LLM run may start from one


@pytest.mark.parametrize("path", UNSAFE, ids=lambda p: p.stem)
def test_unsafe_fixture_rejected_for_its_reason(path):
    source = path.read_text()
    expect = re.search(r"^// expect: (.+)$", source, re.M).group(1)
    reasons = check_source(source)
    assert any(expect in r for r in reasons), reasons
    with pytest.raises(UnsafeCode, match="rejected before building"):
        ensure_safe(source)


def test_enough_unsafe_fixtures():
    assert len(UNSAFE) >= 20


@pytest.mark.parametrize("path", SAFE, ids=lambda p: p.stem)
def test_real_kernels_pass(path):
    assert check_source(path.read_text()) == []


HEAD = '#include <cuda_fp16.h>\n#include <cub/block/block_reduce.cuh>\n#include "astra_abi.h"\n'


def test_allowed_constructs():
    src = HEAD + r'''
namespace {
int grid_for(int64_t rows) { return rows < 65535 ? (int)rows : 65535; }  // anonymous namespace: internal
}
__device__ __forceinline__ float4 ld(const float4* p) {
  float4 v;
  asm volatile("ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
template <int N> __global__ void k(float* out) {
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = 0.f;
}
static inline int threads_for(int64_t d) { return d >= 1024 ? 1024 : 256; }
ASTRA_ENTRY {
  cudaFuncSetAttribute(k<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
  k<4><<<grid_for(tensors[0].shape[0]), threads_for(4), 0, stream>>>((float*)tensors[0].data);
  return (int)cudaGetLastError();
}
'''
    assert check_source(src) == []


def test_comments_and_strings_do_not_trigger():
    src = HEAD + '// we never call fopen or system() here\n/* getenv */\n' \
        'static const char* kName = "popen";\nASTRA_ENTRY { (void)kName; return 0; }\n'
    assert check_source(src) == []


def test_line_continuation_cannot_hide_a_name():
    src = HEAD + 'ASTRA_ENTRY { sys\\\ntem("id"); return 0; }\n'
    assert any("system" in r for r in check_source(src))


def test_two_entries_and_null_stream():
    src = HEAD + '__global__ void k() {}\nASTRA_ENTRY { k<<<1, 1, 0, nullptr>>>(); return 0; }\nASTRA_ENTRY { return 0; }\n'
    reasons = check_source(src)
    assert any("exactly once" in r for r in reasons) and any("4th argument" in r for r in reasons)


def test_aliasing_a_call_name_is_caught():
    for body in ('#define S system\nASTRA_ENTRY { S("id"); return 0; }\n',
                 'ASTRA_ENTRY { auto f = &system; f("id"); return 0; }\n'):
        assert any("system names a process" in r for r in check_source(HEAD + body)), body

