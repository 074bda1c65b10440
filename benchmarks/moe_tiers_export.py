"""From a two-tier run's folder (benchmarks/moe_tiers_bench.py), what the bar (benchmarks/moe_sglang_bar.py) takes
for one shape:

  ranked.json  {batch size: [config codes]}: the configs screened there that passed, fastest first (--top of them),
               for SGLang's bounded tuner to try first (--ranked)
  ours.json    SGLang's config-file format {batch size: config}, every batch size the run planned: the strict
               tier's verdict where it judged (a tuned config, or SGLang's pick kept), else SGLang's pick (a
               screening figure never ships on its own: a batch size left untuned keeps what SGLang runs there);
               ours.md says which batch size took which and why (--ours)

Usage: python3 benchmarks/moe_tiers_export.py TIERS_OUT SHAPE OUT_DIR [--top 16]
"""
from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.optimize.tuner.moe_tiers_records import SCREEN_DIR, Records, unit_name
from astra_sglang.optimize.tuner.two_tier import BucketScreen
from astra_sglang.triton.moe.space import MoeConfig

JUDGED = ("tuned", "sglang-best")


def left_why(plan: dict, shape: str, tokens: int, verdict) -> str:
    """Why a batch size keeps SGLang's pick: its verdict, the budget's deferral, or the deadline."""
    if verdict is not None:
        return f"left untuned (strict tier: {verdict.verdict})"
    if unit_name(shape, tokens) in plan.get("deferred", []):
        return "left untuned (deferred: the budget did not fit it)"
    return "left untuned (screened, not judged by the strict tier before the deadline)"


def export(tiers: Path, shape: str, out: Path, top: int = 16) -> tuple[Path, Path]:
    records = Records(tiers)
    verdicts = {t: v for (name, t), v in records.verdicts().items() if name == shape}
    plan = json.loads((tiers / "plan.json").read_text()) if (tiers / "plan.json").is_file() else {}
    # SGLang's pick ({"config", "from"}) at every batch size the run planned, deferred ones included
    picks = {int(t): pick for t, pick in plan.get("picks", {}).get(shape, {}).items()}
    ranked, ours, lines = {}, {}, []
    # every batch size screened, from the screen files (a unit cut by the deadline has no units.jsonl row)
    units = [f.stem for f in (tiers / SCREEN_DIR).glob(f"{glob.escape(shape)}@*.jsonl") if "+" not in f.stem]
    screened = {int(u.partition("@")[2]) for u in units}
    for tokens in sorted(screened):
        passed = BucketScreen.of(tokens, records.known(unit_name(shape, tokens))).ranked()
        ranked[tokens] = [s.config for s in passed[:top]]
    for tokens in sorted(screened | set(verdicts) | set(picks)):
        verdict = verdicts.get(tokens)
        if verdict and verdict.verdict in JUDGED:
            code, why = verdict.chosen, f"strict tier: {verdict.verdict}"
        elif verdict or tokens in picks:
            pick = verdict.pick if verdict else picks[tokens]["config"]
            code, why = pick, f"SGLang's pick, {left_why(plan, shape, tokens, verdict)}"
        else:
            continue  # a resumed run's batch size with neither a verdict nor a plan here
        ours[tokens] = MoeConfig.from_code(code.partition("+")[0]).sglang()
        lines.append(f"| {tokens} | `{code}` | {why} |")
    if not ours:
        raise AstraError(f"{tiers} holds no batch size of shape {shape!r} (no verdict, no plan)")
    out.mkdir(parents=True, exist_ok=True)
    (out / "ranked.json").write_text(json.dumps({str(t): ranked[t] for t in sorted(ranked)}, indent=1) + "\n")
    (out / "ours.json").write_text(json.dumps({str(t): ours[t] for t in sorted(ours)}, indent=4) + "\n")
    (out / "ours.md").write_text("| batch size | config | from |\n|---|---|---|\n" + "\n".join(lines) + "\n")
    return out / "ranked.json", out / "ours.json"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("tiers", type=Path)
    p.add_argument("shape")
    p.add_argument("out", type=Path)
    p.add_argument("--top", type=int, default=16)
    args = p.parse_args(argv)
    for path in export(args.tiers, args.shape, args.out, args.top):
        print(path)


if __name__ == "__main__":
    main()
