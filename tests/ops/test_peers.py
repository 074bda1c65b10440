"""Peer baselines (astra_sglang.baselines.peers): torch.compile adapters against the fp64 reference on CPU; Liger's
adapters and CUDA-graph capture of every peer on a GPU (skipped without one, or without liger_kernel)."""
import inspect
import subprocess
import sys

import pytest
import torch

from astra_sglang.baselines import peers
from astra_sglang.harness.compare import compare
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.specs.registry import get_spec

OPS = ["silu_and_mul", "rmsnorm", "fused_add_rmsnorm"]
SHAPES = [(1, 8), (3, 40), (17, 264)]  # odd widths; every shape x dtype is one more compile (dynamic=False)


def _run_and_compare(fn, op, shape, dtype, device, edge=None):
    spec = get_spec(op)
    args = fill(spec, allocate(spec, shape, dtype, device), torch.Generator(device).manual_seed(7), edge)
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    fn(*args.call_args(spec))
    return compare(spec, dtype, args, ref)  # the spec's per-dtype atol / rtol, every out and in-place arg


def _compiled_runner(op, device):
    # Inductor's C++ (CPU) backend crashes on this in-place pattern (KeyError 'bufN' in outer-loop local-buffer
    # promotion, pytorch/pytorch#196570; the GPU uses the Triton backend): check the same compiled graph without
    # inductor's codegen there.
    if device == "cpu" and op == "fused_add_rmsnorm":
        return peers.compiled(op, backend="aot_eager")
    return getattr(peers, f"compiled_{op}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op", OPS)
def test_compiled_peer_matches_reference_on_cpu(op, shape, dtype):
    fn = _compiled_runner(op, "cpu")
    for edge in [None, *get_spec(op).edge_cases]:
        verdict = _run_and_compare(fn, op, shape, dtype, "cpu", edge)
        assert verdict.ok, f"{edge.name if edge else 'random'}: {verdict.reason}"


def test_recompiles_never_fall_back_to_eager_silently():
    peers.compiled("silu_and_mul")
    cfg = torch._dynamo.config
    assert cfg.recompile_limit >= 256 and cfg.fail_on_recompile_limit_hit


@pytest.mark.parametrize("op", OPS)
def test_every_peer_takes_the_spec_arguments_in_order(op):
    names = [a.name for a in get_spec(op).arguments]
    for label, path in peers.PEERS[op].items():
        module, _, func = path.removeprefix("py:").rpartition(":")
        assert module == peers.__name__, label
        assert list(inspect.signature(getattr(peers, func)).parameters) == names, label


def test_importing_peers_loads_neither_liger_nor_triton():
    code = ("import sys, torch; before = set(sys.modules); import astra_sglang.baselines.peers; "
            "print(sorted(m for m in ('liger_kernel', 'triton') if m in set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- GPU -----------------------------------------------------------------------------------------------------

GPU_SHAPES = [(3, 40), (17, 264), (7, 4100)]  # 40 columns: Liger fused_add_rmsnorm's copy fallback


def _liger():
    pytest.importorskip("liger_kernel")
    pytest.importorskip("triton")


def _graph_replay_compare(fn, op, shape, dtype):
    """The harness's timing path: a first eager call, then capture in a CUDA graph, then replay on new values."""
    spec = get_spec(op)
    gen = torch.Generator("cuda").manual_seed(11)
    args = fill(spec, allocate(spec, shape, dtype, "cuda"), gen)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        fn(*args.call_args(spec))
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            fn(*args.call_args(spec))
    torch.cuda.synchronize()
    fill(spec, args, gen)  # same buffers, new values
    ref = args.upcast()
    spec.reference_fn()(*ref.call_args(spec))
    graph.replay()
    torch.cuda.synchronize()
    return compare(spec, dtype, args, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("peer", ["liger", "compiled"])
def test_peer_on_gpu_matches_reference_eager_and_in_a_cuda_graph(peer, op, shape, dtype):
    if peer == "liger":
        _liger()
    fn = getattr(peers, f"{peer}_{op}")
    for edge in [None, *get_spec(op).edge_cases]:
        verdict = _run_and_compare(fn, op, shape, dtype, "cuda", edge)
        assert verdict.ok, f"eager, {edge.name if edge else 'random'}: {verdict.reason}"
    verdict = _graph_replay_compare(fn, op, shape, dtype)
    assert verdict.ok, f"graph replay: {verdict.reason}"
