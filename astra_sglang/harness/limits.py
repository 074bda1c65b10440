"""Every threshold the evaluator judges a candidate by, in one place, each with the reason for its value.

A candidate is rejected (never reported as a speedup) when it breaks one of them; `docs/evaluator.md` lists
what each check catches and what none of them can.
"""
from __future__ import annotations

# -- precision against the original ------------------------------------------------------------------------
PRECISION_MULTIPLE = {"bfloat16": 1.5, "float16": 1.5, "float32": 4.0, "float8_e4m3fn": 1.5, "float8_e5m2": 1.5}
"""The candidate's RMS error to the fp64 reference, in units of the spec tolerance, may be at most this many
times the original op's on the same inputs; keyed by the outputs' stored dtype, each dtype judged on its own
(a bf16 op's fp32 outputs, such as topk_softmax's router weights, are fp32 here). In 16-bit outputs both errors are dominated by the final
rounding, so an honest kernel lands near 1.0x; a norm that accumulates in bf16 lands near 2x while still
inside the absolute tolerance. fp32 outputs carry the summation order's error, which differs between honest
reductions (warp tree vs sequential), hence the wider multiple."""
PRECISION_MULTIPLE_DEFAULT = 4.0
"""Ops whose T is an integer type: their float outputs (if any) carry fp32-like summation noise."""
FP8_TOLERANCE = {"float8_e4m3fn": (2.0 ** -9, 0.125), "float8_e5m2": (2.0 ** -16, 0.25)}
"""(atol, rtol) for an fp8 output a spec gives no tolerance for, compared after upcasting to fp64. One unit in
the last place of e4m3 is at most 2^-3 of the value (3 mantissa bits), of e5m2 2^-2: a kernel that rounds the
same fp32 value differently (another order of the scale multiply) lands one step away, never more. Near zero
the steps are the subnormals' (2^-9 for e4m3, 2^-16 for e5m2): atol is one of them."""
PRECISION_FLOOR = 1e-3
"""Errors below this fraction of the tolerance are equal for the comparison (exact results, fp32 noise)."""
PRECISION_MIN_ELEMENTS = 1024
"""The ratio is judged over at least this many compared elements: over 16 (fused_add_rmsnorm at 2x1, four
trials) the shipped kernel's RMS error came out 1.51x the reference kernel's in fp16 on an H100
(2026-11-24), a sampling effect; over 1024 elements the RMS of a rounding error is known to ~2%. Smaller
shapes are judged by the absolute tolerance alone."""

# -- physics -----------------------------------------------------------------------------------------------
ROOFLINE_MARGIN = 1.25
"""A time that implies more than this multiple of the SM-copy roofline measured in the same run is a
measurement failure. The copy probe moves as many bytes as it reads; a read-heavy kernel legitimately
exceeds it (SGLang's silu_and_mul at 8192x14336 bf16 reached 110% of it on an H200, 2026-11-21)."""
COMPUTE_MARGIN = 1.25
"""A time that implies more than this multiple of the dense bf16 matmul rate measured in the same run (cuBLAS,
8192^3, `timing.Ceilings.measure_matmul`) is a measurement failure, for ops whose cost model counts FLOPs.
cuBLAS runs that GEMM at 70-80% of an H100's dense peak; a kernel doing the same arithmetic cannot run much
faster, and 1.25x leaves room for a probe that ran at a lower clock than the kernel."""
FLOOR_MARGIN = 0.9
"""A per-launch time below this multiple of the empty kernel's, measured in the same run and the same way
(CUDA-graph replay), is a measurement failure: no kernel launch is cheaper than an empty one."""

# -- scoring -----------------------------------------------------------------------------------------------
REGRESSION_FLOOR = 0.95
"""A winner may be at most 5% slower than the original at any shape it serves (the rest it must decline,
so that the original serves them). Wider than the timing noise of one kernel against itself (p10-p90 of
per-replay ratios within 2-3%) so that noise alone does not disqualify an honest kernel."""

# -- memory the timing may use -----------------------------------------------------------------------------
TIMING_MEMORY_FRACTION = 0.25
"""Of the free device memory, at most, for the argument sets of one shape (one bound of harness/budget.py's
grant, for memory other programs hold on the GPU)."""
TIMING_MEMORY_CAP = 4 << 30
"""At most this many bytes: 2x the bytes a roofline-bound kernel moves in one 300 us replay on an H200
(4.3 TB/s), so that every launch of a replay gets its own arguments at any shape."""
GPU_MEMORY_SHARE = 0.5
"""Of a GPU's memory, for the argument sets of every evaluation running on it together (harness/budget.py's
ledger shares it out): nine evaluations sizing their sets from the free memory each, as if alone, ran one GPU
out of memory (H200, 2026-11-27). Half leaves room for the CUDA contexts, the builds' and probes' buffers and
an SGLang server on the same GPU."""

# -- guard regions -----------------------------------------------------------------------------------------
GUARD_BYTES = 4096
"""Canary bytes before and after every tensor (at least one row of it): a write past either end lands
there. The tensor starts 16 bytes past a 256-byte boundary (see inputs.ALIGN_SHIFT)."""
CANARY = 0xA5
"""The canary byte: 0xA5A5 is -2.9e-16 in bf16 and 0xA5A5A5A5 the same in fp32, values no kernel writes."""
