"""SGLang's own fused MoE tuner as the bar, in one GPU command (benchmarks/gpu/moe_sglang_bar.sh runs it):

  picks     what SGLang picks itself at each batch size (its config file for this GPU and shape, else its default)
  tuner     SGLang's tuner from the checkout folder given (astra_sglang.triton.moe.sglang_tuner_run), --mode:
            bounded (default: its own tune loop over our ranked configs first, then a seeded random sample of its
            space, stopped at its share of the deadline), full (the script as its users run it, no deadline) or
            exhaustive (sglang_tuner_exhaustive: a cold sample for its users' wall, a warm phase compiling its whole
            space into one shared Triton cache on every core, then its tune loop over the whole space, a process per
            GPU, stopped at its share of the deadline) or cold (the cold sample alone: its users' wall, no best,
            nothing evaluated); per-config costs, wall time, its picks; then, bounded or
            exhaustive, SGLang's pick, its best and ours timed by its script's own benchmark_config in its process;
            or, --tuner-from, not run: its best per batch size from earlier runs on the same GPU and shape
  evaluate  isolated evaluations spread over the GPUs (LocalPool): SGLang tuner's best against SGLang's pick, the
            split-K variants of the tuner's best config against it, ours (--ours) against it; then the splits that
            won, timed again (astra_sglang.triton.moe.bar); an fp8_w8a8 shape by spec fused_moe_fp8, without
            split-K (its kernel has no fp8 path: the report says so)
  report    OUT/bar.jsonl (a header line, the tuner's batch sizes, every comparison row), OUT/tuner.json (bounded
            and exhaustive: per batch size its loop's landscape, every config's time or failure), OUT/bar.md

Ranked configs (--ranked FILE, JSON {batch size: [config codes]}, e.g. our screening's order) go first in the
bounded subset; without it, the configs SGLang ships for this expert shape on other GPUs. Only configs inside
SGLang's space count: SGLang's tuner could not have picked any other.
Usage: python3 benchmarks/moe_sglang_bar.py (--tuner-dir DIR | --tuner-from EARLIER_OUT ...) --out OUT [--preset NAME | --shape ExNxHxK [--quant fp8_w8a8]]
       [--batch-sizes 1,4,16,64] [--gpus 0,1] [--sample 24] [--seed 0] [--deadline 400] [--tuner-share 0.45]
       [--ranked FILE] [--ours FILE] [--mode bounded|full|exhaustive|cold] [--warm-procs N] [--warm-share 0.5]
       [--cold-sample 8] [--cold-seconds 60] [--work DIR]
Triton caches go under --work (default: the temp folder), never under --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.bar import PRESETS, final_request, requests, rows
from astra_sglang.triton.moe.bar_report import summarize, write_report
from astra_sglang.triton.moe.sglang_tuner import TunerScript
from astra_sglang.triton.moe.sglang_tuner_records import earlier_runs
from astra_sglang.triton.moe.sglang_tuner_exhaustive import default_warm_procs, run_cold, run_exhaustive
from astra_sglang.triton.moe.sglang_tuner_run import run_bounded, run_full
from astra_sglang.triton.moe.shapes import QUANTS, MoeShape, parse_buckets
from astra_sglang.triton.moe.space import MoeConfig

EVAL_TIMEOUT_S = 300.0
FINAL_NEEDS_S = 90.0
"""Seconds left that a final evaluation needs (a process start with SGLang's import, compiles, checks, timing)."""


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tuner-dir", type=Path, help="SGLang's benchmark/kernels/fused_moe_triton folder")
    p.add_argument("--tuner-from", type=Path, action="append", default=[], help="an earlier run's OUT (repeatable): "
                   "SGLang's tuner not run again, its best per batch size taken from there (same GPU and shape)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--preset", choices=sorted(PRESETS), default="mixtral-8x7b-tp2")
    p.add_argument("--shape", help="EXPERTSxNxHIDDENxTOPK instead of --preset")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--quant", default="", choices=list(QUANTS), help="with --shape (a preset names its own)")
    p.add_argument("--batch-sizes", default="1,4,16,64")
    p.add_argument("--gpus", help="e.g. 0,1 (default: every visible GPU)")
    p.add_argument("--sample", type=int, default=24, help="random configs of SGLang's space per batch size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline", type=float, default=400.0, help="seconds for the whole run")
    p.add_argument("--tuner-share", type=float, default=0.45, help="of the deadline, for SGLang's tuner")
    p.add_argument("--ranked", type=Path)
    p.add_argument("--ours", type=Path, help="a config file in SGLang's format to compare with the tuner's best")
    p.add_argument("--mode", choices=["bounded", "full", "exhaustive", "cold"], default="bounded",
                   help="cold: the cold sample alone (--cold-sample, --cold-seconds), its users' wall for a shape an "
                   "earlier exhaustive run judged: pass both folders to a later --tuner-from")
    p.add_argument("--full", action="store_true", help="the same as --mode full")
    p.add_argument("--warm-procs", type=int, default=0, help="exhaustive: warm processes per GPU (0: cores / GPUs, "
                   "fewer where GPU memory is short)")
    p.add_argument("--warm-share", type=float, default=0.5, help="exhaustive: of the tuner's time after the cold "
                   "sample, at most this for the warm phase")
    p.add_argument("--cold-sample", type=int, default=8, help="exhaustive, cold: configs drawn per batch size and GPU, "
                   "timed on a cold cache for its users' wall (every GPU samples; 0: none)")
    p.add_argument("--cold-seconds", type=float, default=60.0, help="exhaustive, cold: at most this for the sample, "
                   "its processes' start included (of 30 s in the 2026-11-27 H200 bar, 1-4 configs were sampled)")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "moe-bar-work",
                   help="Triton caches (thousands of kernels in exhaustive mode)")
    args = p.parse_args(argv)
    args.mode = "full" if args.full else args.mode
    if not args.tuner_dir and not args.tuner_from:
        p.error("--tuner-dir (SGLang's tuner to run) or --tuner-from (an earlier run's figures) is needed")
    return args


def shape_of(args) -> MoeShape:
    if args.shape:
        experts, inter, hidden, topk = (int(x) for x in args.shape.lower().split("x"))
        return MoeShape(experts, inter, hidden, topk, args.dtype, args.quant)
    return dataclasses.replace(PRESETS[args.preset], dtype=args.dtype)


def ranked_configs(path: Path | None, shape: MoeShape, tokens: list[int]) -> dict[int, list[dict]]:
    """Per batch size, the configs to put first, as SGLang's dicts."""
    if path:
        codes = {int(k): v for k, v in json.loads(path.read_text()).items()}
        return {t: [MoeConfig.from_code(c).sglang() for c in codes[moe_configs.nearest(codes, t)]] for t in tokens}
    return {t: [c.sglang() for c in moe_configs.shipped_configs(shape.experts, shape.inter, t, dtype=shape.config_dtype)]
            for t in tokens}


def compare_configs(picks: dict, ours: dict[int, MoeConfig] | None, tokens: list[int]) -> dict[int, dict[str, dict]]:
    """Per batch size, the configs timed beside the tuner's best by its own script: SGLang's pick, ours (the
    file's key nearest the batch size, as SGLang reads a file)."""
    out = {t: {"pick": picks[t].config.sglang()} for t in tokens}
    for t in tokens if ours else []:
        out[t]["ours"] = ours[moe_configs.nearest(ours, t)].sglang()
    return out


def header(args, shape: MoeShape, gpus: list[str]) -> dict:
    import torch

    from astra_sglang.triton.moe.sources import sglang_version

    from provenance import command, commit

    return {"kind": "header", "date": dt.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "gpus": gpus,
            "commit": commit(), "sglang": sglang_version(), "triton": moe_configs.triton_version(),
            "shape": shape.describe(), "command": command("benchmarks/moe_sglang_bar.py", sys.argv[1:], args.out)}


def evaluate(gpus: list[str], comparisons) -> list:
    from astra_sglang.optimize.pool.pool import LocalPool

    with LocalPool(gpus) as pool:
        return pool.map([c.request for c in comparisons])


def append(path: Path, found: list) -> list:
    with open(path, "a") as fh:
        for row in found:
            fh.write(json.dumps({"kind": "comparison", **row.model_dump()}) + "\n")
    return found


def main(argv=None) -> Path:
    args = parse(argv)
    started = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    shape, tokens = shape_of(args), parse_buckets(args.batch_sizes)
    from astra_sglang.optimize.pool.devices import visible_gpus

    gpus = visible_gpus(args.gpus)
    head = header(args, shape, gpus)
    picks = {p.tokens: p for p in moe_configs.sglang_picks(shape.experts, shape.inter, shape.hidden, shape.topk,
                                                             tokens, shape.config_dtype)}
    print(f"{shape.describe()} on {head['gpu']} x{len(gpus)}: SGLang picks {picks[tokens[0]].describe()}", flush=True)
    ours = None
    if args.ours:
        ours = {m: MoeConfig.from_sglang(c) for m, c in moe_configs.read(args.ours).items()}
    seconds = args.tuner_share * args.deadline - (time.time() - started)
    compare = compare_configs(picks, ours, tokens)
    earlier = ""
    if args.tuner_from:
        tuner, earlier = earlier_runs(args.tuner_from, head["gpu"], shape.describe(), tokens)
    elif args.mode == "full":
        tuner = run_full(TunerScript.open(args.tuner_dir), shape, tokens, gpus, args.out / "tuner", args.work)
    elif args.mode == "cold":
        tuner = run_cold(TunerScript.open(args.tuner_dir), shape, tokens, gpus, args.out / "tuner", args.cold_sample,
                         args.seed, min(args.cold_seconds, seconds), args.work)
    elif args.mode == "exhaustive":
        tuner = run_exhaustive(TunerScript.open(args.tuner_dir), shape, tokens, gpus, args.out / "tuner", seconds,
                               args.warm_procs or default_warm_procs(shape, gpus), args.warm_share, args.cold_sample,
                               args.cold_seconds, args.seed, compare, args.work)
    else:
        tuner = run_bounded(TunerScript.open(args.tuner_dir), shape, tokens, gpus, args.out / "tuner",
                            ranked_configs(args.ranked, shape, tokens), args.sample, args.seed, seconds, compare,
                            cache_root=args.work)
    (args.out / "tuner.json").write_text(tuner.model_dump_json(indent=1))
    print(f"SGLang's tuner: {tuner.mode}, {tuner.wall_s:.0f} s", flush=True)
    jsonl = args.out / "bar.jsonl"  # written as the stages end: a run cut short keeps what it measured
    with open(jsonl, "w") as fh:
        fh.write(json.dumps(head) + "\n")
        for batch in tuner.batches:  # its landscape only in tuner.json: thousands of configs a batch size
            fh.write(json.dumps({"kind": "tuner", **batch.model_dump(exclude={"landscape", "failed"})}) + "\n")
    best = {b.tokens: MoeConfig.from_sglang(b.best) for b in tuner.batches if b.best}
    left = args.deadline - (time.time() - started)
    note = (f"{shape.quant}: judged by the evaluator's {shape.spec} spec (the weights quantized per expert, static "
            "activation scales; no split-K: its kernel has no fp8 path)." if shape.quantized else "")
    note = " ".join(n for n in (earlier, note) if n)
    comparisons = requests(shape, best, ours, timeout_s=min(EVAL_TIMEOUT_S, left)) if best else []
    found = append(jsonl, rows(shape, best, comparisons, evaluate(gpus, comparisons))) if comparisons else []
    left = args.deadline - (time.time() - started)
    final = final_request(shape, best, found, timeout_s=min(EVAL_TIMEOUT_S, left)) if left > FINAL_NEEDS_S and \
        comparisons else None
    if final:
        found += append(jsonl, rows(shape, best, [final], evaluate(gpus[:1], [final])))
    report = write_report(args.out / "bar.md", head, summarize(picks, tuner, found, ours, shape.weight_bytes),
                          tuner, note)
    print(report.read_text())
    return report


if __name__ == "__main__":
    from astra_sglang.errors import AstraError

    try:
        main()
    except AstraError as exc:
        sys.exit(f"moe_sglang_bar: {exc}")
