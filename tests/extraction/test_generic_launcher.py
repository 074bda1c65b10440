"""The generic launcher on the pinned flashinfer / sglang sources: host entries found and mapped by libclang,
the same calls as the per-(source, op) templates, extraction through it compiles with plain nvcc."""
from __future__ import annotations

import json
import re

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.extraction import clang_env, emit, launcher, pipeline, sources
from astra_sglang.specs.registry import get_spec

FLASHINFER_OPS = ("rmsnorm", "fused_add_rmsnorm")
# The per-op templates name these through locals; the generic launcher reads them from the ABI directly.
LOCALS = {"rows": "input.shape[0]", "d": "input.shape[1]", "eps": "static_cast<float>(scalars[0])"}


@pytest.fixture(scope="module")
def parsed(site_dir):
    out = {}
    for kind, op in [("flashinfer", o) for o in FLASHINFER_OPS] + [("sglang", "silu_and_mul")]:
        root = sources.locate([kind], str(site_dir / kind))
        loc = get_spec(op).sources[kind]
        out[(kind, op)] = (root, pipeline.parse_source((root.root / loc.path).resolve(), root, clang_env.make_env(root)))
    return out


def call_args(text: str, entry: str, ctype: str) -> list[str]:
    """The arguments of the first call of `entry` for element type `ctype`, whitespace-free, split at
    top-level commas."""
    text = text.replace("T_", ctype)
    start = text.index(f"{entry}<{ctype}>(") + len(f"{entry}<{ctype}>(")
    depth, args, cur = 1, [], ""
    for ch in text[start:]:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            break
        if ch == "," and depth == 1:
            args.append(cur)
            cur = ""
        else:
            cur += ch
    return [re.sub(r"\s+", "", a) for a in args + [cur]]


@pytest.mark.parametrize("op", FLASHINFER_OPS)
@pytest.mark.parametrize(("dtype", "ctype"), [("float32", "float"), ("float16", "half"), ("bfloat16", "nv_bfloat16")])
def test_generic_calls_the_entry_as_the_template_does(parsed, op, dtype, ctype):
    spec = get_spec(op)
    loc = spec.sources["flashinfer"]
    found = launcher.find_entry(parsed[("flashinfer", op)][1], loc.kernel)  # by the kernel it launches
    assert found.name == loc.host_entry and found.returns_error and found.type_params == ["T"]
    assert launcher.find_entry(parsed[("flashinfer", op)][1], loc.kernel, loc.host_entry) == found
    generic = launcher.render(spec, "flashinfer", launcher.derive(spec, found), emit.ABI_DTYPE)
    template = emit.render_launcher(spec, "flashinfer", loc)
    want = call_args(template, loc.host_entry, ctype)
    for local, expr in LOCALS.items():
        want = [re.sub(rf"(?<![\w.]){local}(?![\w\[])", expr, a) for a in want]
    assert call_args(generic, loc.host_entry, ctype) == want
    assert f"case {emit.ABI_DTYPE[dtype]}:" in generic


def test_unmappable_parameter_is_named(parsed):
    spec = get_spec("rmsnorm")
    found = launcher.find_entry(parsed[("flashinfer", "rmsnorm")][1], "RMSNormKernel")
    renamed = spec.model_copy(update={"arguments": [a.model_copy(update={"name": "x"}) if a.name == "input" else a
                                                    for a in spec.arguments]})
    with pytest.raises(AstraError, match=r"parameter input \(T \*\) maps to no spec argument"):
        launcher.derive(renamed, found)


def test_tvm_bound_entry_declines(parsed):
    """SGLang JIT's entries take tvm-ffi tensors and template flags: the per-op template stays in use."""
    spec = get_spec("silu_and_mul")
    p = parsed[("sglang", "silu_and_mul")][1]
    with pytest.raises(AstraError, match="no host entry launches act_and_mul_kernel"):
        launcher.find_entry(p, "act_and_mul_kernel")
    with pytest.raises(AstraError, match="non-type template parameters"):
        launcher.derive(spec, launcher.find_entry(p, "act_and_mul_kernel", "ActivationKernel::launch"))


@pytest.fixture(scope="module")
def generic_extractions(site_dir, tmp_path_factory):
    """Extraction with the per-op templates out of the way: the generic launcher is derived instead."""
    mp = pytest.MonkeyPatch()
    mp.setattr(emit, "launcher_template", lambda kind, op: tmp_path_factory.mktemp("none") / "missing.cu.j2")
    try:
        return {op: pipeline.extract(op, str(site_dir / "flashinfer"), tmp_path_factory.mktemp(op))
                for op in FLASHINFER_OPS}
    finally:
        mp.undo()


@pytest.mark.parametrize("op", FLASHINFER_OPS)
def test_extraction_uses_generic_launcher(generic_extractions, op):
    result = generic_extractions[op]
    text = result.kernel_cu.read_text()
    assert "Generic launcher: calls the source's host entry flashinfer::norm::" in text
    prov = json.loads((result.out_dir / "provenance.json").read_text())
    assert prov["launcher_template"].startswith("generic_host_entry.cu.j2 (host entry flashinfer::norm::")
    assert prov["line_map"] and all(len(row) == 4 for row in prov["line_map"])


@pytest.mark.nvcc
@pytest.mark.parametrize("op", FLASHINFER_OPS)
def test_generic_extraction_compiles(generic_extractions, op, compile_cu):
    assert compile_cu(generic_extractions[op].kernel_cu, std="c++17").is_file()
