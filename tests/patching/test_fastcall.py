"""The C++ fast path of patched ops (patching/fastcall.cpp), on CPU: real kernel libraries built from host
stand-ins (tests/fixtures/host/host_kernels.cpp) behind the same C ABI and ctypes loader as on the GPU."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from astra_sglang.errors import AstraError
from astra_sglang.harness.abi import KernelLibrary, Launcher
from astra_sglang.patching import fastcall
from astra_sglang.patching.patched_op import PatchedOp
from astra_sglang.patching.stats import OpStats
from astra_sglang.paths import templates_dir
from astra_sglang.references import small_ops as reference
from astra_sglang.specs.registry import get_spec

HOST = Path(__file__).parents[1] / "fixtures" / "host" / "host_kernels.cpp"


@pytest.fixture(scope="module")
def module():
    try:
        return fastcall._import(fastcall.build())
    except AstraError as exc:  # e.g. a machine without a C++ compiler: the Python path is tested elsewhere
        pytest.skip(f"fast path cannot be built here: {exc}")


@pytest.fixture(scope="module")
def library(tmp_path_factory, module):
    """(op, defines) -> a loaded host library."""
    folder, built = tmp_path_factory.mktemp("host"), {}

    def get(op: str, *defines: str) -> KernelLibrary:
        name = "_".join((op,) + defines).replace("=", "")
        if name not in built:
            out = folder / f"{name}.so"
            cuda = fastcall._cuda_include()
            subprocess.run(["g++", "-O1", "-shared", "-fPIC", f"-I{cuda}", f"-I{templates_dir()}", f"-DOP_{op}",
                            *(f"-D{d}" for d in defines), str(HOST), "-o", str(out)], check=True)
            built[name] = KernelLibrary(out)
        return built[name]

    return get


def patched(library, op: str, original, *defines: str, **kw):
    spec, stats = get_spec(op), OpStats(op)
    launcher = Launcher(library(op.split("_")[0].upper() if op != "fused_add_rmsnorm" else "FUSED", *defines),
                        len(spec.tensor_args), len(spec.scalar_args))
    return PatchedOp(spec, launcher, original, stats, device_type="cpu", seed=0, **kw), stats


def silu_original(input, out=None):
    if out is None:
        out = input.new_empty(*input.shape[:-1], input.shape[-1] // 2)
    reference.silu_and_mul(input, out)
    return out


def test_second_call_of_a_shape_is_served_in_cpp(library):
    op, stats = patched(library, "silu_and_mul", silu_original)
    assert op._fast is not None
    x = torch.randn(5, 64)
    first = op.fn(x)  # unknown shape: Python computes and hands over the verdict
    assert (op._fast.calls, stats.calls, op._fast.verdicts) == (0, 1, 1)
    second = op.fn(x)
    assert op._fast.calls == 1 and stats.calls == 1 and second is not first
    torch.testing.assert_close(second, silu_original(x))
    out = torch.empty(5, 32)
    assert op.fn(x, out) is out and op._fast.calls == 2  # out given positionally
    torch.testing.assert_close(out, silu_original(x))
    assert op.fn(x, out=out) is out and op._fast.calls == 3  # keywords: bound in Python, served in C++
    assert op.fn(input=x) is not out and op._fast.calls == 4 and stats.calls == 1
    rec = stats.record()
    assert (rec.calls, rec.kernel_calls, rec.fallbacks) == (5, 5, 0)


def test_an_original_declaring_none_gets_none_back_from_either_path(library):
    """An original that writes the outputs its caller hands in and returns None (SGLang's topk_softmax): the patched
    call returns None too, from C++ as from Python."""
    def original(input, out) -> None:
        reference.silu_and_mul(input, out)

    op, stats = patched(library, "silu_and_mul", original)
    x, out = torch.randn(5, 64), torch.empty(5, 32)
    assert op.fn(x, out) is None and op._fast.calls == 0  # Python computes the verdict
    assert op.fn(x, out) is None and op._fast.calls == 1  # served in C++
    torch.testing.assert_close(out, silu_original(x))
    assert stats.calls == 1


def test_inplace_op_with_scalar_and_default(library):
    op, stats = patched(library, "fused_add_rmsnorm", reference.fused_add_rmsnorm)
    w = torch.rand(48) + 0.5
    for eps in (1e-6, 1e-6, 1, None):  # an int eps converts; None takes the spec default
        x, r = torch.randn(3, 48), torch.randn(3, 48)
        ex, er = x.clone(), r.clone()
        reference.fused_add_rmsnorm(ex, er, w, 1e-6 if eps is None else eps)
        assert (op.fn(x, r, w) if eps is None else op.fn(x, r, w, eps)) is None
        torch.testing.assert_close((x, r), (ex, er))
    assert op._fast.calls == 3 and stats.calls == 1


def test_two_outputs_come_back_as_a_tuple(library):
    def original(v_a, s_a, v_b, s_b, v_merged=None, s_merged=None):
        v_merged = torch.empty_like(v_a) if v_merged is None else v_merged
        s_merged = torch.empty_like(s_a) if s_merged is None else s_merged
        reference.merge_attn_states_lse(v_a, s_a, v_b, s_b, v_merged, s_merged)
        return v_merged, s_merged

    op, _ = patched(library, "merge_attn_states_lse", original)
    args = (torch.randn(4, 2, 16), torch.randn(4, 2), torch.randn(4, 2, 16), torch.randn(4, 2))
    op.fn(*args)
    v, s = op.fn(*args)
    assert op._fast.calls == 1
    torch.testing.assert_close((v, s), original(*args))


def test_uncovered_and_unsupported_calls_reach_the_original(library):
    calls = []

    def original(input, out=None):
        calls.append(tuple(input.shape))
        return silu_original(input, out)

    op, stats = patched(library, "silu_and_mul", original, "MAX_ROWS=8", dtypes=["float32"])
    for _ in range(2):
        op.fn(torch.randn(2, 8, dtype=torch.float16))  # dtype not patched: verdict False, cached in C++
        op.fn(torch.randn(9, 8))  # covered, but the library refuses 9 rows (ASTRA_UNSUPPORTED)
        op.fn(torch.randn(8, 3).t())  # column-major: the library refuses
    assert op._fast.calls == 0 and stats.fallbacks == 6 and op.active
    assert calls == [(2, 8), (9, 8), (3, 8)] * 2


def test_launch_error_disables_with_the_cuda_error(library):
    op, stats = patched(library, "silu_and_mul", silu_original, "FAIL_CODE=700")
    x = torch.randn(2, 8)
    op._fast.remember([x, torch.empty(2, 4)], True)  # as if Python had judged the shape already
    torch.testing.assert_close(op.fn(x), silu_original(x))
    assert not op.active and not op._fast.active and "cudaError 700" in stats.disabled_reason
    op.fn(x)
    assert stats.fallbacks == 2 and op._fast.calls == 0


def test_no_fast_path_with_verification_or_when_switched_off(library, monkeypatch):
    op, _ = patched(library, "silu_and_mul", silu_original, verify_rate=0.5)
    assert op._fast is None
    monkeypatch.setenv(fastcall.ENV_FASTCALL, "0")
    op, _ = patched(library, "silu_and_mul", silu_original)
    assert op._fast is None
    assert PatchedOp(get_spec("silu_and_mul"), lambda t, s: 0, silu_original, OpStats("x"), device_type="cpu")._fast is None


def test_bad_descriptions_are_refused(module):
    with pytest.raises(ValueError):
        module.FastOp(1, "tq", (-1, -1), (None, None), (None, None), None)
    with pytest.raises(ValueError):
        module.FastOp(1, "to", (-1, 1), (None, None), (None, None), None)  # an output shaped like an output
    with pytest.raises(TypeError):
        module.FastOp(1, "t", (-1,), (None,), (None,), 3)


def test_torch_compile_routes_around_the_fast_path(library):
    op, _ = patched(library, "silu_and_mul", silu_original)
    x = torch.randn(4, 32)
    compiled = torch.compile(lambda t: op.fn(t) * 2, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), silu_original(x) * 2)
    assert op._fast.calls == 0  # dynamo traced the custom op, not the C++ callable


def test_output_rules_follow_the_specs():
    """Outputs the fast path allocates itself: silu's out is [tokens, d] from input [tokens, 2*d]; merge's
    s_merged is float32 [tokens, heads] from v_a."""
    silu, merge = get_spec("silu_and_mul"), get_spec("merge_attn_states_lse")
    assert fastcall.output_rule(silu, 1) == (0, ((0, 0, 1, 0, 1, 0), (0, 1, 2, 0, 1, 0)))
    assert fastcall.output_rule(merge, 5) == (-1, ((0, 0, 1, 0, 1, 0), (0, 1, 1, 0, 1, 0)))
    assert fastcall._affine("d // 2", "d") is None  # not affine: the Python path allocates
    quant = get_spec("per_token_group_quant_fp8")  # fp8 x_q (no dtype source) and x_s (laid out by its allocator)
    assert fastcall.output_rule(quant, 5) is None and fastcall.output_rule(quant, 6) is None


@pytest.mark.gpu
def test_cuda_fast_path_matches_reference_and_captures_into_a_graph(module):
    """The shipped silu kernel through the C++ path on CUDA: eager calls, then CUDA-graph capture (as SGLang
    captures decode graphs) with the output allocated inside the capture, replayed on new input."""
    from astra_sglang.harness.build import build_library
    from astra_sglang.paths import patches_dir

    build = build_library(patches_dir() / "silu_and_mul" / "kernel.cu")
    assert build.ok, build.log
    spec, stats = get_spec("silu_and_mul"), OpStats("silu_and_mul")
    op = PatchedOp(spec, Launcher(KernelLibrary(build.library), 2, 0), silu_original, stats, device_type="cuda")
    x = torch.randn(16, 2 * 4096, device="cuda", dtype=torch.bfloat16)
    op.fn(x)
    y = op.fn(x)
    assert op._fast.calls == 1
    torch.testing.assert_close(y, silu_original(x), atol=1e-2, rtol=1.6e-2)
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        op.fn(x)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        captured = op.fn(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, silu_original(x), atol=1e-2, rtol=1.6e-2)
    assert stats.fallbacks == 0


def test_deferred_shapes_call_the_original_from_cpp(library):
    from astra_sglang.patchset.manifest import Defer

    calls = []

    def original(input, out=None):
        calls.append(tuple(input.shape))
        return silu_original(input, out)

    # fp32 rows of 8 in, 4 out: 48 bytes a row; the threshold sits between 2 and 4 rows
    op, stats = patched(library, "silu_and_mul", original, defer=Defer(min_bytes=150, evidence="test"))
    small, large = torch.randn(2, 8), torch.randn(4, 8)
    for _ in range(3):
        torch.testing.assert_close(op.fn(small), silu_original(small))
        torch.testing.assert_close(op.fn(large), silu_original(large))
    out = torch.empty(4, 4)
    assert op.fn(large, out) is out  # the caller's own arguments reach the original
    # first call of each shape: Python judges it (large: deferred there); later ones never leave C++
    assert op._fast.calls == 2 and op._fast.deferred == 3 and stats.deferred == 1
    assert calls == [(4, 8)] * 4
    record = stats.record()
    assert (record.calls, record.kernel_calls, record.deferred, record.fallbacks) == (7, 3, 4, 0)


def test_keyword_calls_reach_the_kernel_and_deferred_ones_the_original_with_the_callers_keywords(library):
    from astra_sglang.patchset.manifest import Defer

    calls = []

    def original(input, *, out=None):  # keyword-only out: only a keyword call can pass it
        calls.append((tuple(input.shape), out is not None))
        return silu_original(input, out)

    op, stats = patched(library, "silu_and_mul", original, defer=Defer(min_bytes=150, evidence="test"))
    small, large = torch.randn(2, 8), torch.randn(4, 8)
    for _ in range(3):
        out = torch.empty(2, 4)
        assert op.fn(small, out=out) is out
        torch.testing.assert_close(out, silu_original(small))
        torch.testing.assert_close(op.fn(input=large), silu_original(large))
    # after each shape's first call (Python's verdict) the keyword calls never leave C++
    assert op._fast.calls == 2 and op._fast.deferred == 2 and stats.calls == 2
    assert calls == [((4, 8), False)] * 3  # the original got the caller's own keywords
    with pytest.raises(TypeError):  # a call the signature refuses is the original's to refuse
        op.fn(small, bogus=1)
    assert stats.reasons and "bogus" in next(iter(stats.reasons))


def test_remember_refuses_unknown_verdicts(library):
    op, _ = patched(library, "silu_and_mul", silu_original)
    with pytest.raises(ValueError, match="unknown verdict"):
        op._fast.remember([torch.randn(2, 8), torch.empty(2, 4)], 3)
