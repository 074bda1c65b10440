"""Host-heavy sources: SGLang JIT's per-token-group FP8 quant kernel (tvm-ffi host code inside the structs the
kernel uses), `#if` balance of cut units, and nvcc errors mapped back to the original files."""
from __future__ import annotations

import json

import pytest

from astra_sglang.extraction import clang_env, emit, hostcode, pipeline, sources
from astra_sglang.harness import linemap
from astra_sglang.harness.build import build_library

FP8 = "kernels/jit/csrc/gemm/per_token_group_quant.cuh"
FP8_KERNEL = "per_token_group_quant_flat_kernel"
# What the kernel is launched with in SGLang (bf16 in, fp8 out, groups of 128, fp32 row-major scales).
INSTANTIATE = ("namespace {{ template __global__ void {k}<QuantTrait<{t}, fp8_e4m3_t, {g}, false, true, true, false>, false>"
               "(const __grid_constant__ QuantKernelParams); }}\n")


@pytest.fixture(scope="module")
def fp8(site_dir):
    root = sources.locate(["sglang"], str(site_dir / "sglang"))
    env = clang_env.make_env(root)
    parsed, closure = pipeline.take_closure((root.root / FP8).resolve(), root, env, FP8_KERNEL, "", ["QuantTrait"])
    texts = {p: ft.text for p, ft in parsed.texts.items()}
    return root, closure, texts


def write_unit(folder, root, closure, texts, tail: str):
    """kernel.cu + provenance.json (its line map) as `extract` writes them, with `tail` as the launcher."""
    folder.mkdir(parents=True, exist_ok=True)
    head = [f"#define {n} {v}" for n, v in emit.baked_defines(root)] + ['#include "astra_abi.h"']
    head += [f"#include <{inc}>" for inc in closure.includes]
    prefix = "\n".join(head) + "\n\n"
    pieces = emit.closure_pieces(closure, texts)
    (folder / "kernel.cu").write_text(prefix + "".join(t for t, _, _ in pieces) + tail)
    lines = emit.line_map(pieces, prefix.count("\n") + 1, root)
    (folder / "provenance.json").write_text(json.dumps({"line_map": lines}))
    return folder / "kernel.cu"


def test_fp8_closure_leaves_host_library_out(fp8):
    root, closure, texts = fp8
    text = emit.render_closure(closure, texts)
    assert len(closure.units) < 120 and text.count("\n") < 1500  # was 10,758 lines with tvm-ffi and dlpack
    for host in ("tvm::ffi", "DLDevice", 'extern "C"', "CHECK_HOST", "TensorMatcher"):
        assert host not in text, host
    assert [name for *_, name in closure.dropped] == ["check_overflow"]
    assert "host-only check_overflow() cut out" in text
    assert "void fill_unaligned(" in text and "struct QuantKernelParams" in text  # device members stay


@pytest.mark.nvcc
@pytest.mark.parametrize(("dtype", "group"), [("bf16_t", 128), ("fp16_t", 64), ("bf16_t", 32)])
def test_fp8_unit_compiles(fp8, tmp_path, dtype, group):
    root, closure, texts = fp8
    tail = INSTANTIATE.format(k=FP8_KERNEL, t=dtype, g=group) + "ASTRA_ENTRY { return ASTRA_UNSUPPORTED; }\n"
    info = build_library(write_unit(tmp_path / "fp8", root, closure, texts, tail))
    assert info.ok, info.log


@pytest.mark.nvcc
def test_failed_build_names_the_original_file(fp8, tmp_path):
    root, closure, texts = fp8
    source = write_unit(tmp_path / "bad", root, closure, texts, "ASTRA_ENTRY { return ASTRA_UNSUPPORTED; }\n")
    lines = source.read_text().split("\n")
    at = next(i for i, ln in enumerate(lines) if "struct QuantKernelParams {" in ln)
    lines[at + 1] = "  not_a_type input;"  # one line replaced: the map still holds
    source.write_text("\n".join(lines))
    info = build_library(source)
    assert not info.ok
    head = info.log.splitlines()[:2]
    assert head[0] == "errors in extracted code, by original file:"
    orig = next(n for n, ln in enumerate(texts[(root.root / FP8).resolve()].split("\n"), 1)
                if "details::TensorArgs input;" in ln)
    assert head[1].strip().startswith(f"{FP8}:{orig} (kernel.cu:{at + 2}): ")
    assert "not_a_type" in head[1]
    with pytest.raises(Exception, match=rf"does not compile: {FP8}:{orig} "):
        pipeline.compile_check(source)


@pytest.mark.parametrize(("text", "want"), [
    ('extern "C" {\n#endif\nint f();\n#ifdef __cplusplus\n}', 'extern "C" {\nint f();\n#ifdef __cplusplus\n}\n#endif'),
    ("struct A {\n#if X\n  int a;\n#else\n  long a;\n#endif\n};", "struct A {\n#if X\n  int a;\n#else\n  long a;\n#endif\n};"),
    ("int a;\n#else\nint b;\n#if Y\nint c;\n#endif\n#endif\nint d;", "int a;\nint d;"),
    ("#if A\n#if B\nint x;", "#if A\n#if B\nint x;\n#endif" + "  // closed by astra-sglang: the #if opened inside this declaration\n#endif"),
])
def test_balance_conditionals(text, want):
    got = hostcode.balance_conditionals(text)
    assert got.replace("  // closed by astra-sglang: the #if opened inside this declaration", "") == \
        want.replace("  // closed by astra-sglang: the #if opened inside this declaration", "")


@pytest.mark.parametrize(("log", "want"), [
    ("kernel.cu(12): error: identifier \"x\" is undefined", ["a/b.cuh:21 (kernel.cu:12): identifier \"x\" is undefined"]),
    ("kernel.cu:14:3: error: expected ';'", ["c.h:7 (kernel.cu:14): expected ';'"]),
    ("kernel.cu(3): error: in the header", []),  # generated lines map nowhere
    ("kernel.cu(40): warning #177-D: unused", []),
])
def test_linemap_explain(log, want):
    mapping = [[10, 5, "a/b.cuh", 19], [14, 3, "c.h", 7]]
    assert linemap.explain(log, mapping) == want
