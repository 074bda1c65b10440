"""SGLang's Triton attention, tuned and patched in, in one GPU command (benchmarks/gpu/attention_run.sh runs it):

  tune-decode   astra-sglang tune decode_attention --model llama-3-8b: (batch, kv length) buckets, launch configs
                searched against SGLang's own pick through the isolated evaluator, winners as a launch patch
  tune-extend   the same for extend_attention: (extend, prefix length) buckets
  base          astra-sglang profile of the kit's dummy Llama-3-8B (triton attention backend), unpatched
  patched       astra-sglang profile --patched --compare base: the same loads with the launch patches in place

The profiles run only where a patch was written and RESERVE_PROFILES seconds are left. Every stage runs in
a session of its own under one deadline (DEADLINE seconds, default 520); a stage past its time gets SIGINT
(a profile stops its server itself), then every process it started is killed (moe_run.run_stage).
Writes, flat, into OUT: results.jsonl (one line per kernel and bucket), summary.md (per-bucket speedups vs
SGLang's pick, and the attention kernels' time per step before/after where profiled), tune-{decode,extend}.md,
{base,patched}.{md,json} and the stages' log tails.
Usage: python3 benchmarks/attention_run.py OUT [--dry-run]; env DEADLINE (520), STEPS (20), PORT (30125).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moe_run import Stage, run_stage  # noqa: E402 - the stage runner shared with the fused MoE run

SERVER = ["--model-path", "/tmp/model", "--load-format", "dummy", "--attention-backend", "triton",
          "--sampling-backend", "pytorch", "--grammar-backend", "none", "--cuda-graph-max-bs-decode", "64",
          "--mem-fraction-static", "0.75"]
BUCKETS = {"decode": "1x512,1x4096,8x512,8x4096,32x512,32x2048,64x512,64x4096", "extend": "1024x0,4096x0,2048x2048"}
BUDGETS = {"decode": float(os.environ.get("DECODE_BUDGET", 300)), "extend": float(os.environ.get("EXTEND_BUDGET", 170))}
"""Search seconds per kernel (the final evaluation is inside them). One evaluation of every bucket took 52-53 s on
an H100 with 4 decode and 3 extend buckets (2026-11-25): at 120 / 100 s no search round fitted beside the final
evaluation. Decode measures 8 buckets (each batch size at a short and a long kv length)."""
KERNELS = os.environ.get("KERNELS", "decode extend").split()
"""Which kernels to tune (KERNELS=decode: the decode search alone, e.g. beside an earlier extend patch)."""
DEFAULT_DEADLINE = 520
"""Seconds for all stages by default: the searches fit; the profiles alone need PATCHES= and DEADLINE=580."""
RESERVE_PROFILES = 530
"""Seconds the two profiles need (two server starts with CUDA graphs, a decode and a prefill load each). The first
server start on a machine compiles SGLang's kernels: the base profile was cut off at 130 s before its server was
up, and at 250 s on a fresh machine (server healthy after 165 s, then two loads) (H100, 2026-11-25), so with tuning in the same command the profiles fit only with PATCHES= in a second one."""
ATTENTION_KERNELS = ("_fwd_grouped_kernel_stage1", "_fwd_kernel_stage2", "_fwd_kernel")


def stages(work: Path, steps: int, port: int) -> list[Stage]:
    cli = [sys.executable, "-m", "astra_sglang.cli"]
    profile = [*cli, "profile", "--steps", str(steps), "--port", str(port), "--health-timeout", "200"]
    out = []
    for kind in KERNELS:
        out.append(Stage(f"tune-{kind}", [
            *cli, "tune", f"{kind}_attention", "--model", "llama-3-8b", "--buckets", BUCKETS[kind], "--rounds", "2",
            "--width", "3", "--budget", f"{BUDGETS[kind]:.0f}", "--timeout", "120", "--patches-dir",
            str(work / "patches"), "--out", str(work / f"tune-{kind}")], BUDGETS[kind] + 60))
    out.append(Stage("base", [*profile, "--out", str(work / "base"), "--", *SERVER], 330,
                     needs=[str(work / "patches")]))
    out.append(Stage("patched", [*profile, "--patched", "--patches", str(work / "patches"), "--compare",
                                 str(work / "base/profile.json"), "--out", str(work / "patched"), "--", *SERVER], 200,
                     needs=[str(work / "base/profile.json")]))
    return out


def rows(work: Path) -> list[dict]:
    """One record per kernel and bucket from the tuning runs' tune.json."""
    out = []
    for kind in ("decode", "extend"):
        path = work / f"tune-{kind}" / "tune.json"
        if not path.is_file():
            continue
        result = json.loads(path.read_text())
        for b in result["buckets"]:
            out.append({"kernel": result["kernel"], "bucket": b["bucket"], "sglang_pick": b["pick"],
                        "best": b["best"], "search_speedup": b["best_speedup"], "chosen": b["chosen"],
                        "verdict": b["verdict"], "final_speedup": b["final_speedup"], "sglang_us": b["pick_us"],
                        "chosen_us": b["final_us"], "gpu": result["gpu"], "triton": result["triton"],
                        "sglang": result["sglang"], "date": result["date"], "final_ok": result["final_ok"]})
    return out


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def kernel_time(profile: Path) -> dict[str, tuple[float, float]]:
    """Per phase, the attention kernels' (us per step, share of the step's GPU time in percent) in a
    profile.json."""
    if not profile.is_file():
        return {}
    out = {}
    for phase in json.loads(profile.read_text()).get("phases", []):
        hits = [r for r in phase.get("rows", []) if any(name in r.get("name", "") for name in ATTENTION_KERNELS)]
        share = sum(r.get("share", 0.0) for r in hits)
        out[phase.get("name", "?")] = (sum(r.get("per_step_us", 0.0) for r in hits),
                                       share * 100.0 if share <= 1.0 else share)
    return out


def engagement(profile: Path) -> str:
    if not profile.is_file():
        return ""
    found = json.loads(profile.read_text()).get("engagement", {})
    return "; ".join(f"{op}: {counts}" for op, counts in sorted(found.items()) if op.endswith("_attention"))


def summary(records: list[dict], work: Path) -> str:
    lines = ["# SGLang Triton attention: tuned launch configs vs SGLang's own pick", ""]
    if records:
        r = records[0]
        lines += [f"{r['date']}, {r['gpu']}, Triton {r['triton']}, SGLang {r['sglang']}; Llama-3-8B attention "
                  "(32 q heads, 8 kv heads, head dim 128, bf16). Command: `bash benchmarks/gpu/attention_run.sh OUT`.",
                  ""]
    lines += ["| kernel | bucket | SGLang's pick | chosen | search | final | us SGLang -> chosen | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for r in records:
        verdict = "SGLang's pick is already the best" if r["verdict"] == "sglang-best" else r["verdict"]
        lines.append(f"| {r['kernel']} | {'x'.join(map(str, r['bucket']))} | `{r['sglang_pick']}` | `{r['chosen']}` | "
                     f"{_fmt(r['search_speedup'], '.3f')}x | {_fmt(r['final_speedup'], '.3f')}x | "
                     f"{_fmt(r['sglang_us'], '.1f')} -> {_fmt(r['chosen_us'], '.1f')} | {verdict} |")
    if not records:
        lines.append("| - | no tuning run finished | | | | | | |")
    base, patched = kernel_time(work / "base/profile.json"), kernel_time(work / "patched/profile.json")
    if base or patched:
        lines += ["", "In place (astra-sglang profile, unpatched vs patched): the attention kernels per step",
                  "", "| phase | unpatched us (share) | patched us (share) |", "|---|---|---|"]
        for phase in sorted({*base, *patched}):
            cells = [f"{_fmt(t[0], '.1f')} ({_fmt(t[1], '.1f')}%)" if t else "-" for t in (base.get(phase),
                                                                                         patched.get(phase))]
            lines.append(f"| {phase} | {cells[0]} | {cells[1]} |")
        used = engagement(work / "patched/profile.json")
        if used:
            lines += ["", f"Patch engagement (launches at capture or eager): {used}"]
        lines += ["", "The profiles' own tables (base.md, patched.md) hold the per-kernel times and the comparison."]
    return "\n".join(lines) + "\n"


def step_walls(work: Path) -> str:
    """benchmarks/step_walls.py's per-step host breakdown of both profiles' traces ('' where there are none)."""
    from step_walls import step_times
    from step_walls import summary as walls_summary

    lines = []
    for run in ("base", "patched"):
        files = sorted((work / run / "traces").rglob("*.trace.json*")) if (work / run / "traces").is_dir() else []
        times = [t for f in files for t in step_times(f)]
        if times:
            lines += walls_summary(run, times)
    return "\n".join(lines) + "\n" if lines else ""


def collect(work: Path, out: Path) -> list[str]:
    copied = []
    for src, name in {"tune-decode/tune.md": "tune-decode.md", "tune-extend/tune.md": "tune-extend.md",
                      "base/profile.md": "base.md", "base/profile.json": "base.json",
                      "patched/profile.md": "patched.md", "patched/profile.json": "patched.json"}.items():
        if (work / src).is_file():
            shutil.copyfile(work / src, out / name)
            copied.append(name)
    if (work / "patches").is_dir():  # the tuned launch patches, for a later run's in-place profiles or `launch`
        shutil.make_archive(str(out / "patches"), "gztar", work, "patches")
        copied.append("patches.tar.gz")
    walls = step_walls(work)
    if walls:  # why the prefill step's host wall rose with the launch patches: one slow step, loads, or every step
        (out / "step-walls.txt").write_text(walls)
        copied.append("step-walls.txt")
    records = rows(work)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "summary.md").write_text(summary(records, work))
    return [*copied, "results.jsonl", "summary.md"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/astra-attention"))
    parser.add_argument("--dry-run", action="store_true", help="Print the stages' commands, run nothing.")
    args = parser.parse_args(argv)
    deadline_s, steps, port = float(os.environ.get("DEADLINE", DEFAULT_DEADLINE)), int(os.environ.get("STEPS", 20)), \
        int(os.environ.get("PORT", 30125))
    if args.dry_run:
        for stage in stages(args.work, steps, port):
            print(f"{stage.name} (<= {stage.limit_s:.0f} s): {' '.join(stage.argv)}")
        return 0
    begin = time.monotonic()
    deadline = begin + deadline_s
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run_stage's cleanup then ends the stage's tree
    patches = os.environ.get("PATCHES", "")
    if patches:  # an earlier run's tuned patches (its patches.tar.gz unpacked): profiles only
        shutil.copytree(patches, args.work / "patches")
    for stage in stages(args.work, steps, port):
        if patches and stage.name.startswith("tune-"):
            print(f"== {stage.name}: skipped, the patches in {patches} are used")
            continue
        left = deadline - time.monotonic()
        if stage.name == "base" and left < RESERVE_PROFILES:
            print(f"== profiles skipped: {left:.0f} s left, they need ~{RESERVE_PROFILES} s")
            break
        run_stage(stage, args.work, deadline)
        log = args.work / f"{stage.name}.log"
        if log.is_file():
            (args.out / f"{stage.name}.log.txt").write_text("\n".join(log.read_text(errors="replace")
                                                                     .splitlines()[-60:]) + "\n")
    copied = collect(args.work, args.out)
    print(f"== results in {args.out}: {', '.join(copied)}; {time.monotonic() - begin:.0f} s in all")
    print((args.out / "summary.md").read_text(), flush=True)
    return 0 if rows(args.work) else 1


if __name__ == "__main__":
    sys.exit(main())
