"""After benchmarks/gpu/families.sh's run: its figures into copies of the ops' patch manifests, and a summary.

Usage: python3 benchmarks/families_record.py OUT GPU_NAME DATE SOURCE OP...
Reads OUT/kernels*.jsonl (the shipped patch timed against SGLang's op), OUT/checks.jsonl (the harness's trials)
and OUT/per_call.jsonl; takes each OP's manifest from OUT/patches/OP (else patches/OP) and writes
OUT/manifests/OP/manifest.json: `measured` = the timed rows against SGLang (py: baselines), the provenance's date,
GPU and "`measured`: SOURCE" clause, gate_max_bytes = the largest call (bytes of its tensors) that every check and
timed run passed, or none where any failed; `enabled` stays false (a person enables an op after reading the
figures). OUT/families.md: per op and shape set, the geomean, lowest and highest speedup, the shapes where
SGLang's op was faster, the failed checks, and the per-call rows.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.patchset.record import gate_max_bytes, read_rows, timed_against_sglang
from astra_sglang.patchset.record import record as record_measurements
from astra_sglang.specs.registry import get_spec, resolve_shapes


def rows(out: Path, pattern: str) -> list[dict]:
    return read_rows(sorted(out.glob(pattern)))


def record(manifest: PatchManifest, timed: list[dict], checked: list[dict], gpu: str, date: str,
           source: str) -> PatchManifest:
    """The manifest with this run's figures and gate bound, disabled (a copy; the caller saves it)."""
    manifest = record_measurements(manifest, timed, gpu, date, source)
    manifest.gate_max_bytes = gate_max_bytes(manifest.op, timed + checked)
    manifest.enabled = False
    return manifest


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def summary(op: str, timed: list[dict], checked: list[dict], per_call: list[dict]) -> list[str]:
    spec = get_spec(op)
    mine = [r for r in timed if timed_against_sglang(r)]
    lines = [f"## {op}", "", "| set | shapes | geomean | lowest | highest | SGLang faster at |", "|---|---:|---:|---:|---:|---|"]
    for name in ("quick", "paper", "held_out", "models", "edge"):
        shapes = set(resolve_shapes(spec, name))
        here = [r for r in mine if tuple(r["shape"]) in shapes]
        if not here:
            continue
        speed = [r["speedup"] for r in here]
        slower = ", ".join(f"{'x'.join(map(str, r['shape']))} {r['dtype']} {r['speedup']:.3f}" for r in here
                           if r["speedup"] < 1.0) or "-"
        lines.append(f"| {name} | {len(here)} | {geomean(speed):.3f} | {min(speed):.3f} | {max(speed):.3f} | {slower} |")
    bad = [r for r in timed + checked if r.get("correct") is False]
    lines += ["", f"checks: {sum(1 for r in timed + checked if r.get('correct'))} passed, {len(bad)} failed"]
    lines += [f"- FAILED {'x'.join(map(str, r['shape']))} {r['dtype']}: {r.get('reason', '')[:200]}" for r in bad]
    calls = [r for r in per_call if r["op"] == op]
    if calls:
        lines += ["", "| per call (eager) | original us | patched us | patched/original |", "|---|---:|---:|---:|"]
        lines += [f"| {'x'.join(map(str, r['shape']))} | {r['original_us']:.2f} | {r['patched_us']:.2f} | {r['ratio']:.3f} |"
                  for r in calls]
    return lines + [""]


def main(argv: list[str]) -> int:
    out, gpu, date, source, ops = Path(argv[0]), argv[1], argv[2], argv[3], argv[4:]
    timed, checked, per_call = rows(out, "kernels*.jsonl"), rows(out, "checks.jsonl"), rows(out, "per_call.jsonl")
    text = [f"# Op families ({', '.join(ops)}): {gpu}, {date}", "", f"Source: {source}", ""]
    for op in ops:
        folder = out / "patches" / op if (out / "patches" / op / "manifest.json").is_file() else Path("patches") / op
        mine = [r for r in timed if r["kernel"] == op]
        checks = [r for r in checked if r["kernel"] == op]
        manifest = record(PatchManifest.load(folder), mine, checks, gpu, date, source)
        target = out / "manifests" / op
        target.mkdir(parents=True, exist_ok=True)
        manifest.save(target)
        text += summary(op, mine, checks, per_call)
        print(f"{op}: {len(manifest.measured)} timed shapes recorded, gate_max_bytes {manifest.gate_max_bytes}")
    (out / "families.md").write_text("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
