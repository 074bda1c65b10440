"""A candidate's local quoted includes, inlined before the build (harness/includes.py): what the preprocessor
would read beside the source, with `#line` directives naming where each line came from; and, with nvcc, that a
header beside a candidate builds in the harness's scratch folder, and that changing it rebuilds."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from astra_sglang.harness import includes

FIXTURES = Path(__file__).parent / "fixtures"
ENTRY = '#include "astra_abi.h"\nASTRA_ENTRY { return SCALE > 0 ? 0 : ASTRA_UNSUPPORTED; }\n'


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def _preprocess(path: Path) -> str:
    return subprocess.run(["cpp", "-P", str(path)], capture_output=True, text=True, check=True).stdout


def test_a_source_without_local_includes_is_left_as_it_is(tmp_path: Path):
    text = '#include "astra_abi.h"\n#include <cuda_bf16.h>\n#include "absent.cuh"\nint x;\n'
    _write(tmp_path, {"k.cu": text})
    assert includes.expand(tmp_path / "k.cu") == text


def test_local_includes_are_inlined_with_line_directives(tmp_path: Path):
    _write(tmp_path, {"k.cu": 'int a;\n  #  include "sub/h.cuh" // why\nint b;\n',
                      "sub/h.cuh": '#pragma once\n#include "g.cuh"\nint h;',
                      "sub/g.cuh": "int g;\n"})
    assert includes.expand(tmp_path / "k.cu") == (
        'int a;\n#line 1 "sub/h.cuh"\n\n#line 1 "sub/g.cuh"\nint g;\n#line 3 "sub/h.cuh"\nint h;\n'
        '#line 3 "kernel.cu"\nint b;\n')


def test_pragma_once_and_include_cycles_are_inlined_once(tmp_path: Path):
    _write(tmp_path, {"k.cu": '#include "a.cuh"\n#include "a.cuh"\n#include "b.cuh"\n#include "b.cuh"\n',
                      "a.cuh": "#pragma once\nint a;\n",
                      "b.cuh": '#ifndef B\n#define B\n#include "b.cuh"\nint b;\n#endif\n'})
    text = includes.expand(tmp_path / "k.cu")
    assert text.count("int a;") == 1 and "pragma once" not in text
    assert text.count("int b;") == 2 and "// b.cuh: already included" in text  # its guard keeps one
    if shutil.which("cpp"):  # what the C preprocessor makes of both: the same tokens
        (tmp_path / "out.cu").write_text(text)
        assert _preprocess(tmp_path / "out.cu").split() == _preprocess(tmp_path / "k.cu").split()


def test_a_header_change_changes_the_text_the_cache_keys_on(tmp_path: Path):
    _write(tmp_path, {"k.cu": '#include "h.cuh"\n', "h.cuh": "#define SCALE 1\n"})
    first = includes.expand(tmp_path / "k.cu")
    (tmp_path / "h.cuh").write_text("#define SCALE 2\n")
    assert includes.expand(tmp_path / "k.cu") != first


@pytest.mark.parametrize("fixture", sorted(p.name for p in (FIXTURES / "cheats").glob("*.cu")
                                             if '#include "silu_fixture.cuh"' in p.read_text()))
def test_the_fixtures_sharing_a_header_include_it(fixture):
    """The cheat fixtures that a nvcc run in place built, and the harness's scratch-folder build did not."""
    text = includes.expand(FIXTURES / "cheats" / fixture)
    assert '#line 1 "silu_fixture.cuh"' in text and "silu_mul_at" in text


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_a_header_beside_the_candidate_builds_and_rebuilds_when_it_changes(tmp_path: Path, monkeypatch):
    from astra_sglang.harness.build import build_library

    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    _write(tmp_path, {"k.cu": '#include "scale.cuh"\n' + ENTRY, "scale.cuh": "#define SCALE 1\n"})
    first = build_library(tmp_path / "k.cu", arch="sm_90")
    assert first.ok and not first.cached, first.log
    assert build_library(tmp_path / "k.cu", arch="sm_90").cached
    (tmp_path / "scale.cuh").write_text("#define SCALE 2\n")
    second = build_library(tmp_path / "k.cu", arch="sm_90")
    assert second.ok and not second.cached and second.library != first.library
    # errors name the header's line, and the candidate's own lines as they are in its file
    (tmp_path / "scale.cuh").write_text("#define SCALE 2\nint broken = not_declared_here;\n")
    (tmp_path / "k.cu").write_text('#include "scale.cuh"\n' + ENTRY + "int also_broken = nor_here;\n")
    log = build_library(tmp_path / "k.cu", arch="sm_90").log
    assert "scale.cuh(2)" in log and "kernel.cu(4)" in log, log
