"""Writing a source patch (kind "triton-source") from variants measured through the evaluator, and the
evaluations that re-check one.

`<patches>/fused_moe/` holds manifest.json and config files in SGLang's layout whose entries carry the knob keys
where a split won (knobs.Variant.file_entry); the manifest names the variant and the hash of the SGLang source it
was measured on, which the patch layer checks at every load. A folder holding a triton-config patch becomes a
triton-source one: its files stay (an entry without knob keys runs SGLang's kernel with its config).
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import EvalRequest, KernelSource
from astra_sglang.patchset.manifest import MANIFEST, ConfigFile, MeasuredShape, PatchManifest, Provenance, SourceVariant
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe import sources, splitk
from astra_sglang.triton.moe.knobs import Variant
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.source_op import candidate_path

OP = "fused_moe"
KIND = "triton-source"
TARGET = "sglang.kernels.ops.moe.fused_moe_triton_kernels:" + splitk.LAUNCHER


@dataclass(frozen=True)
class SourceRun:
    """What a source patch's figures are valid for, and where they come from."""

    gpu: str
    triton: str
    sglang: str
    source: sources.VariantSource
    run_id: str = ""
    notes: str = ""


def _manifest(folder: Path, run: SourceRun, dtype: str) -> PatchManifest:
    """The folder's manifest to add to: a source patch's of the same SGLang source, a config patch's turned into
    one, or a new one."""
    variant = SourceVariant(name=run.source.name, transform_version=splitk.VERSION, kernel_file=splitk.KERNEL_FILE,
                            source_hash=run.source.base_hash)
    if (folder / MANIFEST).is_file():
        manifest = PatchManifest.load(folder)
        if manifest.kind == "triton-config":
            manifest = manifest.model_copy(update={"kind": KIND, "targets": [TARGET]})
        elif manifest.kind != KIND:
            raise AstraError(f"{folder} holds a {manifest.kind} patch: give another --patches-dir for a source variant")
        elif manifest.variant != variant:
            raise AstraError(f"{folder} holds a source patch measured on {manifest.variant.name} of SGLang source "
                             f"{manifest.variant.source_hash}; this run measured {variant.name} of "
                             f"{variant.source_hash}: give another --patches-dir")
        return manifest.model_copy(update={"variant": variant})
    return PatchManifest(op=OP, kind=KIND, kernel="", dtypes=[dtype], targets=[TARGET], variant=variant,
                         provenance=Provenance(method="tuner", run_id=run.run_id, date=dt.date.today().isoformat(),
                                               gpu=run.gpu, started_from="SGLang's own config choice and kernel",
                                               notes=run.notes or "fused_moe_kernel with split-K, configs and splits "
                                                                  "tuned per batch size"),
                         baseline="SGLang's own pick (its config file for the GPU and expert shape, else its default "
                                  "config) and its own kernel")


def write_source_patch(patches_dir: Path, shape: MoeShape, table: dict[int, Variant], run: SourceRun,
                       tuned: list[int], measured: list[MeasuredShape]) -> Path:
    """Add (or replace) the file of `shape` in `<patches_dir>/fused_moe/`; `table`: every key the file holds
    (tuned variants and SGLang's picks around them). Returns the folder."""
    name = moe_configs.file_name(shape.experts, shape.inter, run.gpu)
    rel = f"configs/{moe_configs.version_dir(run.triton)}/{name}"
    folder = Path(patches_dir) / OP
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel).write_text(json.dumps({str(m): table[m].file_entry() for m in sorted(table)}, indent=4) + "\n")
    entry = ConfigFile(path=rel, experts=shape.experts, inter=shape.inter, hidden=shape.hidden, topk=shape.topk,
                       dtype=shape.dtype, device=run.gpu.replace(" ", "_"), triton=run.triton, tuned=sorted(tuned))
    manifest = _manifest(folder, run, shape.dtype)
    shapes = {(tuple(m.shape[1:]), m.dtype) for m in measured}
    old = [m for m in manifest.measured if (tuple(m.shape[1:]), m.dtype) not in shapes]
    manifest = manifest.model_copy(update={
        "configs": [*[c for c in manifest.configs if c.path != rel], entry], "measured": [*old, *measured],
        "dtypes": sorted({*manifest.dtypes, shape.dtype})})
    manifest.save(folder)
    return folder


def verify_requests(folder: Path, manifest: PatchManifest, shapes: list[int] | None = None) -> list[EvalRequest]:
    """One evaluation per config file: its variants (nearest key) against SGLang's own pick and kernel, at the
    batch sizes it tunes (or `shapes`), with every check."""
    out = []
    for config in manifest.configs:
        table = {m: Variant.from_file_entry(e) for m, e in moe_configs.read(folder / config.path).items()}
        tokens = shapes or config.tuned or sorted(table)
        out.append(EvalRequest(
            kernel=OP, candidate=KernelSource(path=candidate_path(table, manifest.variant.name),
                                              label=f"patch:{Path(config.path).name}"),
            baseline=KernelSource(path="py:astra_sglang.triton.moe.op:sglang_pick", label="sglang"),
            shapes=[(t, config.experts, config.inter, config.hidden, config.topk) for t in tokens],
            dtypes=[config.dtype]))
    return out
