"""Per-call cost of each enabled patch versus SGLang's original, Python dispatch included (eager, no CUDA graph).

At decode sizes (1-64 tokens) a kernel runs 1-3 us, no longer than the host's work per call, so the patched
op's Python wrapper and ctypes launch can decide what a call costs. This times back-to-back eager calls of
SGLang's original and of the patch's replacement (Runtime.op_for(...).fn; nothing is rebound), both called
with SGLang's own arguments (positional, or as SGLang's call site passes them: BUILDERS), and separately the GPU
time per call with the host out of the way.

At sizes a manifest's `defer` leaves to SGLang's kernel, the patched call goes to the original (from C++ on
the fast path): there the table shows what keeping SGLang's kernel behind the patch costs per call.

Run on a GPU machine with sglang, sgl_kernel, flashinfer and torch: `astra-sglang bench OP --per-call`, or
`python3 benchmarks/per_call.py OUTDIR [--tokens 1,16,64,8192] [--patches DIR]` for every enabled patch (both
write OUTDIR/per_call.{jsonl,md}).
"""
from __future__ import annotations

import functools
import json
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import import_module, metadata
from pathlib import Path
from typing import Callable

import torch

from astra_sglang.errors import AstraError
from astra_sglang.harness.inputs import TORCH_DTYPES, allocate, fill
from astra_sglang.harness.limits import FP8_TOLERANCE
from astra_sglang.patching.runtime import Runtime, RuntimeConfig
from astra_sglang.patching.targets import resolve
from astra_sglang.patchset.store import PatchStore
from astra_sglang.references.rope import cos_sin_cache

DEVICE, DTYPE, TOKENS = "cuda", "bfloat16", (1, 16, 64)
WARMUP, CALLS, REPS = 200, 2000, 7
GPU_CALLS, GPU_REPS, SPIN_CYCLES = 256, 3, 50_000_000  # ~25 ms at ~2 GHz: longer than enqueueing 256 calls
# op -> (leading spec arguments SGLang passes, model width after `tokens`). SGLang hands silu_and_mul its
# `out` but lets rmsnorm(x, w, eps) and merge_state_v2(v_a, s_a, v_b, s_b) allocate their outputs.
# The gelu and Gemma norm families at Gemma-2-9B's widths (intermediate 14336, hidden 3584); the rotary embedding at
# Llama-3-8B's (32 q heads, 8 kv heads, head_dim 128), called as BUILDERS says. SGLang's fused_topk hands
# topk_softmax its weights, ids (allocated empty), router logits and renormalize.
CALLS_AS = {"silu_and_mul": (2, (14336,)), "fused_add_rmsnorm": (4, (4096,)), "rmsnorm": (3, (4096,)),
            "merge_attn_states_lse": (4, (32, 128)), "merge_state": (4, (32, 128)),
            "gelu_and_mul": (2, (14336,)), "gelu_tanh_and_mul": (2, (14336,)),
            "gemma_rmsnorm": (3, (3584,)), "gemma_fused_add_rmsnorm": (4, (3584,)),
            "rotary_embedding": (0, (32, 8, 128)), "topk_softmax": (4, (128, 8)),
            "per_token_group_quant_fp8": (2, (7168,))}
# Further widths an op is timed at: (experts, top-k) of Qwen3-30B-A3B above, Mixtral-8x7B's here; the FP8 quant at
# DeepSeek-V3's hidden 7168 above, Qwen3-8B's 4096 here.
MORE_WIDTHS = {"topk_softmax": [(8, 2)], "per_token_group_quant_fp8": [(4096,)]}
# Keywords SGLang's call passes: block-FP8 linear layers on Hopper (DeepGEMM, SGLang's default there) ask for
# column-major, TMA-aligned scales.
CALL_KWARGS = {"per_token_group_quant_fp8": {"column_major_scales": True, "scale_tma_aligned": True}}
# The FA3 backend module may not import where FA3 is missing; it binds this very object from sgl_kernel.
STAND_INS = {"merge_attn_states_lse": ("sgl_kernel", "merge_state_v2")}


@dataclass
class Row:
    op: str
    shape: list[int]
    dtype: str
    original: str  # "module:attr" timed as the original
    original_us: float  # median wall time per call: host dispatch + launch, or the GPU where that is slower
    patched_us: float
    ratio: float  # patched / original; < 1: the patch costs less per call
    original_gpu_us: float  # GPU time per call, calls queued so the GPU never waits on the host
    patched_gpu_us: float
    fallbacks: int  # calls of this shape (check, warm-up, timing) served by the original: should be 0
    deferred: int  # calls of this shape the manifest's `defer` left to the original (then none launch ours)
    path: str  # "c++": the patched calls went through the C++ fast path (patching/fastcall.cpp); "python"
    date: str
    gpu: str
    torch: str
    sglang: str


Call = tuple[list, dict]
"""One call's positional and keyword arguments."""


def spec_call(spec, shape: tuple, argc: int) -> Callable[[], Call]:
    """The harness's draws, the first `argc` spec arguments passed positionally (fresh tensors each time)."""
    def make() -> Call:
        gen = torch.Generator(device=DEVICE).manual_seed(0)
        return fill(spec, allocate(spec, shape, DTYPE, DEVICE), gen).call_args(spec)[:argc], {}
    return make


def rope_call(spec, shape: tuple, argc: int) -> Callable[[], Call]:
    """RotaryEmbedding.forward_cuda's call: q and k as [tokens, heads, head_dim] views of one qkv projection
    [tokens, (heads + 2 kv_heads) * head_dim] (strided, as SGLang hands them in), keywords, fused_args=None."""
    tokens, heads, kv_heads, head_dim = shape
    max_pos = spec.free_dims["max_pos"]

    def make() -> Call:
        gen = torch.Generator(device=DEVICE).manual_seed(0)
        qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen, device=DEVICE,
                          dtype=TORCH_DTYPES[DTYPE])
        q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
        positions = torch.randint(0, max_pos, (tokens,), generator=gen, device=DEVICE)
        cache = cos_sin_cache((max_pos, head_dim), torch.float32, gen, {}).float()
        return [], dict(positions=positions, q=q.view(tokens, -1, head_dim), k=k.view(tokens, -1, head_dim),
                        cos_sin_cache=cache, is_neox=True, fused_args=None)
    return make


BUILDERS = {"rotary_embedding": rope_call}
"""Ops SGLang calls with keywords or views: their call, built as SGLang builds it (others: spec_call)."""


def wall_us(fn, call: Call, calls: int = CALLS) -> float:
    args, kwargs = call
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args, **kwargs)
    torch.cuda.synchronize()  # inside the span: a GPU-bound op shows as such
    return (time.perf_counter() - start) / calls * 1e6


def gpu_us(fn, call: Call) -> float:
    """Calls queued behind a spin kernel run back to back on the GPU, so the events time kernels only."""
    args, kwargs = call
    before, after_spin, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    before.record()
    torch.cuda._sleep(SPIN_CYCLES)
    after_spin.record()
    start = time.perf_counter()
    for _ in range(GPU_CALLS):
        fn(*args, **kwargs)
    enqueue_ms = (time.perf_counter() - start) * 1e3
    end.record()
    end.synchronize()
    if enqueue_ms > before.elapsed_time(after_spin):
        print(f"WARN enqueueing took {enqueue_ms:.1f} ms, longer than the spin: GPU us include host gaps")
    return after_spin.elapsed_time(end) * 1e3 / GPU_CALLS


def outputs(fn, make: Callable[[], Call]) -> list[torch.Tensor]:
    """What one call on fresh inputs produces: returned tensors, then every tensor argument (in-place ops write
    those; a view keeps its layout, which a clone would not)."""
    args, kwargs = make()
    result = fn(*args, **kwargs)
    returned = result if isinstance(result, (tuple, list)) else () if result is None else (result,)
    return list(returned) + [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]


def original_of(entry) -> tuple[str, object]:
    target = entry.targets[0]
    try:
        return str(target), resolve(target)
    except Exception as exc:  # ImportError from a missing FA3, AstraError, ...
        if entry.op not in STAND_INS:
            raise
        module, attr = STAND_INS[entry.op]
        print(f"note: {target} unavailable ({str(exc).strip().splitlines()[0][:100]}); timing {module}:{attr}")
        return f"{module}:{attr}", getattr(import_module(module), attr)


def assert_outputs_close(spec, got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    """Tensor by tensor, each by its own dtype's tolerance: the spec's for T and fixed float dtypes (fp32
    scales), one fp8 step for fp8 outputs (compared as fp64: torch compares fp8 only bit for bit), exact else."""
    assert len(got) == len(want), f"{len(got)} outputs, the original gave {len(want)}"
    for a, b in zip(got, want):
        name = str(b.dtype).removeprefix("torch.")
        if name in FP8_TOLERANCE:
            atol, rtol = FP8_TOLERANCE[name]
            a, b = a.double(), b.double()
        else:
            tol = spec.tolerance.get(DTYPE if b.dtype == getattr(torch, DTYPE) else name)
            atol, rtol = (tol.atol, tol.rtol) if tol else (0.0, 0.0)
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


def bench(entry, op, patched, original, shape: tuple, argc: int) -> tuple[dict | None, list[str]]:
    """One (op, shape): check once, then time both sides. The measurements (None if the check failed), errors."""
    make = BUILDERS.get(entry.op, spec_call)(entry.spec, shape, argc)
    kernel0, fallback0, errors = op.stats.total_kernel_calls(), op.stats.fallbacks, []
    deferred0, fast0 = op.stats.total_deferred(), native_calls(op)
    try:
        assert_outputs_close(entry.spec, outputs(patched, make), outputs(original, make))
    except AssertionError as exc:
        return None, [f"patched != original: {' '.join(str(exc).split())[:300]}"]
    deferring = op.stats.total_deferred() > deferred0
    if op.stats.total_kernel_calls() == kernel0 and not deferring:
        errors.append("the patched op did not launch our kernel")
    if deferring and op.stats.total_kernel_calls() != kernel0:
        errors.append("a deferred shape launched our kernel")
    sides = {"original": (original, make()), "patched": (patched, make())}  # own buffers: in-place ops
    for fn, args in sides.values():
        wall_us(fn, args, WARMUP)
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(REPS):  # interleaved, so drift (clocks, other tenants) hits both sides alike
        for side, (fn, args) in sides.items():
            times[side].append(wall_us(fn, args))
    a, b = statistics.median(times["original"]), statistics.median(times["patched"])
    gpu = {side: statistics.median([gpu_us(fn, args) for _ in range(GPU_REPS)]) for side, (fn, args) in sides.items()}
    fallbacks = op.stats.fallbacks - fallback0
    if fallbacks:
        errors.append(f"{fallbacks} calls fell back to the original")
    return {"original_us": a, "patched_us": b, "ratio": b / a, "original_gpu_us": gpu["original"],
            "patched_gpu_us": gpu["patched"], "fallbacks": fallbacks, "deferred": op.stats.total_deferred() - deferred0,
            "path": "c++" if native_calls(op) > fast0 else "python"}, errors


def native_calls(op) -> int:
    """Calls the C++ fast path served, launching our kernel or deferring to the original."""
    return op._fast.calls + op._fast.deferred if op._fast is not None else 0


def markdown(rows: list[Row], meta: dict) -> str:
    title = (f"Per-call cost, eager with Python dispatch, {DTYPE}: median of {REPS} x {CALLS} back-to-back calls; "
             f"GPU us: {GPU_CALLS} calls queued behind a spin kernel. {meta['gpu']}, torch {meta['torch']}, "
             f"sglang {meta['sglang']}, {meta['date']}.")
    head = "| op | shape | original | original us | patched us | patched/original | GPU us orig | GPU us patched |"
    lines = [title, "", head + " fallbacks | patched path |", "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r.op} | {'x'.join(map(str, r.shape))} | {r.original} | {r.original_us:.2f} | {r.patched_us:.2f} "
              f"| {r.ratio:.3f} | {r.original_gpu_us:.2f} | {r.patched_gpu_us:.2f} | {r.fallbacks} "
              f"| {r.path}{' (deferred to the original)' if r.deferred else ''} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(outdir: Path, token_counts: tuple[int, ...] = TOKENS, patches: Path | None = Path("patches"),
         ops: list[str] | None = None) -> int:
    """Times every enabled patch of `patches` (None: the set `launch` serves), or those of `ops`; writes
    OUTDIR/per_call.{jsonl,md}. 1 where a check failed or a call fell back to the original."""
    if not torch.cuda.is_available():
        raise AstraError("per-call timing needs a CUDA GPU (it calls SGLang's op and the patched one eagerly)")
    outdir.mkdir(parents=True, exist_ok=True)
    meta = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "sglang": metadata.version("sglang")}
    roots = PatchStore(patches).roots
    runtime = Runtime(RuntimeConfig(tuple(roots) if len(roots) > 1 else roots[0], verify_rate=0.0, stats_dir=None,
                                    mechanism="direct"))
    rows, failed = [], 0
    for entry in runtime.entries:
        if ops is not None and entry.op not in ops:
            continue
        if entry.op not in CALLS_AS:
            print(f"SKIP {entry.op}: its SGLang call and width are not in CALLS_AS")
            continue
        argc, width = CALLS_AS[entry.op]
        name, original = original_of(entry)
        op = runtime.op_for(entry, original)  # the replacement, with the original's calling convention
        patched = op.fn
        if entry.op in CALL_KWARGS:  # SGLang's keywords, on both sides
            kwargs = CALL_KWARGS[entry.op]
            patched, original = functools.partial(op.fn, **kwargs), functools.partial(original, **kwargs)
            name += "(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
        for tokens, width in [(t, w) for w in (width, *MORE_WIDTHS.get(entry.op, ())) for t in token_counts]:
            shape = (tokens, *width)
            label = f"{entry.op} {'x'.join(map(str, shape))}"
            measured, errors = bench(entry, op, patched, original, shape, argc)
            for error in errors:
                print(f"ERROR {label}: {error}")
            failed += bool(errors)
            if measured:
                print(f"{label}: original {measured['original_us']:.2f} us, patched {measured['patched_us']:.2f} us")
                rows.append(Row(op=entry.op, shape=list(shape), dtype=DTYPE, original=name, **measured, **meta))
    if ops is not None and not rows and not failed:
        raise AstraError(f"no enabled patch of {', '.join(ops)} in {' + '.join(map(str, roots))} to time")
    with open(outdir / "per_call.jsonl", "w") as f:
        f.writelines(json.dumps(asdict(r)) + "\n" for r in rows)
    table = markdown(rows, meta)
    (outdir / "per_call.md").write_text(table)
    print(table, end="")
    return 1 if failed else 0
