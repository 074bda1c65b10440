"""Judging candidates: a round's status, the winner of the final evaluation, and writing it as a patch.

A winner is correct on every test of the final evaluation (the acceptance gate: every shape the patched op
will serve, see specs.registry GATE) and has the best geomean speedup there, above `min_speedup`, with
declined shapes counted at 1.0x and no served shape below the regression floor (harness/limits.py). `write_patch` is the
one way a winner reaches a patches folder: kernel.cu + manifest.json with its provenance and numbers.
"""
from __future__ import annotations

import datetime as dt
import math
import shutil
from pathlib import Path

from astra_sglang.harness.limits import REGRESSION_FLOOR
from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.records import HistoryRow, RunConfig, Winner
from astra_sglang.patchset.manifest import MANIFEST, MeasuredShape, PatchManifest, Provenance
from astra_sglang.specs.records import KernelSpec

FINAL_ROUND = -1


def passed(result: EvalResult) -> bool:
    """Built, ran and correct on every checked shape (a compile-only result never passes)."""
    return (result.ok and result.stage == "done" and any(s.correct for s in result.shapes)
            and all(s.correct is True or not s.covered for s in result.shapes))  # not covered: the original runs


def eligible(result: EvalResult) -> str:
    """'' when `result` may win: it passed, and at no shape it serves is it slower than REGRESSION_FLOOR x
    the original (a shape it declines counts as 1.0x: the original serves it). Else why not."""
    if not passed(result):
        return result.reason or "not correct on every shape"
    slow = result.regressions(REGRESSION_FLOOR)
    if slow:
        worst = min(slow, key=lambda s: s.speedup)
        return (f"slower than the original at {len(slow)} shape(s) it serves, worst {'x'.join(map(str, worst.shape))}"
                f" {worst.dtype} {worst.speedup:.3f}x (floor {REGRESSION_FLOOR}x): decline them instead")
    return ""


def classify(round: int, result: EvalResult | None, error: str = "") -> HistoryRow:
    """The planner's one-line view of an attempt."""
    if result is None:
        status = "unsafe" if "rejected before building" in error else "parse"
        return HistoryRow(round=round, status=status, detail=error[:600])
    build_failed = result.build is None or not result.build.ok
    wrong = [s for s in result.shapes if s.correct is False]
    if result.stage == "build" and build_failed:
        status, detail = "build", result.reason or "compilation failed"
    elif result.stage == "build" and result.baseline_build is not None and not result.baseline_build.ok:
        status, detail = "failed", result.reason
    elif result.stage == "build":  # built, then stopped: no GPU to check and time on
        status, detail = "compiled", result.reason or "built; not run"
    elif result.stage in ("crash", "timeout", "load"):
        status, detail = result.stage, result.reason
    elif wrong:
        first = wrong[0]
        status = "wrong"
        detail = (f"{len(wrong)} of {len(result.shapes)} cases incorrect, e.g. {'x'.join(map(str, first.shape))}/"
                  f"{first.dtype}: {first.reason or 'mismatch'}"
                  + (f" (error {first.max_err_ratio:.3g}x tolerance)" if first.max_err_ratio else ""))
    elif passed(result):
        status, detail = "ok", ""
    elif result.ok and all(s.correct is None for s in result.shapes):
        status, detail = "compiled", "built (compile-only: not run)"
    else:
        status, detail = "failed", result.reason or f"stopped at {result.stage}"
    return HistoryRow(round=round, status=status, speedup=result.geomean_speedup if status == "ok" else None,
                      detail=detail[:600])


def select_winner(kernel: str, finals: dict[int, EvalResult], sources: dict[int, str], config: RunConfig,
                  model: str, run_id: str) -> Winner | None:
    best = None
    for round, result in finals.items():
        speedup = result.geomean_speedup
        ok = not eligible(result)  # '' = eligible
        if ok and speedup and speedup > config.min_speedup and (best is None or speedup > best[1]):
            best = (round, speedup, result)
    if best is None:
        return None
    round, speedup, result = best
    return Winner(kernel=kernel, source=sources[round], round=round, speedup=speedup, final=result, model=model,
                  rounds=config.rounds, run_id=run_id, started_from=short_path(config.start_source))


def short_path(path: str) -> str:
    """A start source as a manifest names it: never a machine's absolute path."""
    p = Path(path)
    return "/".join(p.parts[-2:]) if p.is_absolute() else path


def existing_is_better(winner: Winner, patches_dir: str | Path) -> str | None:
    """Why the patch already in `patches_dir` should stay: its recorded speedups are at least the winner's
    over the (shape, dtype) cases both measured. None when there is nothing to compare (or the winner wins).
    Both sets are speedups over SGLang's own op (or both over the same baseline): a ratio of ratios."""
    folder = Path(patches_dir) / winner.kernel
    if not (folder / MANIFEST).is_file():
        return None
    old = {(tuple(m.shape), m.dtype): m.speedup for m in PatchManifest.load(folder).measured}
    new = {(tuple(s.shape), s.dtype): s.speedup for s in winner.final.shapes if s.speedup}
    common = sorted(set(old) & set(new))
    if not common:
        return None
    old_g, new_g = (math.exp(sum(math.log(d[k]) for k in common) / len(common)) for d in (old, new))
    if new_g > old_g:
        return None
    return (f"kept the existing {folder}: {old_g:.3f}x vs the winner's {new_g:.3f}x geomean over the "
            f"{len(common)} cases both measured")


def screen(winner: Winner, spec: KernelSpec, echo=lambda _: None) -> Winner | None:
    """compute-sanitizer (memcheck, racecheck) over the winner at the gate's shapes it can afford: a finding
    rejects it (None); a clean run, or one this machine cannot make, is recorded in `checks`."""
    from astra_sglang.harness.sanitize import SanitizeRequest, sanitize, small_shapes

    served = [s for s in winner.final.shapes if s.correct]
    req = SanitizeRequest(kernel=winner.kernel, source=winner.source, defines=winner.defines,
                          shapes=small_shapes(spec, [tuple(s.shape) for s in served]),
                          dtypes=sorted({s.dtype for s in served}))
    checks = []
    for report in sanitize(req):
        if report.ran and not report.ok:
            echo(f"{winner.kernel}: rejected by compute-sanitizer {report.tool}: {report.findings} finding(s)\n"
                 f"{report.detail}")
            return None
        checks.append(f"compute-sanitizer {report.tool}: " + (
            f"clean over {report.launches} launches" if report.ran else f"not run ({report.detail})"))
    return winner.model_copy(update={"checks": checks})


def gate_max_bytes(winner: Winner, spec: KernelSpec) -> int | None:
    """The largest call the final evaluation checked the winner on (see PatchManifest.gate_max_bytes)."""
    sizes = [spec.call_bytes(tuple(s.shape), s.dtype) for s in winner.final.shapes if s.correct]
    return max(sizes) if sizes else None


def write_patch(winner: Winner, patches_dir: str | Path, spec: KernelSpec | None = None) -> Path:
    """patches_dir/<kernel>/{kernel.cu, manifest.json}; returns the folder."""
    folder = Path(patches_dir) / winner.kernel
    folder.mkdir(parents=True, exist_ok=True)
    previous = PatchManifest.load(folder) if (folder / MANIFEST).is_file() else None
    shutil.copyfile(winner.source, folder / "kernel.cu")
    measured = [MeasuredShape(shape=s.shape, dtype=s.dtype, candidate_us=s.candidate.median_us,
                              baseline_us=s.baseline.median_us, speedup=s.speedup, pct_roofline=s.pct_roofline)
                for s in winner.final.shapes if s.candidate and s.baseline and s.speedup]
    manifest = PatchManifest(
        op=winner.kernel, defines=winner.defines,
        dtypes=sorted({s.dtype for s in winner.final.shapes}),
        # A replaced patch keeps the call sites it was set up for (e.g. a calling module's global).
        targets=previous.targets if previous and previous.targets else
        [f"{t.module}:{t.attr}" for t in spec.sglang_targets] if spec else [],
        provenance=Provenance(method=winner.method, model=winner.model, rounds=winner.rounds, run_id=winner.run_id,
                              date=dt.date.today().isoformat(), gpu=winner.final.gpu,
                              started_from=winner.started_from,
                              notes=f"round {winner.round}, geomean {winner.speedup:.3f}x over the final evaluation"),
        baseline=winner.final.baseline or "the run's starting kernel", measured=measured,
        gate_max_bytes=gate_max_bytes(winner, spec) if spec else None, checks=winner.checks)
    manifest.save(folder)
    return folder
