"""The two arms of a fused-MoE serving A/B, as config folders. CPU-testable; the GPU name is an argument.

A: SGLang's config for the expert shape on this GPU, as $SGLANG_MOE_CONFIG_DIR: SGLang's config tree with A's file
   in the running Triton's version folder, where SGLang looks first.
B: the configs our tuning chose on this GPU, written as a patch folder (patches/fused_moe/, kind triton-config)
   that `ab --patches` puts over A's folder. Per shape (--shape) and GPU:
   - mixtral, NVIDIA H100 80GB HBM3, Mixtral-8x7B's whole experts (E=8, N=14336): SGLang 0.5.17 ships no H100 file
     for them, so A reads its H200 file (same architecture, sm_90) under the H100's name; B is what
     `astra-sglang tune fused_moe` chose on an H100 (benchmarks/results/2026-11-25-h100/mixtral-tune/tune.json,
     the file in mixtral-profile/).
   - mixtral, NVIDIA H200, Mixtral-8x7B's experts at TP2 (E=8, N=7168, the shard each of two GPUs serves): A is
     SGLang's own H200 file (triton_3_1_0); B is the file our two tiers wrote against SGLang's whole-space tuner
     (benchmarks/results/2026-11-27-h200/moe-bar/ours-mixtral-8x7b-tp2-1 and -64: batch 1 and 64 tuned, 1.044x
     and 1.025x SGLang's pick by the strict evaluator, SGLang's picks at every other key), merged into one file.
   - dsv2lite, NVIDIA H200, DeepSeek-V2-Lite's routed experts (E=64, N=1408), for which SGLang ships no file on
     any GPU (it runs its default config): A is the file SGLang's own tuner writes when run at batch sizes 1 and
     64, its best at each, read from its committed run (moe-bar/deepseek-v2-lite-1-64; at 64 its loop reached 403
     of its 1,920 configs before the deadline, so its best there is the best of those); B is ours at the same
     keys, from our tiers runs at 1 and 64 (moe-bar/ours-deepseek-v2-lite-1 and -64). SGLang's tuner was run at
     1 and 64 only, so both files hold those two keys and no other, and a server's other batch sizes read the
     nearest of them in both arms: the arms differ only where the two tuners' configs differ. By the strict
     evaluator (moe-bar/summary.md), ours is 1.052x SGLang tuner's best at batch 1 and 0.997x at 64, where both
     tuners chose the same config (one config timed against itself).

Usage: python3 benchmarks/moe_ab_configs.py OUT --device "NVIDIA H100 80GB HBM3" [--shape mixtral] [--triton 3.6.0]
Writes OUT/baseline (A's $SGLANG_MOE_CONFIG_DIR) and OUT/patches (B's --patches); prints which file A reads. On
another GPU it writes nothing and exits 2: B's configs are the answer of a tuning run on one of those GPUs. Under
another Triton than B's files were tuned with it exits 1: SGLang would read A's file in both arms.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from functools import partial
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
TUNE = ROOT / "benchmarks" / "results" / "2026-11-25-h100" / "mixtral-tune" / "tune.json"
TUNED_FILE = ROOT / "benchmarks" / "results" / "2026-11-25-h100" / "mixtral-profile" / "tuned-config.json"
H200_BAR = ROOT / "benchmarks" / "results" / "2026-11-27-h200" / "moe-bar"


def tiers_runs(name: str) -> list[Path]:
    """The committed H200 tiers runs of a bar preset at batch 1 and 64: each folder's tune.json and the file its
    patch wrote."""
    return [H200_BAR / f"ours-{name}-{b}" / "tiers" / "strict" / f"{name}-{b}" for b in (1, 64)]


H200_RUNS = tiers_runs("mixtral-8x7b-tp2")
"""The H200 tiers runs the Mixtral B merges."""
DSV2_RUNS = tiers_runs("deepseek-v2-lite")
"""Ours at DeepSeek-V2-Lite's expert shape: the dsv2lite B."""
DSV2_BAR = H200_BAR / "deepseek-v2-lite-1-64"
"""SGLang's own tuner at DeepSeek-V2-Lite's expert shape, batch 1 and 64: the dsv2lite A."""
NEAREST = {"NVIDIA_H100_80GB_HBM3": ["NVIDIA_H200", "NVIDIA_H800", "NVIDIA_H20"],
           "NVIDIA_H200": ["NVIDIA_H100_80GB_HBM3", "NVIDIA_H800", "NVIDIA_H20"]}
"""Shipped files to borrow for a GPU without one of its own, nearest first (same architecture)."""


def nearest_file(sglang_dir: Path, experts: int, inter: int, device: str) -> Path | None:
    """SGLang's file for this GPU, else for the nearest one that has it, newest Triton version first."""
    from astra_sglang.triton.moe.configs import file_name

    versions = sorted((sglang_dir / "configs").glob("triton_*"), reverse=True,
                      key=lambda p: tuple(int(x) for x in p.name.removeprefix("triton_").split("_")))
    for name in [device, *NEAREST.get(device, [])]:
        for folder in versions:
            path = folder / file_name(experts, inter, name)
            if path.is_file():
                return path
    return None


def sglang_tree(out: Path, sglang_dir: Path, experts: int, inter: int, device: str, triton: str) -> Path:
    """SGLang's config tree copied to `out`; returns where A's file goes there: this GPU's name in Triton's own
    version folder."""
    from astra_sglang.triton.moe.configs import file_name, version_dir

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(sglang_dir / "configs", out / "configs")
    target = out / "configs" / version_dir(triton) / file_name(experts, inter, device)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def baseline_dir(out: Path, sglang_dir: Path, experts: int, inter: int, device: str, triton: str) -> Path:
    """SGLang's config tree with the nearest GPU's file under this GPU's name in Triton's own version folder."""
    found = nearest_file(sglang_dir, experts, inter, device)
    if found is None:
        raise SystemExit(f"SGLang ships no config for E={experts},N={inter} on {device} or a GPU near it")
    target = sglang_tree(out, sglang_dir, experts, inter, device, triton)
    shutil.copyfile(found, target)
    print(f"A reads SGLang's {found.parent.name}/{found.name} as {target.relative_to(out)}")
    return out


def tuner_dir(out: Path, sglang_dir: Path, device: str, triton: str, bar: Path, preset: str,
              keys: list[int]) -> Path:
    """SGLang's config tree with the file its tuner writes at batch sizes `keys`: its best at each, from its
    committed run in `bar` (refused in one line where that run was on another GPU or shape, or lacks a key)."""
    from astra_sglang.errors import AstraError
    from astra_sglang.triton.moe.bar import PRESETS
    from astra_sglang.triton.moe.configs import write
    from astra_sglang.triton.moe.sglang_tuner_records import earlier_runs
    from astra_sglang.triton.moe.space import MoeConfig

    shape = PRESETS[preset]
    run, _ = earlier_runs([bar], device, shape.describe(), keys)
    if missing := [b.tokens for b in run.batches if not b.best]:
        raise AstraError(f"SGLang's tuner found no config at batch size(s) {missing} in {bar}")
    table = {b.tokens: MoeConfig.from_sglang(b.best) for b in run.batches}
    target = sglang_tree(out, sglang_dir, shape.experts, shape.inter, device, triton)
    write(target, table)
    print(f"A reads SGLang tuner's best from {bar.name} (keys {', '.join(map(str, table))}) as "
          f"{target.relative_to(out)}")
    return out


def tuned_patches(out: Path, device: str) -> Path:
    """patches/fused_moe/ from the committed tuning run (its file and measured speedups)."""
    from astra_sglang.triton.moe.patch import write_config_patch
    from astra_sglang.triton.moe.configs import read
    from astra_sglang.triton.results import TuneResult
    from astra_sglang.triton.moe.space import MoeConfig

    result = TuneResult.model_validate_json(TUNE.read_text())
    table = {k: MoeConfig.from_sglang(v) for k, v in read(TUNED_FILE).items()}
    if out.exists():
        shutil.rmtree(out)
    write_config_patch(out, result, table, device, run_id="2026-11-25-h100/mixtral-tune")
    return out


def merged_patches(out: Path, device: str, runs: list[Path], keys: list[int] | None = None) -> Path:
    """patches/fused_moe/ from tiers runs of one expert shape: the first run's file, each run's tuned keys from its
    own file, and every run's measured speedups in one manifest; only `keys` kept where given."""
    from astra_sglang.triton.moe.configs import read
    from astra_sglang.triton.moe.patch import write_config_patch
    from astra_sglang.triton.moe.space import MoeConfig
    from astra_sglang.triton.results import TuneResult

    results = [TuneResult.model_validate_json((run / "tune.json").read_text()) for run in runs]
    if len({json.dumps(r.shape, sort_keys=True) for r in results}) != 1:
        raise SystemExit(f"moe_ab_configs: the runs tuned different shapes: {[r.shape for r in results]}")
    table: dict[int, MoeConfig] = {}
    for run, result in zip(runs, results):
        files = sorted((run / "patches" / "fused_moe" / "configs").rglob("*.json"))
        if len(files) != 1:
            raise SystemExit(f"moe_ab_configs: {run} holds {len(files)} config files, not one")
        file = {k: MoeConfig.from_sglang(v) for k, v in read(files[0]).items()}
        table = table or dict(file)
        table.update({b.tokens: file[b.tokens] for b in result.buckets if b.verdict == "tuned"})
    if keys is not None:
        if missing := sorted(set(keys) - set(table)):
            raise SystemExit(f"moe_ab_configs: the runs' files hold no key {missing}")
        table = {k: table[k] for k in keys}
    buckets = sorted((b for r in results for b in r.buckets), key=lambda b: b.tokens)
    merged = results[0].model_copy(update={"buckets": buckets})
    if out.exists():
        shutil.rmtree(out)
    write_config_patch(out, merged, table, device, run_id="+".join(run.name for run in runs))
    return out


def tuned_keys(runs: list[Path]) -> list[int]:
    """The batch sizes tiers runs tuned (each run's tune.json)."""
    from astra_sglang.triton.results import TuneResult

    return sorted({b.tokens for run in runs for b in TuneResult.model_validate_json(
        (run / "tune.json").read_text()).buckets if b.verdict == "tuned"})


def nearest_arms(experts: int, inter: int, write_b: Callable[[Path, str], Path]) -> Callable:
    """A: the shipped file nearest this GPU; B: `write_b`'s patch folder."""
    def write(out: Path, sglang_dir: Path, device: str, triton: str) -> None:
        baseline_dir(out / "baseline", sglang_dir, experts, inter, device.replace(" ", "_"), triton)
        write_b(out / "patches", device.replace(" ", "_"))
    return write


def tuner_arms(bar: Path, preset: str, runs: list[Path]) -> Callable:
    """A: SGLang tuner's best from its run of bar preset `preset` in `bar`; B: ours from tiers `runs`; both at the
    keys the runs tuned and no other."""
    def write(out: Path, sglang_dir: Path, device: str, triton: str) -> None:
        keys = tuned_keys(runs)
        tuner_dir(out / "baseline", sglang_dir, device, triton, bar, preset, keys)
        merged_patches(out / "patches", device, runs, keys)
    return write


ARMS = {"mixtral": {"NVIDIA H100 80GB HBM3": nearest_arms(8, 14336, tuned_patches),
                    "NVIDIA H200": nearest_arms(8, 7168, partial(merged_patches, runs=H200_RUNS))},
        "dsv2lite": {"NVIDIA H200": tuner_arms(DSV2_BAR, "deepseek-v2-lite", DSV2_RUNS)}}
"""Per shape and GPU: what writes both arms (out, SGLang's config folder, device, Triton's version)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", required=True, help="torch.cuda.get_device_name(), e.g. 'NVIDIA H100 80GB HBM3'")
    parser.add_argument("--shape", choices=sorted(ARMS), default="mixtral", help="the expert shape (default mixtral)")
    parser.add_argument("--triton", default=None, help="Triton's version (default: the installed one)")
    parser.add_argument("--sglang-configs", type=Path, default=None,
                        help="SGLang's fused_moe config folder (default: the installed SGLang's)")
    args = parser.parse_args(argv)
    from astra_sglang.errors import AstraError
    from astra_sglang.triton.moe.configs import CONFIG_MODULE, package_dir, version_dir

    arms = ARMS[args.shape]
    if args.device not in arms:
        print(f"moe_ab_configs: B's configs were tuned on {' and '.join(arms)}, not on {args.device}: no A/B of "
              "our tuning on this GPU", file=sys.stderr)
        return 2
    sglang_dir = args.sglang_configs or (package_dir() / CONFIG_MODULE).parent
    if args.triton is None:
        import triton

        args.triton = triton.__version__
    try:
        arms[args.device](args.out, sglang_dir, args.device, args.triton)
    except AstraError as exc:
        print(f"moe_ab_configs: {exc}", file=sys.stderr)
        return 1
    # SGLang reads the running Triton's folder first: B's files elsewhere would leave A's file served in both arms
    if stray := sorted({p.parent.name for p in (args.out / "patches").rglob("configs/triton_*/*.json")}
                       - {version_dir(args.triton)}):
        print(f"moe_ab_configs: B's files are for {', '.join(stray)}, this Triton is {args.triton}: SGLang would read "
              f"A's {version_dir(args.triton)} file in both arms", file=sys.stderr)
        return 1
    print(f"wrote {args.out / 'baseline'} and {args.out / 'patches'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
