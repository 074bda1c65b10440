"""The short table of a fused MoE run (benchmarks/moe_run.py): per batch size the config SGLang picks and what
the tuner measured against it, then the fused MoE kernel's time per scheduler step in the server, unpatched
and patched. Reads OUT/tune.json and OUT/{base,patched}.json; prints markdown.

Usage: python3 benchmarks/moe_summary.py OUT
"""
from __future__ import annotations

import sys
from pathlib import Path

from astra_sglang.optimize.tuner.report import VERDICTS
from astra_sglang.profile.compare import compare
from astra_sglang.profile.records import Profile
from astra_sglang.triton.results import TuneResult

OP = "fused_moe"


def _f(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def kernel_table(tune: TuneResult) -> list[str]:
    s = tune.shape
    lines = [f"fused_moe E={s['experts']} N={s['inter']} hidden={s['hidden']} top-{s['topk']} {s['dtype']}: "
             f"{tune.gpu}, Triton {tune.triton}, SGLang {tune.sglang}, {tune.date}; {tune.evaluations} isolated "
             f"evaluations in {tune.seconds:.0f} s. Speedups against the config SGLang picks itself, timed side by "
             "side in one process (CUDA-graph replay, L2 cold); final: a last evaluation with every check.", "",
             "| M | SGLang's pick | picked from | written | search best | final speedup | us, SGLang -> written |",
             "|---|---|---|---|---|---|---|"]
    for b in tune.buckets:
        us = f"{b.pick_us:.1f} -> {b.final_us:.1f}" if b.pick_us and b.final_us else "-"
        lines.append(f"| {b.tokens} | `{b.pick}` | {b.pick_source} | {VERDICTS[b.verdict]} | "
                     f"{_f(b.best_speedup, '{:.3f}x')} | {_f(b.final_speedup, '{:.3f}x')} | {us} |")
    return lines


def inplace_table(base: Profile, patched: Profile) -> list[str]:
    lines = ["", "In the server (astra-sglang profile, GPU time per scheduler step; the patched run scaled to the "
             "unpatched run's tokens per step):", "",
             "| load | tokens a step | fused_moe before us | after us | change | its share before | GPU ms a step, before -> after |",
             "|---|---|---|---|---|---|---|"]
    for delta in compare(base, patched):
        row = next((o for o in delta.ops if o.op == OP), None)
        phase = base.phase(delta.phase)
        share = sum(r.share for r in phase.rows if r.op == OP) if phase else None
        if row is None:
            lines.append(f"| {delta.phase} | {delta.tokens_before:.0f} | - | - | - | - | - |")
            continue
        lines.append(f"| {delta.phase} | {delta.tokens_before:.0f} | {row.before_us:.1f} | {row.after_us:.1f} | "
                     f"{row.change_pct:+.1f}% | {_f(share and 100 * share, '{:.1f}%')} | "
                     f"{delta.gpu_before_us / 1e3:.2f} -> {delta.gpu_after_us / 1e3:.2f} |")
    counts = patched.engagement.get(OP)
    if counts:
        lines += ["", f"Config lookups in the patched server: {counts.get('kernel_calls', 0)} of "
                      f"{counts.get('calls', 0)} answered by the tuned file."]
    return lines


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    lines: list[str] = []
    tune_json, base_json, patched_json = (out / n for n in ("tune.json", "base.json", "patched.json"))
    if tune_json.is_file():
        tune = TuneResult.model_validate_json(tune_json.read_text())
        lines += kernel_table(tune)
        if not tune.config_file:
            lines += ["", "No config beat SGLang's own pick by the margin: nothing was patched in."]
    elif patched_json.is_file():
        lines.append("tuning skipped: the patched run used the configs of an earlier `astra-sglang tune` (PATCHES)")
    else:
        lines.append("no tuning result (tune.json): see the tune stage's log above")
    if base_json.is_file() and patched_json.is_file():
        base, patched = (Profile.model_validate_json(p.read_text()) for p in (base_json, patched_json))
        lines += inplace_table(base, patched)
    elif base_json.is_file():
        base = Profile.model_validate_json(base_json.read_text())
        for phase in base.phases:
            row = next((r for r in phase.rows if r.op == OP), None)
            lines.append(f"unpatched {phase.name}: fused_moe_kernel "
                         + (f"{row.per_step_us:.1f} us a step, {100 * row.share:.1f}% of GPU time" if row else "absent"))
    print("\n".join(lines))
    return 0 if tune_json.is_file() or patched_json.is_file() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
