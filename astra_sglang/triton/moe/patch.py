"""Writing a config patch (kind "triton-config") from a tuning run, and the evaluations that re-check one.

The folder `<patches>/fused_moe/` holds `manifest.json` and the tuned files under `configs/triton_<version>/`,
named as SGLang names them. Tuning another expert shape (another model, GPU or Triton) adds its file to the
same folder; the manifest lists every file with the batch sizes it tunes and the speedups measured there.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.patchset.manifest import ConfigFile, MeasuredShape, PatchManifest, Provenance
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.op import table_name
from astra_sglang.triton.moe.shapes import QUANTS, MoeShape
from astra_sglang.triton.moe.space import MoeConfig
from astra_sglang.triton.results import TuneResult

OP = "fused_moe"
KIND = "triton-config"


def write_config_patch(patches_dir: Path, result: TuneResult, table: dict[int, MoeConfig], device: str,
                       run_id: str = "") -> Path:
    """Add (or replace) the file of `result`'s expert shape in `<patches_dir>/fused_moe/`; returns the folder.
    `table`: every key the file holds (the tuned batch sizes and SGLang's own picks around them)."""
    shape = result.shape
    quant = shape.get("quant") or None  # fp8_w8a8: SGLang's file name says so (",dtype=fp8_w8a8"), as the entry
    name = moe_configs.file_name(int(shape["experts"]), int(shape["inter"]), device, quant)
    rel = f"configs/{moe_configs.version_dir(result.triton)}/{name}"
    folder = Path(patches_dir) / OP
    moe_configs.write(folder / rel, table)
    entry = ConfigFile(path=rel, experts=int(shape["experts"]), inter=int(shape["inter"]), hidden=int(shape["hidden"]),
                       topk=int(shape["topk"]), dtype=str(quant or shape["dtype"]), device=device.replace(" ", "_"),
                       triton=result.triton, tuned=[b.tokens for b in result.buckets if b.verdict == "tuned"])
    measured = [MeasuredShape(shape=(b.tokens, entry.experts, entry.inter, entry.hidden, entry.topk), dtype=entry.dtype,
                              candidate_us=b.final_us, baseline_us=b.pick_us, speedup=b.final_speedup)
                for b in result.buckets if b.verdict == "tuned" and b.final_us and b.pick_us and b.final_speedup]
    calls = str(shape["dtype"])  # the calls' (activations') dtype, an fp8_w8a8 file's too: what the patch serves
    manifest = PatchManifest.load_of_kind(folder, KIND, "tuned configs")
    if manifest is None:
        manifest = PatchManifest(op=OP, kind=KIND, kernel="", dtypes=[calls], provenance=Provenance(
            method="tuner", run_id=run_id, date=dt.date.today().isoformat(), gpu=result.gpu,
            started_from=f"SGLang {result.sglang}'s own config choice",
            notes="tuned Triton configs for SGLang's fused_moe_kernel (astra-sglang tune fused_moe)"),
            baseline="SGLang's own pick (its config file for the GPU and expert shape, else its default config)")
    keep = [c for c in manifest.configs if c.path != rel]
    shapes = {(tuple(m.shape[1:]), m.dtype) for m in measured}
    old = [m for m in manifest.measured if (tuple(m.shape[1:]), m.dtype) not in shapes]
    manifest = manifest.model_copy(update={
        "configs": [*keep, entry], "measured": [*old, *measured],
        "dtypes": sorted({*manifest.dtypes, calls})})
    manifest.save(folder)
    return folder


def verify_requests(folder: Path, manifest: PatchManifest, shapes: list[int] | None = None) -> list[EvalRequest]:
    """One evaluation per config file: its table (nearest key, as SGLang reads it) against SGLang's own pick, at
    the batch sizes it tunes (or `shapes`), with every check."""
    out = []
    for config in manifest.configs:
        table = {m: MoeConfig.from_sglang(c) for m, c in moe_configs.read(folder / config.path).items()}
        tokens = shapes or config.tuned or sorted(table)
        quant = config.dtype if config.dtype in QUANTS else ""  # an fp8_w8a8 file: spec fused_moe_fp8, bf16 calls
        shape = MoeShape(config.experts, config.inter, config.hidden, config.topk, **({"quant": quant} if quant else
                                                                                     {"dtype": config.dtype}))
        out.append(EvalRequest(
            kernel=shape.spec, candidate=KernelSource(path=shape.op(table_name(table)),
                                                      label=f"patch:{Path(config.path).name}"),
            baseline=KernelSource(path=shape.op("sglang_pick"), label="sglang"),
            shapes=[shape.shape(t) for t in tokens], dtypes=[shape.dtype]))
    return out
