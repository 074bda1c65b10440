"""The gelu and Gemma norm families on CPU: fp64 references against torch's own formulas (odd shapes x dtypes),
their specs, the sibling kernel files they build (variants), SGLang's ops as baselines, and `kernels`."""
from __future__ import annotations

import json
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from reference_self_check import assert_reference_passes_its_own_check

from astra_sglang.baselines import adapters
from astra_sglang.baselines import defaults
from astra_sglang.cli import main
from astra_sglang.kernels.variants import VARIANTS, first_kernel, materialize
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.patchset.store import PatchStore
from astra_sglang.paths import kernels_dir, patches_dir
from astra_sglang.references import small_ops as reference
from astra_sglang.specs.registry import get_spec, resolve_shapes

FAMILIES = ["gelu_and_mul", "gelu_tanh_and_mul", "gemma_rmsnorm", "gemma_fused_add_rmsnorm"]
SHAPES = [(1, 1), (3, 11), (5, 4100), (17, 264), (2, 4096)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_gelu_reference_is_torchs_gelu(approximate, shape, dtype):
    tokens, d = shape
    x = (torch.randn(tokens, 2 * d, generator=torch.Generator().manual_seed(d)) * 3).to(dtype)
    out = torch.empty(tokens, d, dtype=dtype)
    fn = reference.gelu_tanh_and_mul if approximate == "tanh" else reference.gelu_and_mul
    fn(x, out)
    # SGLang's forward_native in fp32, rounded once: the fp64 reference may differ from it by that rounding only.
    native = (F.gelu(x[:, :d].float(), approximate=approximate) * x[:, d:].float()).to(dtype)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(out.float(), native.float(), atol=tol, rtol=tol)


def test_tanh_and_erf_gelu_differ_where_the_approximation_shows():
    x = torch.tensor([[-2.0, 1.5, 1.0, 1.0]], dtype=torch.float64)
    erf, tanh = torch.empty(1, 2, dtype=torch.float64), torch.empty(1, 2, dtype=torch.float64)
    reference.gelu_and_mul(x, erf)
    reference.gelu_tanh_and_mul(x, tanh)
    assert erf[0, 0].item() == pytest.approx(-2.0 * 0.5 * (1 + torch.erf(torch.tensor(-2.0 / 2 ** 0.5)).item()))
    assert 1e-6 < abs(erf[0, 0] - tanh[0, 0]).item() < 1e-3  # the approximation's error at -2


def _gemma_native(x, w, eps, residual=None):
    """SGLang GemmaRMSNorm.forward_native: fp32 math, 1 + weight, one rounding."""
    if residual is not None:
        x = x + residual
        residual = x
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())
    return h.to(x.dtype), residual


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemma_references_are_sglangs_native_forward(shape, dtype):
    tokens, d = shape
    g = torch.Generator().manual_seed(tokens * 7 + d)
    x, r = (torch.randn(tokens, d, generator=g).to(dtype) for _ in range(2))
    w = (0.5 * torch.randn(d, generator=g)).to(dtype)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    out = torch.empty_like(x)
    reference.gemma_rmsnorm(x, w, 1e-6, out)
    torch.testing.assert_close(out.float(), _gemma_native(x, w, 1e-6)[0].float(), atol=tol, rtol=tol)
    xi, ri = x.clone(), r.clone()
    reference.gemma_fused_add_rmsnorm(xi, ri, w, 1e-6)
    want, want_res = _gemma_native(x, w, 1e-6, r)
    torch.testing.assert_close(ri, want_res)  # the sum, rounded once to T
    torch.testing.assert_close(xi.float(), want.float(), atol=2 * tol, rtol=2 * tol)


def test_gemma_is_rmsnorm_with_one_added_to_the_weight():
    x, w = torch.randn(4, 40, dtype=torch.float64), torch.randn(40, dtype=torch.float64)
    gemma, plain = torch.empty_like(x), torch.empty_like(x)
    reference.gemma_rmsnorm(x, w, 1e-6, gemma)
    reference.rmsnorm(x, w + 1, 1e-6, plain)
    torch.testing.assert_close(gemma, plain)


@pytest.mark.parametrize("op", FAMILIES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_spec_reference_passes_its_own_check_on_every_edge_shape(op, dtype):
    """The harness's own inputs (init, edge-case fills) through the spec's reference, compared with an fp64 run."""
    assert_reference_passes_its_own_check(op, dtype, "edge")


@pytest.mark.parametrize("op", FAMILIES)
def test_specs_load_with_every_shape_set(op):
    spec = get_spec(op)
    assert spec.reference_fn() is getattr(reference, op)
    assert set(spec.tolerance) == set(spec.dtypes) == {"float32", "float16", "bfloat16"}
    for name in ("quick", "paper", "models", "edge", "held_out"):
        shapes = resolve_shapes(spec, name)
        assert shapes and all(len(s) == 2 and spec.supports(s) for s in shapes), name
    gate = resolve_shapes(spec, "gate")
    assert (1, 1) not in gate and any(s[1] % 8 for s in gate)  # odd widths are gated
    assert not set(map(tuple, spec.shapes.held_out)) & set(map(tuple, spec.shapes.paper + spec.shapes.quick))
    assert [(t.module, t.attr) for t in spec.sglang_targets] == [
        ("sglang.srt.layers.activation" if "gelu" in op else "sglang.srt.layers.layernorm", op)]


def test_gelu_specs_are_silus_but_for_the_activation():
    silu = get_spec("silu_and_mul")
    for op in ("gelu_and_mul", "gelu_tanh_and_mul"):
        spec = get_spec(op)
        assert spec.arguments == silu.arguments and spec.dims == silu.dims
        assert {k: v.kernel for k, v in spec.sources.items()} == {k: v.kernel for k, v in silu.sources.items()}
    for op, plain in (("gemma_rmsnorm", "rmsnorm"), ("gemma_fused_add_rmsnorm", "fused_add_rmsnorm")):
        spec, base = get_spec(op), get_spec(plain)
        assert [(a.name, a.role, a.shape) for a in spec.arguments] == [(a.name, a.role, a.shape) for a in base.arguments]
        assert spec.sources["flashinfer"].kernel == base.sources["flashinfer"].kernel
        assert spec.sources["flashinfer"].host_entry.startswith("flashinfer::norm::Gemma")


@pytest.mark.parametrize("op", FAMILIES)
def test_variant_builds_the_base_ops_files(op):
    variant = VARIANTS[op]
    path, defines = first_kernel(op)
    assert path == kernels_dir() / f"{variant.base}.cu" and defines == variant.defines
    manifest = PatchManifest.load(patches_dir() / op)
    assert manifest.kernel == f"../{variant.base}/kernel.cu" and manifest.defines == variant.defines
    assert (patches_dir() / op / manifest.kernel).resolve() == (patches_dir() / variant.base / "kernel.cu").resolve()
    assert manifest.measured and manifest.enabled == (min(m.speedup for m in manifest.measured) > 1.0)
    assert manifest.baseline == adapters.KERNEL_BASELINES[op]
    assert manifest.targets == [f"{t.module}:{t.attr}" for t in get_spec(op).sglang_targets]
    # each define reaches code in both files: a misspelt name would silently build the base op
    for source in (path, patches_dir() / variant.base / "kernel.cu"):
        text = source.read_text() + (kernels_dir().parent.parent / "harness_templates" / "astra_device.cuh").read_text()
        assert all(name in text for name in defines)


def test_plain_ops_keep_their_own_first_kernel():
    assert first_kernel("silu_and_mul") == (kernels_dir() / "silu_and_mul.cu", {})
    assert first_kernel("merge_state") == (kernels_dir() / "merge_state.cu", {})


def test_materialize_writes_the_defines_at_the_top(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    base = tmp_path / "k.cu"
    base.write_text("int x = ASTRA_ACT;\n")
    assert materialize(base, {}, "op") == base
    out = materialize(base, {"ASTRA_ACT": "2"}, "gelu_tanh_and_mul")
    lines = out.read_text().splitlines()
    assert lines[1:] == ["#define ASTRA_ACT 2", "int x = ASTRA_ACT;"] and "k.cu built with ASTRA_ACT=2" in lines[0]
    assert materialize(base, {"ASTRA_ACT": "2"}, "gelu_tanh_and_mul") == out  # content-addressed


def test_optimize_starts_a_variant_from_the_base_file_with_its_define(tmp_path, monkeypatch):
    from astra_sglang.optimize import starts

    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    spec = get_spec("gemma_rmsnorm")
    first = starts.start_source(spec, None).read_text()
    assert "#define ASTRA_GEMMA 1\n" in first and first.endswith((kernels_dir() / "rmsnorm.cu").read_text())
    tuned = starts.tuner_start(spec, None).read_text()  # the shipped (knobbed) rmsnorm file, Gemma's define in
    assert "#define ASTRA_GEMMA 1\n" in tuned and "astra:knob" in tuned
    assert tuned.endswith((patches_dir() / "rmsnorm" / "kernel.cu").read_text())


@pytest.mark.parametrize("op", FAMILIES)
def test_bench_defaults_name_sglangs_op_or_the_variants_first_kernel(op, monkeypatch):
    monkeypatch.setattr(defaults, "missing_for", lambda name: None)
    spec = get_spec(op)
    assert defaults.baseline_side(spec, None).path == adapters.KERNEL_BASELINES[op]
    assert defaults.baseline_side(spec, "sglang").path == f"py:{spec.sglang_targets[0].module}:{op}"
    monkeypatch.setattr(defaults, "missing_for", lambda name: "sglang")
    side = defaults.baseline_side(spec, None)
    assert side.path == str(kernels_dir() / f"{VARIANTS[op].base}.cu") and side.defines == VARIANTS[op].defines
    cand = defaults.candidate_side(op, None, {"ASTRA_DEFAULT_PDL": "0"}, PatchStore(patches_dir()))
    enabled = PatchManifest.load(patches_dir() / op).enabled
    assert cand.label == f"patches/{op}" and ("disabled in the patch set" in cand.what) != enabled
    assert cand.defines == {**VARIANTS[op].defines, "ASTRA_DEFAULT_PDL": "0"}


@pytest.mark.parametrize("op, approximate", [("gelu_and_mul", "none"), ("gelu_tanh_and_mul", "tanh")])
def test_gelu_adapters_call_sglangs_module_global(op, approximate, monkeypatch):
    calls = []
    fake = types.ModuleType("sglang.srt.layers.activation")
    setattr(fake, op, lambda input, out: calls.append((op, input.shape, out.shape)))
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.activation", fake)
    adapters._sglang_activation.cache_clear()
    try:
        getattr(adapters, f"sglang_{op}")(torch.zeros(2, 8), torch.zeros(2, 4))
    finally:
        adapters._sglang_activation.cache_clear()
    assert calls == [(op, (2, 8), (2, 4))]


def test_sglang_gemma_norm_signatures_match_the_spec_order(torchvision_shim):
    """sgl_kernel.gemma_rmsnorm(input, weight, eps, out) / gemma_fused_add_rmsnorm(input, residual, weight, eps):
    read from the names SGLang's GemmaRMSNorm passes, in the installed SGLang's source."""
    import importlib.util
    from pathlib import Path

    origin = importlib.util.find_spec("sglang").submodule_search_locations[0]
    text = (Path(origin) / "srt" / "layers" / "layernorm.py").read_text()
    assert "gemma_fused_add_rmsnorm(\n                x, residual, self.weight.data, self.variance_epsilon\n" in text
    assert "gemma_rmsnorm(x, self.weight.data, self.variance_epsilon)" in text
    assert [a.name for a in get_spec("gemma_rmsnorm").arguments] == ["input", "weight", "eps", "out"]
    assert [a.name for a in get_spec("gemma_fused_add_rmsnorm").arguments] == ["input", "residual", "weight", "eps"]


def test_kernels_lists_the_families():
    out = CliRunner().invoke(main, ["kernels"])
    assert out.exit_code == 0, out.output
    for op in FAMILIES:
        assert op in out.output


def test_patch_list_shows_each_family_enabled_where_its_figures_say_faster():
    """Each family's manifest carries its measured rows; only those faster than SGLang's op at every timed shape
    ship enabled (the Gemma norms; SGLang's JIT gelu kernels were as fast or faster)."""
    from astra_sglang.cli import patch as cli

    out = CliRunner().invoke(cli.patch_group, ["list", "--patches", str(patches_dir())])
    assert out.exit_code == 0, out.output
    rows = {line.split()[0]: line.split() for line in out.output.splitlines()[2:] if line.strip()}
    for op in FAMILIES:
        manifest = json.loads((patches_dir() / op / "manifest.json").read_text())
        measured = manifest["measured"]
        assert measured and manifest["provenance"]["gpu"] and manifest["provenance"]["date"], op
        faster_everywhere = min(r["speedup"] for r in measured) > 1.0
        assert rows[op][1] == ("yes" if faster_everywhere else "no"), (op, rows[op])
        assert rows[op][4].endswith("x"), rows[op]
    assert json.loads((patches_dir() / "silu_and_mul" / "manifest.json").read_text())["defines"] == {}
