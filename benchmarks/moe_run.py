"""fused_moe on a MoE model, start to end, in one GPU command (benchmarks/gpu/moe_run.sh runs it):

  model     benchmarks/make_moe_model.py: Qwen3-30B-A3B's architecture, 4 layers, dummy weights
  base      astra-sglang profile: the server under a decode- and a prefill-heavy load, its kernels ranked
  tune      astra-sglang tune fused_moe --profile base: the batch sizes the server ran, configs searched
            against SGLang's own pick through the isolated evaluator, the winners written as a config patch
  patched   astra-sglang profile --patched --compare base: the same loads with the tuned configs in place
  summary   benchmarks/moe_summary.py: per batch size SGLang's pick and the speedup, then the fused MoE
            kernel's time per step before and after, in place

Each stage runs in a session of its own under a deadline shared by all (DEADLINE seconds from the start, the
tuner's search budget cut to what the later stages leave); a stage past its time gets SIGINT (the profile then
stops its server itself), then every process it started is killed, children first.
Usage: python3 benchmarks/moe_run.py OUT [--dry-run]; env DEADLINE (500), STEPS (20), PORT (30123), PRESET
(make_moe_model.py's, default qwen3-30b-a3b), PATCHES (a patch folder from an earlier `astra-sglang tune`: the
tune stage is skipped and the patched profile runs with it, so a model too slow to start for all four stages in
one command gets its before/after profiles in one).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MODEL = Path("/tmp/moe")
SERVER = ["--model-path", str(MODEL), "--load-format", "dummy", "--attention-backend", "triton",
          "--moe-runner-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
          "--cuda-graph-max-bs-decode", "64", "--mem-fraction-static", "0.75"]
GRACE_S = 40.0
"""How long a stage past its time has after SIGINT (a profile stops its server: up to 30 s) before SIGKILL."""
RESERVE_PATCHED = 200
"""Seconds kept for the patched profile (a restart with warm JIT and Triton caches: 69-77 s to healthy on an
H100 with the Qwen3-30B-A3B preset, then two loads of ~50 s each)."""
OUTPUTS = {"base/profile.md": "base.md", "base/profile.json": "base.json", "tune/tune.md": "tune.md",
           "tune/tune.json": "tune.json", "patched/profile.md": "patched.md", "patched/profile.json": "patched.json"}


@dataclass
class Stage:
    name: str
    argv: list[str]
    limit_s: float
    """At most this long, and never past the shared deadline."""
    needs: list[str] = field(default_factory=list)
    """Files that must exist for the stage to run (an earlier stage's output)."""


def stages(work: Path, steps: int, port: int, tune_budget: float, preset: str = "qwen3-30b-a3b") -> list[Stage]:
    cli = [sys.executable, "-m", "astra_sglang.cli"]
    profile = [*cli, "profile", "--steps", str(steps), "--port", str(port), "--health-timeout", "200"]
    return [
        Stage("model", [sys.executable, "benchmarks/make_moe_model.py", str(MODEL), "--layers", "4", "--preset",
                        preset], 30),
        # A cold start took 183 s to healthy (H100, first Triton and CUDA-graph compiles), then two loads
        Stage("base", [*profile, "--out", str(work / "base"), "--", *SERVER], 330),
        Stage("tune", [*cli, "tune", "fused_moe", "--model", str(MODEL), "--profile", str(work / "base/profile.json"),
                       "--rounds", "2", "--width", "3", "--budget", f"{tune_budget:.0f}", "--timeout", "150",
                       "--patches-dir", str(work / "patches"), "--out", str(work / "tune")], tune_budget + 60,
              needs=[str(work / "base/profile.json")]),
        Stage("patched", [*profile, "--patched", "--patches", str(work / "patches"), "--compare",
                          str(work / "base/profile.json"), "--out", str(work / "patched"), "--", *SERVER], 280,
              needs=[str(work / "patches/fused_moe/manifest.json")]),
    ]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (whatever session it made), deepest first, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []

    def walk(p: int) -> None:
        for child in parents.get(p, []):
            walk(child)
            out.append(child)

    walk(pid)
    return out


def end_tree(proc: subprocess.Popen) -> None:
    """SIGINT to the stage (a profile stops its server in its own cleanup), then SIGKILL to what is left. The tree
    is read before the SIGINT too: a stage that dies of it orphans what it started in a session of its own, which
    the tree read after would no longer hold."""
    before = descendants(proc.pid)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    killed = list(dict.fromkeys([*descendants(proc.pid), *before, proc.pid]))
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    # SIGKILL is delivered, not awaited: a process runs on for a moment, and an orphan is reaped by whoever
    # adopts it; return once every one is gone or a zombie
    until = time.monotonic() + 10
    while any(_alive(pid) for pid in killed) and time.monotonic() < until:
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def run_stage(stage: Stage, work: Path, deadline: float) -> int:
    missing = [n for n in stage.needs if not Path(n).exists()]
    if missing:
        print(f"== {stage.name}: skipped, {missing[0]} is not there")
        return -1
    limit = max(1.0, min(stage.limit_s, deadline - time.monotonic()))
    log = work / f"{stage.name}.log"
    print(f"== {stage.name} (at most {limit:.0f} s): {' '.join(stage.argv)}", flush=True)
    started = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(stage.argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        rc = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        rc = 124
    finally:
        end_tree(proc)
    print(f"== {stage.name}: exit {rc} after {time.monotonic() - started:.0f} s")
    print("\n".join(log.read_text(errors="replace").splitlines()[-30:]), flush=True)
    return rc


def collect(work: Path, out: Path) -> list[str]:
    """The run's results, flat in OUT (at most 8 files): the profiles, the tuning run, the tuned config file."""
    copied = []
    for src, name in OUTPUTS.items():
        if (work / src).is_file():
            shutil.copyfile(work / src, out / name)
            copied.append(name)
    tuned = sorted((work / "patches" / "fused_moe" / "configs").glob("*/*.json"))
    if tuned:
        shutil.copyfile(tuned[0], out / "tuned-config.json")
        copied.append("tuned-config.json")
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/astra-moe"))
    parser.add_argument("--dry-run", action="store_true", help="Print the stages' commands, run nothing.")
    args = parser.parse_args(argv)
    deadline_s, steps, port = float(os.environ.get("DEADLINE", 500)), int(os.environ.get("STEPS", 20)), \
        int(os.environ.get("PORT", 30123))
    preset, patches = os.environ.get("PRESET", "qwen3-30b-a3b"), os.environ.get("PATCHES", "")
    begin = time.monotonic()
    deadline = begin + deadline_s
    if args.dry_run:
        for stage in stages(args.work, steps, port, deadline_s - 150 - RESERVE_PATCHED, preset):
            if not (patches and stage.name == "tune"):
                print(f"{stage.name}: {' '.join(stage.argv)}")
        return 0
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run_stage's cleanup then ends the stage's tree
    if patches:
        shutil.copytree(patches, args.work / "patches")
    for stage in stages(args.work, steps, port, 0, preset):
        if stage.name == "tune" and patches:
            print(f"== tune: skipped, the patches in {patches} are used")
            continue
        if stage.name == "tune":  # the search gets what the patched profile and the final evaluation leave
            budget = max(60.0, deadline - time.monotonic() - RESERVE_PATCHED)
            stage = next(s for s in stages(args.work, steps, port, budget, preset) if s.name == "tune")
        run_stage(stage, args.work, deadline)
    copied = collect(args.work, args.out)
    summary = subprocess.run([sys.executable, "benchmarks/moe_summary.py", str(args.out)], capture_output=True,
                             text=True)
    (args.out / "summary.md").write_text(summary.stdout)
    print(f"== results in {args.out}: {', '.join([*copied, 'summary.md'])}; {time.monotonic() - begin:.0f} s in all")
    print(summary.stdout + summary.stderr[-2000:], flush=True)
    return summary.returncode


if __name__ == "__main__":
    sys.exit(main())
