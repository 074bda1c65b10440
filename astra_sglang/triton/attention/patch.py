"""Writing a launch patch (kind "triton-launch") from an attention tuning run, and the evaluations that
re-check one.

`<patches>/<kernel>/manifest.json` holds one table per attention shape, GPU and Triton version: every bucket
key measured with its config, SGLang's own pick ("") where nothing beat it. Decode buckets (batch, kv length)
collapse to batch sizes (a CUDA graph fixes the batch size at capture, not the kv length), extend buckets to
extend lengths (the prefix length is on the GPU at launch time): the tuner chose one config per such key, on all
of its buckets (optimize/tuner/bucket.py: BucketTuner.chosen).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.patchset.manifest import LaunchTable, MeasuredShape, PatchManifest, Provenance
from astra_sglang.triton.attention.op import PREFIX, table_name
from astra_sglang.triton.attention.space import AttnConfig
from astra_sglang.triton.attention.targets import target
from astra_sglang.triton.results import TuneResult

KIND = "triton-launch"
OP = "py:astra_sglang.triton.attention.op:"


def collapse(result: TuneResult) -> dict[int, str]:
    """Bucket results -> {first size: config code or ""}: a first size keeps a tuned config only where all its
    buckets chose that one config (the tuner gives a key one config; anything else keeps SGLang's pick)."""
    codes: dict[int, set[str]] = {}
    for b in result.buckets:
        codes.setdefault(b.bucket[0], set()).add(b.chosen if b.verdict == "tuned" else "")
    return {k: next(iter(v)) if len(v) == 1 else "" for k, v in sorted(codes.items())}


def write_launch_patch(patches_dir: Path, result: TuneResult, run_id: str = "") -> Path:
    kernel, shape = result.kernel, result.shape
    folder = Path(patches_dir) / kernel
    folder.mkdir(parents=True, exist_ok=True)
    configs = collapse(result)
    table = LaunchTable(kernel=kernel, heads=int(shape["heads"]), kv_heads=int(shape["kv_heads"]),
                        head_dim=int(shape["head_dim"]), dtype=str(shape["dtype"]), device=result.gpu,
                        triton=result.triton, by="batch" if kernel == "decode_attention" else "extend",
                        configs=configs, max_key=max(configs))
    measured = [MeasuredShape(shape=(*b.bucket, table.heads, table.kv_heads, table.head_dim), dtype=table.dtype,
                              candidate_us=b.final_us, baseline_us=b.pick_us, speedup=b.final_speedup)
                for b in result.buckets if b.verdict == "tuned" and b.final_us and b.pick_us and b.final_speedup]
    manifest = PatchManifest.load_of_kind(folder, KIND, "launch configs")
    t = target(kernel)
    if manifest is None:
        manifest = PatchManifest(op=kernel, kind=KIND, kernel="", dtypes=[table.dtype],
                                 targets=[f"{t.module}:{t.kernel}"], provenance=Provenance(
                                     method="tuner", run_id=run_id, date=dt.date.today().isoformat(), gpu=result.gpu,
                                     started_from=f"SGLang {result.sglang}'s own launch config",
                                     notes=f"tuned launch configs for SGLang's {t.kernel} (astra-sglang tune {kernel})"),
                                 baseline=f"SGLang's own launch config ({t.launcher})")
    same = (table.heads, table.kv_heads, table.head_dim, table.dtype, table.device, table.triton)
    keep = [x for x in manifest.launches if (x.heads, x.kv_heads, x.head_dim, x.dtype, x.device, x.triton) != same]
    shapes = {(tuple(m.shape), m.dtype) for m in measured}
    old = [m for m in manifest.measured if (tuple(m.shape), m.dtype) not in shapes]
    manifest = manifest.model_copy(update={"launches": [*keep, table], "measured": [*old, *measured],
                                           "dtypes": sorted({*manifest.dtypes, table.dtype})})
    manifest.save(folder)
    return folder


def verify_requests(manifest: PatchManifest) -> list[EvalRequest]:
    """One evaluation per table: its tuned configs at the shapes the manifest measured, against SGLang's pick."""
    out = []
    for t in manifest.launches:
        shapes = [tuple(m.shape) for m in manifest.measured
                  if tuple(m.shape[2:]) == (t.heads, t.kv_heads, t.head_dim) and m.dtype == t.dtype]
        table = {}
        for shape in shapes:
            code = t.configs.get(shape[0], "")
            if code:
                table[shape[0], shape[1]] = AttnConfig.from_code(t.kernel, code)
        if not table:
            continue
        out.append(EvalRequest(
            kernel=t.kernel, candidate=KernelSource(path=OP + table_name(t.kernel, table), label=f"patch:{t.kernel}"),
            baseline=KernelSource(path=f"{OP}{PREFIX[t.kernel]}_sglang_pick", label="sglang"),
            shapes=[(*b, t.heads, t.kv_heads, t.head_dim) for b in sorted(table)], dtypes=[t.dtype]))
    return out
