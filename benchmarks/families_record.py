"""After benchmarks/gpu/families.sh's run: its figures into copies of the ops' patch manifests, and a summary.

Usage: python3 benchmarks/families_record.py OUT GPU_NAME DATE SOURCE OP...
       python3 benchmarks/families_record.py --candidates OUT OP...   # the ops to sanitize: their rows pass
Reads OUT/kernels*.jsonl (the shipped patch timed against SGLang's op), OUT/checks.jsonl (the harness's trials),
OUT/per_call.jsonl and OUT/sanitize.jsonl (benchmarks/memcheck.py --out); takes each OP's manifest from
OUT/patches/OP (else patches/OP) and writes
OUT/manifests/OP/manifest.json: `measured` = the timed rows against SGLang (py: baselines), the provenance's date,
GPU and "`measured`: SOURCE" clause, gate_max_bytes = the largest call (bytes of its tensors) that every check and
timed run passed, or none where any failed; `enabled` as the rows decide (`verdict`), with the reason in a
"`gate`: ..." clause of the provenance notes and, for a patch left off, in `off_reason`. OUT/families.md: per op
and shape set, the geomean, lowest and highest speedup, the shapes where SGLang's op was faster, the failed checks,
the per-call rows, and the verdict.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

from astra_sglang.harness.limits import REGRESSION_FLOOR
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.patchset.record import gate_max_bytes, read_rows, timed_against_sglang
from astra_sglang.patchset.record import record as record_measurements
from astra_sglang.specs.registry import get_spec, resolve_shapes


def rows(out: Path, pattern: str) -> list[dict]:
    return read_rows(sorted(out.glob(pattern)))


GATE_CLAUSE = re.compile(r"`gate`: [^;]*")
"""The provenance notes' clause with the last run's verdict, replaced by the next run's."""


def record(manifest: PatchManifest, timed: list[dict], checked: list[dict], gpu: str, date: str,
           source: str, decision: tuple[bool, str] = (False, "")) -> PatchManifest:
    """The manifest with this run's figures, gate bound and verdict (enabled, why) (a copy; the caller saves it)."""
    manifest = record_measurements(manifest, timed, gpu, date, source)
    manifest.gate_max_bytes = gate_max_bytes(manifest.op, timed + checked)
    manifest.enabled, why = decision
    manifest.off_reason = "" if manifest.enabled else why  # what `launch` prints of a patch left off
    if why:
        clause = f"`gate`: {'enabled' if manifest.enabled else 'left off'}, {why}"
        notes, found = GATE_CLAUSE.subn(lambda m: clause, manifest.provenance.notes)
        manifest.provenance.notes = notes if found else f"{notes}; {clause}".lstrip("; ")
    return manifest


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def verdict(timed: list[dict], checked: list[dict], per_call: list[dict], failures: list[str],
            sanitized: dict | None = None) -> tuple[bool, str]:
    """Whether the rows of one op enable its patch, and why: every check passed, every timed shape has SGLang's
    figure, the geomean against SGLang's op is at least 1 and no shape below REGRESSION_FLOOR, no eager call costs
    more than 1 / REGRESSION_FLOOR of SGLang's (the same 5% of noise room), and compute-sanitizer's memcheck and
    racecheck passed (`sanitized`: the op's line of OUT/sanitize.jsonl, None where it did not run). `failures`: the
    reasons of the op's evaluations that did not finish (a timeout leaves shapes untimed)."""
    bad = [r for r in timed + checked if r.get("correct") is False]
    if bad:
        return False, f"{len(bad)} checks failed"
    if failures:
        return False, f"the timed step failed: {failures[0][:160]}"
    against = [r for r in timed if timed_against_sglang(r)]
    shapes = [r for r in timed if r.get("covered", True) and r.get("correct") is not False]
    if not against:
        return False, "no shape was timed against SGLang's op"
    if len(against) < len(shapes):
        return False, f"{len(shapes) - len(against)} of {len(shapes)} timed shapes have no figure of SGLang's op"
    speed = geomean([r["speedup"] for r in against])
    if speed < 1.0:
        return False, f"geomean {speed:.3f}x against SGLang's op over {len(against)} shapes"
    slowest = min(against, key=lambda r: r["speedup"])
    if slowest["speedup"] < REGRESSION_FLOOR:  # the acceptance gate's rule, as optimize's winner applies it
        return False, (f"{slowest['speedup']:.3f}x SGLang's op at {'x'.join(map(str, slowest['shape']))} "
                       f"{slowest['dtype']} (geomean {speed:.3f}x)")
    if not per_call:
        return False, "no per-call row (the eager call was not checked and timed against SGLang's)"
    worst = max(per_call, key=lambda r: r["ratio"])
    if worst["ratio"] > 1 / REGRESSION_FLOOR:
        return False, (f"eager calls up to {worst['ratio']:.3f}x SGLang's time at {'x'.join(map(str, worst['shape']))} "
                       f"(geomean {speed:.3f}x kernel only)")
    figures = (f"geomean {speed:.3f}x against SGLang's op over {len(against)} shapes, eager calls at most "
               f"{worst['ratio']:.3f}x SGLang's time")
    if sanitized is None:
        return False, f"{figures}, but compute-sanitizer memcheck and racecheck have not run"
    if not sanitized.get("ok"):
        return False, f"compute-sanitizer memcheck or racecheck failed ({sanitized.get('reason') or 'a finding'}), {figures}"
    return True, f"{figures}, compute-sanitizer memcheck and racecheck clean"


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


def failed_runs(out: Path) -> dict[str, list[str]]:
    """Op -> the reasons of its evaluations in OUT/kernels*.jsonl that did not end ok (their summary lines)."""
    found: dict[str, list[str]] = {}
    for path in sorted(out.glob("kernels*.jsonl")):
        for r in map(json.loads, path.read_text().splitlines()):
            if r.get("type") == "summary" and not r.get("ok"):
                found.setdefault(r.get("kernel"), []).append(r.get("reason") or r.get("stage", "failed"))
    return found


def sanitizer_lines(out: Path) -> dict[str, dict]:
    """OUT/sanitize.jsonl (benchmarks/memcheck.py --out) by op, the last line of each op."""
    path = out / "sanitize.jsonl"
    return {r["op"]: r for r in map(json.loads, path.read_text().splitlines())} if path.is_file() else {}


def candidates(out: Path, ops: list[str]) -> list[str]:
    """The ops whose rows enable them once compute-sanitizer passes: those families.sh sanitizes."""
    timed, checked, per_call = rows(out, "kernels*.jsonl"), rows(out, "checks.jsonl"), rows(out, "per_call.jsonl")
    clean, failures = {"ok": True}, failed_runs(out)
    return [op for op in ops if verdict([r for r in timed if r["kernel"] == op], [r for r in checked if r["kernel"] == op],
                                        [r for r in per_call if r["op"] == op], failures.get(op, []), clean)[0]]


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--candidates":
        print(" ".join(candidates(Path(argv[1]), argv[2:])))
        return 0
    out, gpu, date, source, ops = Path(argv[0]), argv[1], argv[2], argv[3], argv[4:]
    timed, checked, per_call = rows(out, "kernels*.jsonl"), rows(out, "checks.jsonl"), rows(out, "per_call.jsonl")
    sanitized, failures = sanitizer_lines(out), failed_runs(out)
    text = [f"# Op families ({', '.join(ops)}): {gpu}, {date}", "", f"Source: {source}", ""]
    for op in ops:
        folder = out / "patches" / op if (out / "patches" / op / "manifest.json").is_file() else Path("patches") / op
        mine = [r for r in timed if r["kernel"] == op]
        checks = [r for r in checked if r["kernel"] == op]
        calls = [r for r in per_call if r["op"] == op]
        decision = verdict(mine, checks, calls, failures.get(op, []), sanitized.get(op))
        manifest = record(PatchManifest.load(folder), mine, checks, gpu, date, source, decision)
        target = out / "manifests" / op
        target.mkdir(parents=True, exist_ok=True)
        manifest.save(target)
        text += summary(op, mine, checks, per_call)
        text += [f"verdict: {'enabled' if decision[0] else 'left off'}, {decision[1]}", ""]
        print(f"{op}: {len(manifest.measured)} timed shapes recorded, gate_max_bytes {manifest.gate_max_bytes}, "
              f"{'enabled' if decision[0] else 'left off'}: {decision[1]}")
    (out / "families.md").write_text("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
