"""The closure on fixture CUDA written for these tests: every construct, nothing unused, identical PTX."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.extraction import clang_env, emit, pipeline
from astra_sglang.extraction.records import SourceRoot

TAIL = """
template __global__ void fixture_kernel<float>(const float*, float*, fx::index_t);
template __global__ void fixture_kernel<double>(const double*, float*, fx::index_t);
"""


@pytest.fixture(scope="module")
def constructs(fixtures_dir):
    folder = (fixtures_dir / "constructs").resolve()
    root = SourceRoot("fixture", folder, str(folder), include_dirs=(folder,))
    env = clang_env.make_env(root)
    start = time.perf_counter()
    parsed, closure = pipeline.take_closure(folder / "kernels.cu", root, env, "fixture_kernel")
    seconds = time.perf_counter() - start
    text = emit.render_closure(closure, {p: f.text for p, f in parsed.texts.items()})
    return folder, root, env, closure, text, seconds


def _names(closure):
    return {(u.kind, u.name) for u in closure.units}


def test_takes_every_construct(constructs):
    _, _, _, closure, text, seconds = constructs
    names = _names(closure)
    assert seconds < 10
    for macro in ("FX_DEVICE", "FX_SUM_SQ", "FX_SQUARE"):  # FX_SQUARE is used only inside FX_SUM_SQ
        assert ("MACRO_DEFINITION", macro) in names
    assert ("TYPEDEF_DECL", "acc_t") in names and ("TYPE_ALIAS_DECL", "index_t") in names
    assert "__constant__ float kTable[4]" in text and "constexpr int kUnroll = 4;" in text
    assert "template <typename T>\nconstexpr int kWidth" in text  # variable template keeps its template<>
    assert "constexpr int kBlock = 128;" in text  # only named in __launch_bounds__
    assert "inline namespace v1 {" in text and "namespace {\nFX_DEVICE float local_shift" in text
    assert "FX_DEVICE void Accum<T>::add(T v)" in text and "FX_DEVICE acc_t Accum<T>::get() const" in text
    assert "pick(float x)" in text and "pick(double x)" in text  # every overload candidate
    assert "iffed_helper" in text  # referenced only from #if'd-out code: taken by name


def test_takes_explicit_specializations(constructs):
    """Dropping these still compiles but changes the result: the AST alone would miss them."""
    text = constructs[4]
    assert "template <>\nstruct Scale<float> {\n  static constexpr float value = 2.0f;" in text
    assert "template <>\nFX_DEVICE float bias<float>() {\n  return 0.5f;" in text


def test_leaves_out_unused(constructs):
    _, _, _, closure, text, _ = constructs
    assert "FX_UNUSED_MACRO" not in text and "never_used" not in text
    assert closure.includes == ["cmath"]  # <vector> and <cstdint> come from elsewhere or are unused
    assert closure.kernels == ["fixture_kernel"]


def _normalized_ptx(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith("//") or line.lstrip().startswith((".file", ".loc")) or not line.strip():
            continue
        lines.append(re.sub(r"\$L__\w+", "$L", line))
    return "\n".join(lines)


@pytest.mark.nvcc
def test_ptx_matches_original(constructs, tmp_path, compile_cu):
    folder, _, _, _, text, _ = constructs
    original = tmp_path / "original.cu"
    original.write_text((folder / "kernels.cu").read_text() + TAIL)
    extracted = tmp_path / "extracted.cu"
    includes = "".join(f"#include <{h}>\n" for h in constructs[3].includes)
    extracted.write_text("#include <cstdint>\n" + includes + text + TAIL)
    a = compile_cu(original, ptx=True, extra=("-I", str(folder)))
    b = compile_cu(extracted, ptx=True)
    assert _normalized_ptx(a) == _normalized_ptx(b)
    assert "fixture_kernel" in _normalized_ptx(b)


def test_kernel_not_found_lists_kernels(constructs):
    folder, root, env, *_ = constructs
    with pytest.raises(AstraError, match=r"kernel 'fixture_kernel' not found in two_kernels.cu; "
                                         r"__global__ functions there: first_kernel, second_kernel"):
        pipeline.take_closure(folder / "two_kernels.cu", root, env, "fixture_kernel")


def test_parse_error_in_kernel_is_fatal(constructs):
    folder, root, env, *_ = constructs
    with pytest.raises(AstraError, match=r"parse errors in the kernel's code: broken.cu:4:\d+: no member named "
                                         r"'does_not_exist'"):
        pipeline.take_closure(folder / "broken.cu", root, env, "broken_kernel")
