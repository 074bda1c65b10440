"""topk_softmax on CPU: the fp64 reference against torch's own top-k (odd shapes x dtypes, both renormalize values),
the tie rule, the drawn logits, the spec and its MoE-router shapes, SGLang's op as the baseline, the manifest, the
kernel files (built for sm_90, knob corners without spills), the patched target's binding and fallbacks, and the
benchmark scripts' entries."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from reference_self_check import assert_reference_passes_its_own_check

from astra_sglang.baselines import adapters
from astra_sglang.baselines import defaults
from astra_sglang.cli import main
from astra_sglang.harness.compare import compare
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.kernels.variants import first_kernel
from astra_sglang.patching.patched_op import PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.paths import kernels_dir, patches_dir
from astra_sglang.references import moe_routing
from astra_sglang.specs.registry import get_spec, model_shapes, resolve_shapes, routers

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [(1, 8, 2), (3, 60, 4), (17, 64, 6), (5, 128, 8), (2, 256, 8), (4, 5, 5), (1, 1, 1), (9, 200, 1)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _reference(x: torch.Tensor, k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    w, ids = torch.empty(x.shape[0], k, dtype=torch.float64), torch.empty(x.shape[0], k, dtype=torch.int32)
    moe_routing.topk_softmax(w, ids, x, renormalize)
    return w, ids


@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_is_torchs_topk_of_the_softmax(shape, dtype, renormalize):
    tokens, experts, k = shape
    g = torch.Generator().manual_seed(tokens * 1000 + experts)
    x = moe_routing.distinct_logits((tokens, experts), dtype, g, {}).to(dtype)
    w, ids = _reference(x, k, renormalize)
    p = torch.softmax(x.double(), dim=-1)
    want_w, want_ids = torch.topk(p, k, dim=-1)  # no ties in these rows: torch's order is the only order
    if renormalize:
        want_w = want_w / want_w.sum(-1, keepdim=True)
    assert torch.equal(ids.long(), want_ids)
    torch.testing.assert_close(w, want_w, rtol=1e-12, atol=0)
    if renormalize:
        torch.testing.assert_close(w.sum(-1), torch.ones(tokens, dtype=torch.float64))


def test_ties_go_to_the_lowest_expert_id():
    x = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0, -2.0], [0.0] * 6])
    w, ids = _reference(x, 4, False)
    assert ids.tolist() == [[1, 2, 4, 0], [0, 1, 2, 3]]
    assert w[1].tolist() == [1 / 6] * 4
    w, _ = _reference(x, 4, True)
    assert w[1].tolist() == [0.25] * 4


@pytest.mark.parametrize("experts", [1, 3, 8, 60, 64, 128, 200, 256, 512])
@pytest.mark.parametrize("dtype", DTYPES)
def test_drawn_logits_are_distinct_and_exact_in_every_dtype(experts, dtype):
    x = moe_routing.distinct_logits((7, experts), dtype, torch.Generator().manual_seed(experts), {})
    assert torch.equal(x.to(dtype).float(), x)  # exact: the reference sees the kernel's very values
    assert all(len(set(row.tolist())) == experts for row in x)
    assert float(x.max() - x.min()) <= moe_routing.SPAN and (experts < 8 or float(x.max() - x.min()) >= 3.0)


def test_spec_loads_with_every_shape_set():
    spec = get_spec("topk_softmax")
    assert spec.reference_fn() is moe_routing.topk_softmax
    assert [(a.name, a.role, a.dtype) for a in spec.tensor_args] == [
        ("topk_weights", "out", "float32"), ("topk_ids", "out", "int32"), ("gating_output", "in", "T")]
    renorm = spec.scalar_args[0]
    assert (renorm.name, renorm.scalar_type, renorm.default, renorm.keyword) == ("renormalize", "bool", False, False)
    for name in ("quick", "models", "edge", "held_out"):
        shapes = resolve_shapes(spec, name)
        assert shapes and all(len(s) == 3 and spec.supports(s) for s in shapes), name
    assert not set(resolve_shapes(spec, "held_out")) & set(resolve_shapes(spec, "quick"))
    assert [(t.module, t.attr) for t in spec.sglang_targets] == [("sglang.srt.layers.moe.topk", "topk_softmax")]
    assert spec.sources["sgl-kernel"].kernel == "topkGatingSoftmax"


def test_model_shapes_are_the_routers_at_decode_and_prefill():
    spec = get_spec("topk_softmax")
    shapes = model_shapes(spec)
    assert {s[1:] for s in shapes} == {(r.experts, r.topk) for r in routers()} >= {(8, 2), (128, 8), (60, 4), (64, 6)}
    assert {s[0] for s in shapes} == set(spec.shapes.tokens) and min(spec.shapes.tokens) == 1
    assert max(spec.shapes.tokens) == 8192
    assert {s[1:] for s in resolve_shapes(spec, "quick")} == {(8, 2), (128, 8)}  # Mixtral, Qwen3-MoE
    # the dense ops keep their dense models
    assert {s[1] for s in model_shapes(get_spec("rmsnorm"))} == {4096, 5120, 8192, 3584}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_harness_inputs_pass_the_reference_check_on_every_edge_shape_and_case(dtype):
    assert_reference_passes_its_own_check("topk_softmax", dtype, "edge+held_out", max_rows=400)


def test_the_all_tied_case_lists_the_first_experts_in_order():
    spec = get_spec("topk_softmax")
    tied = next(e for e in spec.edge_cases if e.name == "all_tied")
    args = fill(spec, allocate(spec, (3, 60, 4), "bfloat16", "cpu"), torch.Generator().manual_seed(0), tied)
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    assert ref.tensors[1][0].tolist() == [0, 1, 2, 3] and ref.tensors[1][1].tolist() != [0, 1, 2, 3]


def test_a_wrong_order_is_caught_exactly():
    spec = get_spec("topk_softmax")
    args = fill(spec, allocate(spec, (5, 64, 6), "bfloat16", "cpu"), torch.Generator().manual_seed(1))
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    spec.reference_fn()(*args.call_args(spec))
    args.tensors[1][2, [0, 1]] = args.tensors[1][2, [1, 0]]
    verdict = compare(spec, "bfloat16", args, ref)
    assert not verdict.ok and "topk_ids: wrong values" in verdict.reason


def test_bench_defaults_name_sglangs_op_and_our_kernels(monkeypatch):
    spec = get_spec("topk_softmax")
    monkeypatch.setattr(defaults, "missing_for", lambda name: None)
    assert defaults.baseline_side(spec, None).path == "py:sglang.kernels.ops.moe:topk_softmax"
    assert defaults.baseline_side(spec, "sglang").path == "py:sglang.srt.layers.moe.topk:topk_softmax"
    monkeypatch.setattr(defaults, "missing_for", lambda name: "sgl_kernel")
    assert defaults.baseline_side(spec, None).path == str(kernels_dir() / "topk_softmax.cu")
    cand = defaults.candidate_side("topk_softmax", None, {})
    assert cand.label == "patches/topk_softmax" and cand.what == "the shipped patch"
    assert cand.path == str((patches_dir() / "topk_softmax" / "kernel.cu").resolve())
    assert first_kernel("topk_softmax") == (kernels_dir() / "topk_softmax.cu", {})


def test_manifest_ships_enabled_with_the_specs_target():
    manifest = PatchManifest.load(patches_dir() / "topk_softmax")
    # Enabled by its H200 figures (1.315x geomean) once compute-sanitizer's memcheck and racecheck ran clean.
    assert manifest.enabled and manifest.provenance.method == "hand" and not manifest.off_reason
    assert "compute-sanitizer memcheck and racecheck clean" in manifest.provenance.notes
    assert manifest.measured and all(m.speedup > 0 and m.baseline_us > 0 for m in manifest.measured)
    assert manifest.targets == ["sglang.srt.layers.moe.topk:topk_softmax"]
    assert manifest.baseline == adapters.KERNEL_BASELINES["topk_softmax"]
    assert set(manifest.dtypes) == set(get_spec("topk_softmax").dtypes)


def test_kernels_lists_it():
    out = CliRunner().invoke(main, ["kernels", "topk_softmax"])
    assert out.exit_code == 0, out.output
    assert "topk_softmax" in out.output and "tokensxexpertsxtopk" in out.output


# ---- the kernel files --------------------------------------------------------------------------------------

nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")


@nvcc
@pytest.mark.nvcc
def test_shipped_kernel_builds_with_every_knob_corner_and_no_spills(tmp_path, monkeypatch):
    """The default entry (VPT 8 and 16) and the tuner's corners, every lane count and load width each: no spill."""
    from astra_sglang.harness.build import build_library
    from astra_sglang.kernels.knobs import parse_knobs

    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    text = (patches_dir() / "topk_softmax" / "kernel.cu").read_text()
    knobs = {k.name: k.values for k in parse_knobs(text)}
    assert list(knobs) == ["VPT", "WARPS", "PDL"] and knobs["VPT"][0] == 8
    corners = [(4, 1, 1), (16, 8, 1), (8, 2, 0)]
    calls = "\n".join(f"    case {i}: return astra_launch_cfg<{', '.join(map(str, c))}>(tensors, num_tensors, scalars, "
                      "num_scalars, stream);" for i, c in enumerate(corners))
    entry = f"\nASTRA_ENTRY {{\n  switch (num_scalars - 1) {{\n{calls}\n    default: return ASTRA_UNSUPPORTED;\n  }}\n}}\n"
    source = tmp_path / "topk_corners.cu"
    source.write_text("#define ASTRA_NO_DEFAULT_ENTRY 1\n" + text + entry)
    for path in (patches_dir() / "topk_softmax" / "kernel.cu", source):
        build = build_library(path, arch="sm_90")
        assert build.ok, build.log[-3000:]
        assert build.spill_bytes in (None, 0), build.log[-3000:]


# ---- the patched target: binding and fallback ----------------------------------------------------------------

ORIGINAL_CALLS: list = []


def sglang_topk_softmax(topk_weights, topk_ids, gating_output, renormalize=False, moe_softcapping=0.0,
                        correction_bias=None) -> None:
    """SGLang's signature (sglang.kernels.ops.moe.topk_softmax, `-> None`), computed by the fp64 reference."""
    ORIGINAL_CALLS.append((renormalize, moe_softcapping, correction_bias is not None))
    moe_routing.topk_softmax(topk_weights, topk_ids, gating_output, renormalize)


def _launcher(seen: list, max_experts: int = 256):
    """The ABI's stand-in: what our kernel computes where it covers the call, ASTRA_UNSUPPORTED past max_experts."""
    def launch(tensors, scalars):
        weights, ids, gating = tensors
        if gating.shape[1] > max_experts:
            return -1
        seen.append((tuple(gating.shape), list(scalars)))
        moe_routing.topk_softmax(weights, ids, gating, bool(scalars[0]))
        return 0
    return launch


def _make(max_experts: int = 256):
    seen: list = []
    stats = OpStats("topk_softmax")
    op = PatchedOp(get_spec("topk_softmax"), _launcher(seen, max_experts), sglang_topk_softmax, stats,
                   device_type="cpu", seed=0)
    return op, stats, seen


def _call_args(tokens=5, experts=128, k=8, dtype=torch.bfloat16):
    gating = moe_routing.distinct_logits((tokens, experts), dtype, torch.Generator().manual_seed(experts), {}).to(dtype)
    return (torch.empty(tokens, k, dtype=torch.float32), torch.empty(tokens, k, dtype=torch.int32), gating)


def test_fused_topks_positional_call_reaches_the_kernel():
    op, stats, seen = _make()
    weights, ids, gating = _call_args()
    op.fn(weights, ids, gating, True)  # fused_topk ignores the result: the outputs are written in place
    assert (stats.calls, stats.kernel_calls, stats.fallbacks) == (1, 1, 0)
    assert seen == [((5, 128), [1.0])]
    want_w, want_ids = _reference(gating, 8, True)
    assert torch.equal(ids, want_ids) and torch.allclose(weights.double(), want_w)


@pytest.mark.parametrize("experts", [128, 512])  # the kernel's call, and one it declines (SGLang's op serves it)
def test_the_patched_call_returns_what_sglangs_returns(experts):
    """SGLang's topk_softmax returns None; the spec names the weights and ids as outputs, but a patched call that
    returned them would differ from SGLang's (the H200 per-call check: "5 outputs, the original gave 3")."""
    op, stats, seen = _make()
    args = _call_args(experts=experts)
    assert sglang_topk_softmax(*_call_args(experts=experts), True) is None
    assert op.fn(*args, True) is None and op.fn(*args, renormalize=True) is None
    assert stats.kernel_calls == (2 if experts <= 256 else 0)
    assert torch.equal(args[1], _reference(args[2], 8, True)[1])


def test_a_call_without_renormalize_gets_sglangs_default():
    op, stats, seen = _make()
    weights, ids, gating = _call_args(experts=60, k=4)
    op.fn(weights, ids, gating)
    assert stats.kernel_calls == 1 and seen == [((5, 60), [0.0])]
    assert torch.allclose(weights.double(), _reference(gating, 4, False)[0])


@pytest.mark.parametrize("extra, reason", [
    ({"moe_softcapping": 30.0}, "argument moe_softcapping (not in the spec) given"),
    ({"correction_bias": torch.zeros(128)}, "argument correction_bias (not in the spec) given"),
])
def test_softcapping_or_bias_is_served_by_sglangs_op(extra, reason):
    op, stats, seen = _make()
    ORIGINAL_CALLS.clear()
    op.fn(*_call_args(), True, **extra)
    assert not seen and stats.fallbacks == 1 and stats.reasons == {reason: 1} and len(ORIGINAL_CALLS) == 1


def test_the_defaults_of_the_extra_arguments_still_reach_the_kernel():
    op, stats, _ = _make()
    op.fn(*_call_args(), True, moe_softcapping=0.0, correction_bias=None)
    assert (stats.kernel_calls, stats.fallbacks) == (1, 0)


def test_int64_ids_and_uncovered_expert_counts_fall_back():
    op, stats, seen = _make(max_experts=256)
    weights, ids, gating = _call_args()
    op.fn(weights, ids.long(), gating, True)
    assert stats.reasons == {"dtype or shape not covered": 1}
    ORIGINAL_CALLS.clear()
    weights, ids, gating = _call_args(experts=512, k=8)
    op.fn(weights, ids, gating, True)  # the kernel declines: SGLang's op computes it
    assert ORIGINAL_CALLS == [(True, 0.0, False)] and not seen
    assert torch.equal(ids, _reference(gating, 8, True)[1])


# ---- the benchmark scripts -----------------------------------------------------------------------------------

def test_families_warmup_keeps_the_earlier_families_and_adds_topk(bench_script):
    warmup = bench_script("families_warmup")
    assert {"gelu_and_mul", "gelu_tanh_and_mul", "gemma_rmsnorm", "gemma_fused_add_rmsnorm",
            "rotary_embedding", "topk_softmax", "per_token_group_quant_fp8"} <= set(warmup.WARMUPS)
    script = (ROOT / "benchmarks" / "gpu" / "families.sh").read_text()
    assert 'python3 benchmarks/families_warmup.py --sets "$SETS" $FAMILIES' in script


def test_a_failing_warmup_is_named_and_the_others_still_run(bench_script, monkeypatch, capsys):
    """The H200 run where the FP8 quant's warm-up raised and topk_softmax's, after it, never ran."""
    warmup = bench_script("families_warmup")
    ran = []

    def broken(sets):
        raise TypeError("'module' object is not callable")

    monkeypatch.setattr(warmup, "WARMUPS", {"per_token_group_quant_fp8": broken, "topk_softmax": ran.append})
    monkeypatch.setattr(warmup.torch.cuda, "synchronize", lambda: None)
    assert warmup.main(["per_token_group_quant_fp8", "topk_softmax"], "quick") == 1
    assert ran == ["quick"]
    out = capsys.readouterr().out
    assert "ERROR warm-up of per_token_group_quant_fp8: TypeError: 'module' object is not callable" in out
    assert "warm-up done: topk_softmax" in out


def test_per_call_times_mixtral_and_qwen3_moe():
    from astra_sglang.serving import per_call

    argc, width = per_call.CALLS_AS["topk_softmax"]
    spec = get_spec("topk_softmax")
    assert argc == len(spec.arguments)  # fused_topk passes all four positionally
    assert {width, *per_call.MORE_WIDTHS["topk_softmax"]} == {(128, 8), (8, 2)}
