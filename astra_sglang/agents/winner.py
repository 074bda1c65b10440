"""Judging candidates: a round's status, the winner of the final evaluation, and writing it as a patch.

A winner is correct on every test of the final evaluation (the suite T plus held-out and edge shapes
the agents never saw) and has the best geomean speedup there, above `min_speedup`. `write_patch` is the
one way a winner reaches a patches folder: kernel.cu + manifest.json with its provenance and numbers.
"""
from __future__ import annotations

import datetime as dt
import math
import shutil
from pathlib import Path

from astra_sglang.agents.records import HistoryRow, RunConfig, Winner
from astra_sglang.harness.records import EvalResult
from astra_sglang.patching.manifest import MANIFEST, MeasuredShape, PatchManifest, Provenance
from astra_sglang.specs.records import KernelSpec

FINAL_ROUND = -1


def passed(result: EvalResult) -> bool:
    """Built, ran and correct on every checked shape (a compile-only result never passes)."""
    return (result.ok and result.stage == "done" and any(s.correct for s in result.shapes)
            and all(s.correct is True or not s.covered for s in result.shapes))  # not covered: the original runs


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
        if passed(result) and speedup and speedup > config.min_speedup and (best is None or speedup > best[1]):
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
        baseline=winner.final.baseline or "the run's starting kernel", measured=measured)
    manifest.save(folder)
    return folder
