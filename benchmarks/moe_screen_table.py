"""The summary of benchmarks/moe_screen_bench.py's rows (OUT/moe_screen.jsonl): the screening phases, the targets
they are held to, and the two tiers against SGLang's shipped pick per batch size (the tiers process's summary, or
an earlier version's tier rows)."""
from __future__ import annotations

import math

TARGETS = {"per_gpu": 10.0, "full_space_s": 300.0, "two_gpu": 1.8}


def _f(value, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def _verdict(ok: bool) -> str:
    return "meets it" if ok else "MISSES it"


def screening(rows: list[dict]) -> list[str]:
    out = ["| shape | phase | GPUs | batch | timed / screened / configs | wall s (first result at) | configs timed/s "
           "per GPU (from the first result) | compile-ahead hit rate | compiles: run, cached (CPU s, processes) | "
           "failed | best (position, found at s) | us: SGLang's pick -> best |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        failed = ", ".join(f"{k} {v}" for k, v in r["failed"].items()) or "-"
        best = f"`{r['best']}` ({r['best_index']}, {_f(r['best_at_s'], '{:.0f}')})" if r["best"] else "-"
        rate = "FAILED" if r.get("failing") else f"{r['per_gpu']:.1f} ({_f(r['steady_per_gpu'])})"
        out.append(f"| {r['shape']} | {r['phase']} | {r['gpus']} | {r['bucket']} | {r.get('timed', '-')} / "
                   f"{r['screened']} / {r['configs']} | {r['wall_s']:.0f} ({_f(r['first_at_s'], '{:.0f}')}) | {rate} | "
                   f"{_f(r['hit_rate'], '{:.0%}')} | {r['compile_jobs'] - r['compile_cached']}, "
                   f"{r['compile_cached']} ({r['compile_s']:.0f}, {r.get('cores') or '-'}) | {failed} | {best} | "
                   f"{_f(r['pick_us'])} -> {_f(r['best_us'])} |")
    return out


def failures(rows: list[dict]) -> list[str]:
    """Each failing stage's first distinct reasons, per phase; a FAILED line for a broken phase."""
    out = []
    for r in rows:
        where = f"{r['shape']} {r.get('phase') or 'tiers, batch size ' + str(r.get('tokens'))}"
        if r.get("failing") and r.get("kind") == "phase":
            out.append(f"- **FAILED**: {where}: {r['failed'][r['failing']]} of {r['screened']} configs failed at "
                       f"{r['failing']}: its rate is no throughput and it is held to no target")
        elif r.get("failing"):
            out.append(f"- **FAILED**: {where}: most configs failed at {r['failing']}")
        for stage, reasons in (r.get("reasons") or {}).items():
            out += [f"- {where}, {stage} ({r['failed'].get(stage, 0)}): `{reason}`" for reason in reasons]
    return out


def targets(rows: list[dict]) -> list[str]:
    by = {(r["shape"], r["phase"]): r for r in rows if not r.get("failing")}
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        cold, warm1, warm2 = (by.get((shape, p)) for p in ("cold", "warm1", "warm2"))
        if warm1:
            out.append(f"- {shape}: {warm1['per_gpu']:.1f} configs timed/s on one GPU at batch {warm1['bucket']}, kernels "
                       f"compiled (target >= {TARGETS['per_gpu']:g}: {_verdict(warm1['per_gpu'] >= TARGETS['per_gpu'])})")
        if cold:
            whole = cold["screened"] == cold["configs"]
            text = (f"all {cold['configs']} configs in {cold['wall_s']:.0f} s" if whole else
                    f"cut by the deadline after {cold['screened']} of {cold['configs']} configs in {cold['wall_s']:.0f} s")
            out.append(f"- {shape}: SGLang's space on one GPU from a cold start (compiling on the CPU cores): {text}; "
                       f"{cold['dropped']} more cannot fit in shared memory, dropped unbuilt (target <= "
                       f"{TARGETS['full_space_s']:.0f} s: {_verdict(whole and cold['wall_s'] <= TARGETS['full_space_s'])}); "
                       f"compile-ahead hit rate {_f(cold['hit_rate'], '{:.0%}')}")
        if warm1 and warm2 and warm1["screened"] == warm2["screened"] == warm1["configs"]:
            speedup = warm1["wall_s"] / warm2["wall_s"]
            steady = (warm2["steady_per_gpu"] * 2 / warm1["steady_per_gpu"]
                      if warm1["steady_per_gpu"] and warm2["steady_per_gpu"] else None)
            out.append(f"- {shape}: two GPUs {speedup:.2f}x one on the same {warm1['configs']} configs, wall to wall "
                       f"(target >= {TARGETS['two_gpu']:g}: {_verdict(speedup >= TARGETS['two_gpu'])}); "
                       f"{_f(steady, '{:.2f}x')} over the timed part (from the first result on); the workers were "
                       f"started and the batch size prepared before either wall ({warm1['start_s']:.0f} s, "
                       f"{warm2['start_s']:.0f} s), and the second GPU loads the kernels from the disk cache where "
                       f"the first has them loaded since the cold phase")
        elif warm1 and warm2:
            out.append(f"- {shape}: two GPUs vs one not compared: a warm phase was cut by the deadline")
    return out


def tiers(rows: list[dict]) -> list[str]:
    if not rows:
        return ["Not run (the deadline came first, or --phases left it out)."]
    out = ["| shape | batch size | SGLang's pick (from) | screened | screened: pick / best | written | final speedup "
           "(isolated evaluator) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        screened = f"{r['screened']} (FAILED: {r['failing']})" if r.get("failing") else r["screened"]
        out.append(f"| {r['shape']} | {r['tokens']} | `{r['pick']}` ({r['pick_source']}) | {screened} | "
                   f"{_f(r['screen_ratio'], '{:.3f}x')} | {r['verdict']} `{r['chosen']}` | "
                   f"{_f(r['final_speedup'], '{:.3f}x')} |")
    for shape in dict.fromkeys(r["shape"] for r in rows):
        mine = [r for r in rows if r["shape"] == shape]
        won = [r for r in mine if r["verdict"] == "tuned" and r["final_speedup"]]
        if won:
            geo = math.exp(sum(math.log(r["final_speedup"]) for r in won) / len(won))
            out.append(f"\n{shape}: a config beats SGLang's shipped pick at {len(won)} of {len(mine)} batch sizes "
                       f"(geomean {geo:.3f}x there); SGLang's pick stays at the others.")
        else:
            out.append(f"\n{shape}: SGLang's pick is not beaten at any batch size measured: nothing is written.")
    return out


def render(rows: list[dict], header: str, tiers_text: str | None = None) -> str:
    """`tiers_text`: the tiers process's own summary (benchmarks/moe_tiers_bench.py's tiers.md), its last section;
    rows of kind "tier" (an earlier version's) are rendered there instead."""
    phases = [r for r in rows if r.get("kind") == "phase"]
    tier_rows = [r for r in rows if r.get("kind") == "tier"]
    lines = ["# Fused MoE screening tier", "", header, "", "## Screening", ""]
    lines += screening(phases) if phases else ["No screening phase finished."]
    broken = failures(phases + tier_rows)
    if broken:
        lines += ["", "## Failures (each failing stage's first distinct reasons)", ""] + broken
    lines += ["", "## Targets", ""] + (targets(phases) or ["No phase to hold to them."])
    lines += ["", "## Two tiers against SGLang's shipped pick", ""]
    if tiers_text and not tier_rows:
        lines += [line for line in tiers_text.splitlines() if not line.startswith("# ")]
    else:
        lines += tiers(tier_rows)
    return "\n".join(lines) + "\n"
