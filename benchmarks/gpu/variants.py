"""Variants of a shipped kernel side by side, each against SGLang's own op, in one GPU call.

A variant is the patch's file (or an earlier copy of it) built with other -D defines; the defaults of the
shipped dispatch are chosen from these tables (benchmarks/notes/kernels.md says which run chose what).
Usage (GPU machine, repo root, after `source benchmarks/gpu/setup.sh`):
    python3 benchmarks/gpu/variants.py OUTDIR PLAN [PLAN...]
Plans named *-hot time with L2 hot (EvalRequest.l2). Writes OUTDIR/variants.jsonl (harness rows, labelled) and prints one line per shape and a summary per
variant: geomean speedup over its shapes and the worst shape.
"""
from __future__ import annotations

import math
import os
import re
import sys
import time
from pathlib import Path

from astra_sglang.harness.isolate import evaluate, prebuild
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.harness.report import write_jsonl
from astra_sglang.ops.adapters import KERNEL_BASELINES
from astra_sglang.specs.registry import get_spec, resolve_shapes

SGLANG = KERNEL_BASELINES
NORM_SHAPES = [(128, 4096), (256, 4096), (1024, 4096), (2048, 8192), (128, 11008), (256, 13824), (512, 14336),
               (1024, 8192), (1, 4096), (16, 4096), (64, 8192), (8, 5120), (8192, 4096), (5, 4100), (17, 5120),
               (4096, 14336)]
SILU_SHAPES = [(16, 4096), (32, 5120), (32, 8192), (16, 12288), (64, 8192), (1, 14336), (64, 14336),
               (512, 14336), (8192, 14336), (48, 6144), (100, 9728), (333, 12288), (4000, 2816), (5, 4100),
               (8, 28672), (128, 18944), (2048, 13824)]


WIDE_SHAPES = [(128, 11008), (256, 13824), (512, 14336), (4096, 14336), (64, 13824), (7, 8200), (333, 16384)]


def wide_variants(op: str) -> list[tuple[str, str, dict]]:
    """Rows wider than the register path: the cached-row path's step width, threads and register cap."""
    path = f"patches/{op}/kernel.cu"
    return [("reread", path, {"ASTRA_ROW_CACHE": "0"}),  # the loop path of the kernels before this session
            ("u1t1024", path, {}),
            ("u1t512", path, {"ASTRA_WIDE_THREADS": "512"}),
            ("u2t512b3", path, {"ASTRA_CACHE_U": "2", "ASTRA_WIDE_THREADS": "512", "ASTRA_CACHE_MINB(t)": "3"}),
            ("u2t1024b1", path, {"ASTRA_CACHE_U": "2", "ASTRA_CACHE_MINB(t)": "1"})]


GENERATED: dict[str, tuple[int, int]] = {}  # work/cfg/*.cu -> silu (THREADS, VPT), written by main()


def silu_config(threads: int, vpt: int) -> str:
    """Path of the shipped silu file with one fixed configuration in place of its dispatch (written later:
    importing this module does no I/O)."""
    path = f"work/cfg/silu_{threads}_{vpt}.cu"
    GENERATED[path] = (threads, vpt)
    return path


def write_generated() -> None:
    from astra_sglang.tuner.knobs import strip_dispatch

    os.makedirs("work/cfg", exist_ok=True)
    with open("patches/silu_and_mul/kernel.cu") as fh:
        body = strip_dispatch(fh.read())
    for path, (threads, vpt) in GENERATED.items():
        with open(path, "w") as fh:
            fh.write("#define ASTRA_NO_DEFAULT_ENTRY 1\n" + body + f"\nASTRA_ENTRY {{ return astra_launch_cfg<{threads}, "
                     f"{vpt}, 1>(tensors, num_tensors, scalars, num_scalars, stream); }}\n")
    for path, (src, knobs, probe) in CFG_FILES.items():
        with open(src) as fh:
            body = fh.read()
        if knobs:
            body = ("#define ASTRA_NO_DEFAULT_ENTRY 1\n" + strip_dispatch(body)
                    + "\nASTRA_ENTRY { return astra_launch_cfg<" + ", ".join(map(str, knobs))
                    + ">(tensors, num_tensors, scalars, num_scalars, stream); }\n")
        with open(path, "w") as fh:
            fh.write(barrier_probe(body) if probe else body)


CFG_FILES: dict[str, tuple[str, tuple[int, ...], bool]] = {}  # work/cfg/*.cu -> (source, knobs, probe), by main()


def op_config(op: str, *knobs: int, src: str | None = None, probe: bool = False) -> str:
    """The shipped patch of any op (or `src`) with one fixed knob configuration (its astra_launch_cfg parameters;
    none: its own dispatch); `probe`: with its row reduction cut to one barrier (`barrier_probe`)."""
    path = (f"work/cfg/{op}_" + "_".join(map(str, knobs)) + ("" if src is None else "_" + Path(src).stem)
            + ("_probe" if probe else "") + ".cu")
    CFG_FILES[path] = (src or f"patches/{op}/kernel.cu", knobs, probe)
    return path


# The row-dependency probe (session 7): every output element of a norm waits for its whole row's loads. The
# probe keeps a norm kernel's loads, stores, launch shape and math but replaces its row reduction (warp
# shuffles, shared-memory exchange, barrier) by one barrier-reduction (BAR.RED.POPC), whose predicate depends on
# each thread's loaded values: the least a kernel holding a row in one block must wait for. Its output is not
# a norm (never checked); its time bounds what any reduction could reach in that kernel's shape.
PROBE_HEAD = """// astra-sglang row-dependency probe (benchmarks/gpu/variants.py): not a norm, timing only.
__device__ __forceinline__ float probe_barrier(float v) { return (float)__syncthreads_count(v != 0.0f); }
"""
ROW_SUM_CALL = re.compile(r"row_sum<[^>]*>\(ss, red\)")


def barrier_probe(source: str) -> str:
    body, n = ROW_SUM_CALL.subn("probe_barrier(ss)", source)
    if n == 0:  # the kernel no longer reduces through row_sum(ss, red): the probe would silently be the kernel
        raise SystemExit("barrier_probe: no row_sum<...>(ss, red) call to replace")
    return PROBE_HEAD + body


def norm_config(op: str, threads: int, vpt: int, rows: int, wide: int, fit: int) -> str:
    """The shipped norm with one fixed knob configuration (THREADS, VPT, ROWS, PDL 1, WIDE, FIT)."""
    return op_config(op, threads, vpt, rows, 1, wide, fit)


def norm_variants(op: str, cfgs, probe: bool = False) -> list[tuple[str, str]]:
    """(label, source): the shipped norm's dispatch and fixed (THREADS, VPT, ROWS) configurations (WIDE 1, FIT 1);
    with `probe`, each with its row reduction cut to one barrier, labelled "probe-*"."""
    pre = "probe-" if probe else ""
    return ([(pre + "shipped", op_config(op, probe=True) if probe else f"patches/{op}/kernel.cu")]
            + [(f"{pre}{t}x{v}r{r}", op_config(op, t, v, r, 1, 1, 1, probe=probe)) for t, v, r in cfgs])


# Rows of 448-1024 vectors (d 3584-8192, the models' hidden sizes) and the wide rows left slower than SGLang.
FIT_SHAPES = [(512, 5120), (2048, 5120), (8192, 5120), (16384, 5120), (2048, 3584), (16384, 3584), (640, 6144),
              (2048, 8192), (16384, 8192), (128, 4096), (256, 13824), (512, 14336), (128, 11008), (4096, 14336)]
FIT_CFGS = [(1024, 1), (512, 2), (256, 4), (768, 3), (1024, 2), (768, 2)]  # (THREADS, VPT), ROWS 1, WIDE 1, FIT 1


def fit_variants(op: str) -> list[tuple[str, str, dict]]:
    path = f"patches/{op}/kernel.cu"
    return ([("shipped", path, {}), ("fit", path, {"ASTRA_DEFAULT_FIT": "1"})]
            + [(f"{t}x{v}f", norm_config(op, t, v, 1, 1, 1), {}) for t, v in FIT_CFGS])


SILU_HOT_SHAPES = [(1, 14336), (16, 4096), (32, 8192), (64, 8192), (64, 14336), (128, 14336), (128, 11008),
                   (512, 14336), (2048, 14336), (8, 28672), (256, 18944)]
SILU_CFG_SHAPES = SILU_SHAPES + [(1, 11008), (8, 18944), (32, 28672), (128, 11008), (128, 28672), (512, 18944),
                                 (2048, 28672), (8192, 11008)]
def _unique(*lists):
    return list(dict.fromkeys(tuple(s) for lst in lists for s in lst))


ELEM_SHAPES = {op: _unique(resolve_shapes(get_spec(op), "paper"), resolve_shapes(get_spec(op), "models"), extra)
               for op, extra in (("rmsnorm", NORM_SHAPES + FIT_SHAPES), ("fused_add_rmsnorm", NORM_SHAPES + FIT_SHAPES),
                                 ("silu_and_mul", SILU_SHAPES), ("merge_attn_states_lse", []))}
ELEM_CFG_SHAPES = [(1024, 8192), (2048, 8192), (8192, 8192), (16384, 8192), (8192, 4096), (16384, 5120),
                   (128, 11008), (256, 13824), (512, 14336), (4096, 14336), (256, 11008), (1024, 13824)]
ELEM_CFGS = [(256, 4, 1), (512, 2, 1), (1024, 1, 1), (768, 2, 1), (512, 1, 1), (1024, 1, 2), (512, 4, 1), (1024, 2, 1)]
OPEN_NORM_SHAPES = [(128, 4096), (256, 4096), (1024, 4096), (128, 11008), (256, 13824), (512, 14336), (1024, 8192),
                    (512, 4096), (2048, 4096)]
OPEN_NORM_CFGS = [(128, 4, 1), (256, 2, 1), (512, 1, 1), (128, 4, 2), (256, 2, 2), (256, 4, 1), (512, 2, 1),
                  (512, 4, 1), (1024, 2, 1)]  # (THREADS, VPT, ROWS); WIDE 1, FIT 1
TIE_SHAPES = _unique(resolve_shapes(get_spec("rmsnorm"), "paper+models"), OPEN_NORM_SHAPES,
                     [(16384, 8192), (8192, 4096), (4096, 8192), (64, 4096), (16, 4096), (1, 4096), (200, 6000)])
TIE_PROBE_CFGS = [(256, 2, 1), (256, 4, 1), (512, 1, 1), (512, 4, 1), (1024, 2, 1)]
MODELS_PROBE_CFGS = [(256, 2, 1), (512, 1, 1), (512, 4, 1), (1024, 2, 1)]
MODELS_CFG = [(1024, 2, 1), (512, 4, 1), (1024, 1, 1)]  # fitted: 320 x 2, 160 x 4, 640 x 1 at d = 5120
NORMS = ("rmsnorm", "fused_add_rmsnorm")
LDS_SHAPES = _unique(resolve_shapes(get_spec("rmsnorm"), "paper"),
                     [(1, 4096), (8, 4096), (32, 4096), (64, 4096), (128, 3584), (128, 5120), (128, 8192), (512, 4096),
                      (512, 3584), (200, 6000), (2048, 4096), (8192, 4096)])
# Session 8: the merge shapes left "open" in bounds-models.md (128 tokens: one partial wave of 3-8 blocks per SM)
# and the silu shapes of 128-512 rows where SGLang's kernel ran 0.1-1.3% faster (session 7, call 3).
MERGE_128 = [(128, 32, 128), (128, 40, 128), (128, 64, 128), (128, 28, 128), (128, 32, 256)]
MERGE_128_CFGS = [(t, v, 1, o) for o in (1, 2) for t in (64, 128, 256) for v in (1, 2)]  # THREADS, VPT, PDL, ORDER
SILU_FLAT_SHAPES = _unique(resolve_shapes(get_spec("silu_and_mul"), "paper"),
                           [(r, d) for r in (128, 512) for d in (11008, 13824, 14336, 18944, 28672, 29568)],
                           [(1, 14336), (8, 28672), (32, 18944), (2048, 11008), (2048, 28672), (4000, 2816),
                            (5, 4100), (333, 12288)])
# Session 8's silu file with the ASTRA_SILU_FLAT knob: `git show 7d29b95:patches/silu_and_mul/kernel.cu`.
SILU_FLAT = "work/old/silu-flat.cu"
MERGE_X = "benchmarks/results/2026-11-21-h200-s6/sources/merge-x.cu"  # session 6's merge-early / merge-x file
# Either side of the ORDER 2 band (lanes in (2^15, 2^17]; 16 lanes per pair at head_dim 128, 32 at 256) and
# of ORDER 0 (> 2^24 elements).
MERGE_BAND = [(32, 64, 128), (48, 32, 128), (64, 32, 128), (96, 32, 128), (64, 40, 128), (192, 40, 128),
              (256, 32, 128), (320, 32, 128), (384, 32, 128), (64, 32, 256), (128, 32, 256), (256, 32, 256),
              (4096, 32, 128), (4096, 40, 128), (2048, 64, 128), (4096, 64, 128)]
# Session 9: sizes either side of the manifests' `defer` thresholds (silu 12 MB, merges 150 MB), where the
# patch hands calls to SGLang's kernel; the model sets have no shape between 11 and 14.5 MB (silu) or between
# 102 and 179 MB (merge).
DEFER_BAND = {"silu_and_mul": [(96, 14336), (128, 14336), (160, 14336), (192, 14336), (256, 14336), (128, 18944),
                               (160, 11008), (192, 11008), (256, 11008), (96, 18944)],
              "merge_attn_states_lse": [(4096, 32, 128), (5120, 32, 128), (6144, 32, 128), (4096, 40, 128),
                                        (5120, 40, 128), (6144, 28, 128), (3072, 64, 128), (4096, 64, 128)],
              "merge_state": [(2048, 32, 128), (4096, 32, 128), (6144, 32, 128), (8192, 32, 128)]}
CHECKED = ("u1t1024",)  # the new path's default: full checks (edge cases included) besides the timing
PLANS = {  # plan -> [(op, label, source, defines, shapes, dtypes, check)]
    "wide": [(op, label, src, defs, WIDE_SHAPES, ["bfloat16"], label in CHECKED)
             for op in ("fused_add_rmsnorm", "rmsnorm") for label, src, defs in wide_variants(op)],
    "wide-fp16": [(op, label, src, defs, WIDE_SHAPES[:4], ["float16"], False)
                  for op in ("fused_add_rmsnorm", "rmsnorm") for label, src, defs in wide_variants(op)],
    "silu-cfg": [("silu_and_mul", f"{t},{v}", silu_config(t, v), {}, SILU_CFG_SHAPES, ["bfloat16"], False)
                 for t, v in ((64, 1), (128, 1), (256, 1), (512, 1), (256, 2), (512, 2))],
    "fit": [(op, label, src, defs, FIT_SHAPES, ["bfloat16"], label == "fit")
            for op in ("fused_add_rmsnorm", "rmsnorm") for label, src, defs in fit_variants(op)],
    # L2 hot (one input set replayed), as in serving where the producer kernel just wrote the input:
    "silu-hot": [("silu_and_mul", f"{t},1", silu_config(t, 1), {}, SILU_HOT_SHAPES, ["bfloat16"], False)
                 for t in (64, 128, 256, 512)]
                + [("silu_and_mul", "shipped", "patches/silu_and_mul/kernel.cu", {}, SILU_HOT_SHAPES, ["bfloat16"], False)],
    "shipped-hot": [(op, "shipped", f"patches/{op}/kernel.cu", {}, resolve_shapes(get_spec(op), "paper"), ["bfloat16"],
                     False) for op in ("silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse")],
    "models-norms": [(op, "shipped", f"patches/{op}/kernel.cu", {}, None, ["bfloat16"], False)
                     for op in ("fused_add_rmsnorm", "rmsnorm")],
    "models": [(op, "shipped", f"patches/{op}/kernel.cu", {}, None, ["bfloat16"], False)
               for op in ("silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse")],
    # Session 5: 2-byte elements read through their 32-bit words (elem_f), 1/d precomputed: the session-4
    # files (work/old/<op>.cu, `git show cacc5fc:patches/<op>/kernel.cu`) against the new ones, and the
    # norms' configurations again where the register counts moved (bf16 256 x 4: 94 -> 64 registers).
    "elem": [(op, label, src, {}, ELEM_SHAPES[op], ["bfloat16"], label == "new")
             for op in ("rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "merge_attn_states_lse")
             for label, src in (("old", f"work/old/{op}.cu"), ("new", f"patches/{op}/kernel.cu"))],
    "elem-cfg": [(op, f"{t}x{v}w{w}", norm_config(op, t, v, 1, w, 1), {}, ELEM_CFG_SHAPES, ["bfloat16"], False)
                 for op in ("rmsnorm", "fused_add_rmsnorm") for t, v, w in ELEM_CFGS],
    # The weight loads of the register path: plain ld.global (shipped) against ld.global.nc, which ptxas sank
    # past the row barrier; the session-4 file for reference. Same flags (no checks) for all three.
    "elem2": [("rmsnorm", label, src, {}, ELEM_SHAPES["rmsnorm"], ["bfloat16"], False)
              for label, src in (("old", "work/old/rmsnorm.cu"), ("w-nc", "benchmarks/results/2026-11-21-h200-s5/sources/rmsnorm-w-nc.cu"),
                                 ("new", "patches/rmsnorm/kernel.cu"))],
    # The same build timed with and without the harness's checks before the timing in the same child
    # (kernels.sh checks, variants do not): 16384x8192 ran 145.9 us in the first, 132.1 us in the second.
    "check-effect": [("rmsnorm", f"{label}{i}", "patches/rmsnorm/kernel.cu", {}, [(16384, 8192), (8192, 8192)],
                      ["bfloat16"], label == "checked") for i in (1, 2) for label in ("checked", "unchecked")],
    "models-silu": [("silu_and_mul", "shipped", "patches/silu_and_mul/kernel.cu", {}, None, ["bfloat16"], False)],
    # merge: the value loads issued with the LSE loads instead of after the LSE math (SASS of the shipped
    # build: LDG of the LSEs -> MUFU -> LDG.128 of the values, two dependent DRAM trips per thread).
    "merge-early": [("merge_attn_states_lse", label, MERGE_X, defines,
                     _unique(resolve_shapes(get_spec("merge_attn_states_lse"), "paper+models")), ["bfloat16"],
                     label == "early") for label, defines in (("shipped", {}), ("early", {"ASTRA_MERGE_EARLY": "1"}))],
    # Session 6, after merge-early (EARLY won at 1-32 and 512-2048 tokens, lost at 128 and >= 8192 tokens):
    # which part of EARLY costs at 128 tokens (plain vs read-only early loads, LSE loads first), and 128-thread
    # blocks at the large shapes (SGLang's size).
    # Both plans build that run's file (MERGE_X), whose default and EARLY=1 builds have the SASS of the
    # session-5 file, `git show 19e5e3d:patches/merge_attn_states_lse/kernel.cu`.
    "merge-x": [("merge_attn_states_lse", label, src, defines,
                 _unique(resolve_shapes(get_spec("merge_attn_states_lse"), "paper+models")), ["bfloat16"], False)
                for label, src, defines in (
                    ("shipped", MERGE_X, {}),
                    ("early", MERGE_X, {"ASTRA_MERGE_EARLY": "1"}),
                    ("early-ro", MERGE_X, {"ASTRA_MERGE_EARLY": "1", "ASTRA_MERGE_EARLY_RO": "1"}),
                    ("early-lse1", MERGE_X, {"ASTRA_MERGE_EARLY": "1", "ASTRA_MERGE_LSE_FIRST": "1"}),
                    ("128x1", op_config("merge_attn_states_lse", 128, 1, 1, src=MERGE_X), {}),
                    ("early-128x1", op_config("merge_attn_states_lse", 128, 1, 1, src=MERGE_X),
                     {"ASTRA_MERGE_EARLY": "1"}))],
    # The shipped merge (ORDER by size, 128 threads) over paper + model shapes and shapes either side of its
    # ORDER band; each ORDER fixed on the band's shapes, to see whether the edges sit right.
    "merge-final": [("merge_attn_states_lse", "shipped", "patches/merge_attn_states_lse/kernel.cu", {},
                     _unique(resolve_shapes(get_spec("merge_attn_states_lse"), "paper+models"), MERGE_BAND),
                     ["bfloat16"], True)]
                   + [("merge_attn_states_lse", f"order{o}", op_config("merge_attn_states_lse", 128, 1, 1, o), {},
                       MERGE_BAND, ["bfloat16"], False) for o in (0, 1, 2)],
    # Session 6's open norm shapes (bounds.md: a streaming kernel of the same size reaches what 1.32x needs):
    # the shipped dispatch against other register-path shapes of the block at those sizes.
    "open-norms": [(op, label, src, {}, OPEN_NORM_SHAPES, ["bfloat16"], False)
                   for op in NORMS for label, src in norm_variants(op, OPEN_NORM_CFGS)],
    # The same kernels with their reduction cut to one barrier (barrier_probe): labels "probe-*".
    "open-probe": [(op, label, src, {}, OPEN_NORM_SHAPES, ["bfloat16"], False)
                   for op in NORMS for label, src in norm_variants(op, OPEN_NORM_CFGS, probe=True)],
    # Session 7: rmsnorm's weight loads tied into the row sum, so ptxas issues them with x's (VPT > 1 builds);
    # the file before it is work/old/rmsnorm.cu (`git show 3ad6cd4:patches/rmsnorm/kernel.cu`). "new" is the
    # shipped file: in call 2 f253450 (every VPT > 1 path tied), from call 3 on the TIE knob split by size.
    # Then the probe of the new file and of the configurations whose probes led in `open-probe`.
    "tie": [("rmsnorm", label, src, {}, TIE_SHAPES, ["bfloat16"], False)
            for label, src in (("old", "work/old/rmsnorm.cu"), ("new", "patches/rmsnorm/kernel.cu"))]
           + [("rmsnorm", label, src, {}, OPEN_NORM_SHAPES, ["bfloat16"], False)
              for label, src in norm_variants("rmsnorm", TIE_PROBE_CFGS, probe=True)],
    # Session 7, after `tie`: the fitted row sum's second stage from shared memory (row_sum LDS, <= 8 warps)
    # instead of 5 more shuffles; the file before it is work/old/rmsnorm-tie.cu (`git show 34e95bd:...`).
    "lds": [("rmsnorm", label, src, {}, LDS_SHAPES, ["bfloat16"], False)
            for label, src in (("tie", "work/old/rmsnorm-tie.cu"), ("lds", "patches/rmsnorm/kernel.cu"))],
    # Session 7, prepared for the next call: the probe over the norms' model sets (bounds-models.md has 28 norm
    # shapes "open" for want of one), the shipped dispatch and the configurations whose probes led.
    "models-probe": [(op, label, src, {}, None, ["bfloat16"], False)
                     for op in NORMS for label, src in norm_variants(op, MODELS_PROBE_CFGS, probe=True)],
    # Session 8: merge at 128 tokens over block size, vectors per lane and ORDER (the shipped dispatch: 128 x 1,
    # ORDER 2 there).
    "merge-128": [("merge_attn_states_lse", "shipped", "patches/merge_attn_states_lse/kernel.cu", {}, MERGE_128,
                   ["bfloat16"], False)]
                 + [("merge_attn_states_lse", "{}x{}o{}".format(t, v, o), op_config("merge_attn_states_lse", t, v, p, o),
                     {}, MERGE_128, ["bfloat16"], False) for t, v, p, o in MERGE_128_CFGS],
    # Session 8: silu over a 1-D grid of all vectors (ASTRA_SILU_FLAT) against the 2-D grid it ships with; the
    # flat build fully checked (edge cases included). Refuted (call 2: within 0.97-1.03 of the 2-D grid, no
    # trend), so the knob lives only in that commit's file (SILU_FLAT), whose default build is the shipped one's.
    "silu-flat": [("silu_and_mul", label, SILU_FLAT, defines, SILU_FLAT_SHAPES, ["bfloat16"],
                   label == "flat") for label, defines in (("shipped", {}), ("flat", {"ASTRA_SILU_FLAT": "1"}))],
    # Session 8, after models-probe (call 1): at d = 5120 and 8192 the probe of other block shapes beat the probe
    # of the shipped dispatch by up to 15% (rmsnorm 512x5120 1024x2r1 4.09 vs 4.83 us, fused 1x8192 512x4r1
    # 1.62 vs 1.80): those configurations as they are (no probe) over the model sets, each fully checked.
    "models-cfg": [(op, label, src, {}, None, ["bfloat16"], label != "shipped")
                   for op in NORMS for label, src in norm_variants(op, MODELS_CFG)],
    # Session 9, lds-wide (refuted; ran at commit 5dae726, the knob removed after): the fitted row sum's second
    # stage at 12-32 warps from float4 shared-memory reads and an add tree (ASTRA_LDS_WIDE) instead of one read
    # and 5 shuffles per lane: 1-38% slower at every shape it reached (every warp reads every warp sum).
    # Session 9: the shipped kernels either side of the `defer` thresholds, against the kernels the patch defers to.
    "defer-band": [(op, "shipped", f"patches/{op}/kernel.cu" if op != "merge_state" else
                    "patches/merge_attn_states_lse/kernel.cu", {"ASTRA_LSE_BASE2": "1"} if op == "merge_state" else {},
                    shapes, ["bfloat16"], False) for op, shapes in DEFER_BAND.items()],
    "silu-cfg-fp32": [("silu_and_mul", f"{t},{v}", silu_config(t, v), {}, [(64, 14336), (100, 9728), (16, 4096),
                                                                            (512, 14336), (128, 18944)],
                       ["float32"], False) for t, v in ((64, 1), (128, 1), (256, 1), (512, 1))],
}


def main(out: str, plans: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    write_generated()
    prebuild([(os.path.abspath(src), defines, None) for plan in plans for _, _, src, defines, *_ in PLANS[plan]])
    for plan in plans:
        for op, label, src, defines, shapes, dtypes, check in PLANS[plan]:
            t0 = time.time()
            shapes = shapes or resolve_shapes(get_spec(op), "models")  # None: the spec's model shape set
            req = EvalRequest(kernel=op, candidate=KernelSource(path=os.path.abspath(src), defines=defines,
                                                                label=f"{plan}:{label}"),
                              baseline=KernelSource(path=SGLANG[op]), shapes=shapes, dtypes=dtypes, check=check,
                              timeout_s=280, l2="hot" if plan.endswith("-hot") else "cold")
            res = evaluate(req)
            write_jsonl(res, f"{out}/variants.jsonl")
            speedups = []
            for r in res.shapes:
                if r.candidate and r.speedup:
                    speedups.append((r.speedup, "x".join(map(str, r.shape))))
                    print(f"VAR {plan:10s} {op:18s} {label:8s} {r.dtype[:4]} {'x'.join(map(str, r.shape)):11s} "
                          f"cand {r.candidate.median_us:8.2f} base {r.baseline.median_us:8.2f} "
                          f"x{r.speedup:6.3f} roof {r.pct_roofline or 0:5.1f}%", flush=True)
            geo = math.exp(sum(math.log(s) for s, _ in speedups) / len(speedups)) if speedups else float("nan")
            worst = min(speedups) if speedups else (float("nan"), "-")
            print(f"SUMMARY {plan:10s} {op:18s} {label:8s} ok={res.ok} geomean {geo:.3f} worst {worst[0]:.3f} "
                  f"({worst[1]}) {time.time() - t0:.0f}s {'' if res.ok else res.reason[:160]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
