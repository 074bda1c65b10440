"""The built-in tuner: no LLM needed. It searches the knobs a kernel exposes, per shape, and ships one
kernel whose generated entry dispatches each shape to its best configuration.

Round 1 is a Latin square: evaluation j gives tuned shape i the configuration (i + j) mod K, so K
evaluations (each one isolated process timing every shape) measure every (shape, configuration) pair.
Rounds 2..R re-time each shape's three best configurations side by side, to pick through the noise.
A round's evaluations go out as one batch: through a pool (astra_sglang.optimize.pool: builds overlap GPU
evaluations, one per GPU) where one is given, else every build in parallel first and the GPU evaluations
one at a time (harness.isolate.evaluate_many). The agent loop tunes its finalists' knobs the same way
(`tune`).
"""
from __future__ import annotations

import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.harness.isolate import evaluate_many
from astra_sglang.harness.records import EvalRequest, EvalResult, KernelSource
from astra_sglang.kernels.knobs import (Config, configs, dispatch_source, original_config, parse_knobs,
                                        strip_dispatch)
from astra_sglang.optimize.tuner.screen import buildable
from astra_sglang.specs.records import KernelSpec
from astra_sglang.specs.registry import resolve_shapes

TUNE_SHAPES = "paper+quick"
TUNE_DTYPE = "bfloat16"
FINAL_SHAPES = "gate"  # every shape the patched op will serve (specs.registry.GATE)
MAX_CONFIGS = int(os.environ.get("ASTRA_TUNER_MAX_CONFIGS", "24"))
FINAL_TIMEOUT_S = int(os.environ.get("ASTRA_TUNER_FINAL_TIMEOUT_S", "1800"))
"""The final evaluation's harness timeout: a cut one keeps the shapes it finished (benchmarks/gpu/knobs.sh)."""
TOP_K = 3
NO_GPU = "no CUDA GPU"  # how the harness's worker reports a machine without one (harness/worker.py)


Batch = Callable[[list[EvalRequest]], list[EvalResult]]


class Tuning:
    """Timing samples per (shape, configuration) and the sources that produced them."""

    def __init__(self, spec: KernelSpec, source: str, run_dir: Path, evaluator=None, echo=print,
                 batch: Batch | None = None, shapes: list[tuple[int, ...]] | None = None, dtype: str = TUNE_DTYPE,
                 arch: str | None = None):
        source = strip_dispatch(source)  # re-tuning a shipped (already tuned) kernel starts from what it wraps
        self.spec, self.source, self.run_dir, self.echo = spec, source, run_dir, echo
        self.batch = batch or (lambda reqs: evaluate_many(reqs, evaluator))
        self.dtype, self.arch = dtype, arch
        self.knobs = parse_knobs(source)
        if not self.knobs:
            raise AstraError(f"{spec.name}: the start kernel declares no `// astra:knob NAME values...` lines; "
                             "the tuner needs knobs (see patches/<op>/kernel.cu for the convention)")
        self.shapes = shapes or resolve_shapes(spec, TUNE_SHAPES)
        self.samples: dict[tuple, dict[Config, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.failed: set[tuple] = set()
        self.reasons: list[str] = []
        (run_dir / "candidates").mkdir(parents=True, exist_ok=True)
        self.log = run_dir / "tuner.jsonl"

    def write(self, name: str, table: dict, note: str) -> Path:
        path = self.run_dir / "candidates" / f"{name}.cu"
        path.write_text(dispatch_source(self.spec, self.source, self.knobs, table, note))
        return path

    def evaluate_tables(self, tag: str, tables: list[dict]) -> None:
        paths = [self.write(f"{tag}-{j:02d}", t, f"{tag} assignment {j}") for j, t in enumerate(tables)]
        reqs = [EvalRequest(kernel=self.spec.name, candidate=KernelSource(path=str(p)), shapes=self.shapes,
                            dtypes=[self.dtype], edge_cases=False, timeout_s=600, arch=self.arch) for p in paths]
        for j, (table, result) in enumerate(zip(tables, self.batch(reqs))):
            self.reasons.append("" if result.ok else result.reason)
            for row in result.shapes:
                config = table[tuple(row.shape)]
                if row.correct and row.candidate:
                    self.samples[tuple(row.shape)][config].append(row.candidate.median_us)
                elif row.correct is False:
                    self.failed.add((tuple(row.shape), config))
            with self.log.open("a") as f:
                f.write(json.dumps({"tag": tag, "j": j, "candidate": paths[j].name, "ok": result.ok,
                                    "reason": result.reason, "table": {"x".join(map(str, s)): c for s, c in table.items()},
                                    "times": {"x".join(map(str, r.shape)): r.candidate and r.candidate.median_us
                                              for r in result.shapes}}) + "\n")
            self.echo(f"  {tag} {j + 1}/{len(tables)}: {'ok' if result.ok else result.reason[:120]}")

    def ranked(self, shape) -> list[Config]:
        good = {c: statistics.median(v) for c, v in self.samples[shape].items() if (shape, c) not in self.failed}
        return sorted(good, key=good.get)

    def best_table(self) -> dict:
        table = {}
        for shape in self.shapes:
            ranked = self.ranked(shape)
            if ranked:
                table[shape] = ranked[0]
        if not table:
            raise AstraError(f"{self.spec.name}: no configuration was correct on any tuned shape")
        return table


def tune(tuning: Tuning, rounds: int, max_configs: int | None = None) -> tuple[Path, dict]:
    """Search `tuning`'s knobs for `rounds` rounds; the per-shape dispatch source and its table."""
    keep = original_config(tuning.source, tuning.knobs)
    space = buildable(tuning, configs(tuning.knobs, max_configs or MAX_CONFIGS, keep=keep))
    tuning.echo(f"tuner: {len(space)} configurations of {', '.join(k.name for k in tuning.knobs)} on "
                f"{len(tuning.shapes)} shapes, {rounds} rounds")
    tuning.evaluate_tables("r01", [{s: space[(i + j) % len(space)] for i, s in enumerate(tuning.shapes)}
                                   for j in range(len(space))])
    if tuning.reasons and all(r.startswith(NO_GPU) for r in tuning.reasons):
        # Said as such, not as "no configuration was correct": nothing was timed at all.
        raise AstraError("no CUDA device: the tuner times candidates on a GPU (the builds succeeded); "
                         "run it where torch sees one, or give --gpus / --ray workers that have one")
    for r in range(2, rounds + 1):
        tops = {s: tuning.ranked(s)[:TOP_K] for s in tuning.shapes}
        tables = [{s: c[j % len(c)] for s, c in tops.items() if c} for j in range(TOP_K)]
        tuning.evaluate_tables(f"r{r:02d}", [t for t in tables if t])
    table = tuning.best_table()
    note = f"{tuning.spec.name}, {rounds} rounds, {len(space)} configurations"
    return tuning.write("final", table, note), table


def run_tuner(spec: KernelSpec, start: Path, rounds: int, run_dir: Path, evaluator, echo=print,
              baseline: KernelSource | None = None, batch: Batch | None = None):
    """Tune `start`'s knobs per shape for `rounds` rounds; returns a Winner (or None) like the agent loop."""
    from astra_sglang.optimize.records import Winner
    from astra_sglang.optimize.winner import eligible, screen

    began = time.time()
    tuning = Tuning(spec, Path(start).read_text(), Path(run_dir), evaluator, echo, batch=batch)
    final_path, table = tune(tuning, rounds)
    echo("tuner: final evaluation on the acceptance gate (every shape set, all dtypes, full checks)")
    req = EvalRequest(kernel=spec.name, candidate=KernelSource(path=str(final_path), label="tuned"), baseline=baseline,
                      shapes=resolve_shapes(spec, FINAL_SHAPES), dtypes=spec.dtypes, timeout_s=FINAL_TIMEOUT_S,
                      sandwich="served")  # the gate ships on the in-place figure where a server runs the op
    final = batch([req])[0] if batch else evaluator(req)
    (Path(run_dir) / "final.json").write_text(final.model_dump_json(indent=1))
    _write_table(Path(run_dir), tuning, table, final, time.time() - began)
    why_not = eligible(final)
    if why_not or not final.geomean_speedup:
        echo(f"tuner: no winner: {why_not or 'final evaluation did not pass'}")
        return None
    return screen(Winner(kernel=spec.name, source=str(final_path), round=rounds, speedup=final.geomean_speedup,
                         final=final, method="tuner", rounds=rounds, run_id=Path(run_dir).name,
                         started_from=Path(start).name), spec, echo)


def _write_table(run_dir: Path, tuning: Tuning, table: dict, final: EvalResult, seconds: float) -> None:
    names = [k.name for k in tuning.knobs]
    lines = [f"# tuner: {tuning.spec.name}", "", f"{seconds:.0f} s; final: "
             f"{'passed' if final.ok else 'FAILED: ' + final.reason}; geomean speedup "
             f"{final.geomean_speedup or 0:.3f}x vs {final.baseline}", "",
             f"| shape | {' | '.join(names)} | best us ({tuning.dtype}) | configs timed |", "|---" * (len(names) + 3) + "|"]
    for shape, config in table.items():
        best = statistics.median(tuning.samples[shape][config])
        lines.append(f"| {'x'.join(map(str, shape))} | {' | '.join(map(str, config))} | {best:.2f} | "
                     f"{len(tuning.samples[shape])} |")
    (run_dir / "tuner.md").write_text("\n".join(lines) + "\n")
