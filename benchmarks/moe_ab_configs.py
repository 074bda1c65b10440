"""The two arms of the Mixtral-shaped serving A/B, as config folders. CPU-testable; the GPU name is an argument.

A: SGLang's best available fused-MoE config for this GPU, as $SGLANG_MOE_CONFIG_DIR: SGLang's own files, with the
   file of the nearest GPU that has one copied under this GPU's name in the running Triton's version folder, where
   SGLang looks first (a GPU with a file of its own gets that file there).
B: the configs our tuning chose on this GPU, written as a patch folder (patches/fused_moe/, kind triton-config)
   that `ab --patches` puts over A's folder. Per GPU:
   - NVIDIA H100 80GB HBM3, Mixtral-8x7B's whole experts (E=8, N=14336): SGLang 0.5.17 ships no H100 file for
     them, so A reads its H200 file (same architecture, sm_90); B is what `astra-sglang tune fused_moe` chose on an
     H100 (benchmarks/results/2026-11-25-h100/mixtral-tune/tune.json, the file in mixtral-profile/).
   - NVIDIA H200, Mixtral-8x7B's experts at TP2 (E=8, N=7168, the shard each of two GPUs serves): A is SGLang's
     own H200 file (triton_3_1_0); B is the file our two tiers wrote against SGLang's whole-space tuner
     (benchmarks/results/2026-11-27-h200/moe-bar/ours-mixtral-8x7b-tp2-1 and -64: batch 1 and 64 tuned, 1.044x
     and 1.025x SGLang's pick by the strict evaluator, SGLang's picks at every other key), merged into one file.

Usage: python3 benchmarks/moe_ab_configs.py OUT --device "NVIDIA H100 80GB HBM3" [--triton 3.6.0]
Writes OUT/baseline (A's $SGLANG_MOE_CONFIG_DIR) and OUT/patches (B's --patches); prints which file A reads. On
another GPU it writes nothing and exits 2: B's configs are the answer of a tuning run on one of those GPUs.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUNE = ROOT / "benchmarks" / "results" / "2026-11-25-h100" / "mixtral-tune" / "tune.json"
TUNED_FILE = ROOT / "benchmarks" / "results" / "2026-11-25-h100" / "mixtral-profile" / "tuned-config.json"
H200_BAR = ROOT / "benchmarks" / "results" / "2026-11-27-h200" / "moe-bar"
H200_RUNS = [H200_BAR / f"ours-mixtral-8x7b-tp2-{b}" / "tiers" / "strict" / f"mixtral-8x7b-tp2-{b}" for b in (1, 64)]
"""The H200 tiers runs B merges: each folder's tune.json and the file its patch wrote."""
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


def baseline_dir(out: Path, sglang_dir: Path, experts: int, inter: int, device: str, triton: str) -> Path:
    """SGLang's config tree with the nearest GPU's file under this GPU's name in Triton's own version folder."""
    from astra_sglang.triton.moe.configs import file_name, version_dir

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(sglang_dir / "configs", out / "configs")
    found = nearest_file(sglang_dir, experts, inter, device)
    if found is None:
        raise SystemExit(f"SGLang ships no config for E={experts},N={inter} on {device} or a GPU near it")
    target = out / "configs" / version_dir(triton) / file_name(experts, inter, device)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(found, target)
    print(f"A reads SGLang's {found.parent.name}/{found.name} as {target.relative_to(out)}")
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


def merged_patches(out: Path, device: str, runs: list[Path]) -> Path:
    """patches/fused_moe/ from tiers runs of one expert shape: the first run's file, each run's tuned keys from its
    own file, and every run's measured speedups in one manifest."""
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
    buckets = sorted((b for r in results for b in r.buckets), key=lambda b: b.tokens)
    merged = results[0].model_copy(update={"buckets": buckets})
    if out.exists():
        shutil.rmtree(out)
    write_config_patch(out, merged, table, device, run_id="+".join(run.name for run in runs))
    return out


ARMS = {"NVIDIA H100 80GB HBM3": ((8, 14336), tuned_patches),
        "NVIDIA H200": ((8, 7168), lambda out, device: merged_patches(out, device, H200_RUNS))}
"""Per GPU: the expert shape (E, N) its tuning ran at, and what writes B's patch folder (out, device)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", required=True, help="torch.cuda.get_device_name(), e.g. 'NVIDIA H100 80GB HBM3'")
    parser.add_argument("--triton", default=None, help="Triton's version (default: the installed one)")
    parser.add_argument("--sglang-configs", type=Path, default=None,
                        help="SGLang's fused_moe config folder (default: the installed SGLang's)")
    args = parser.parse_args(argv)
    from astra_sglang.triton.moe.configs import CONFIG_MODULE, package_dir

    if args.device not in ARMS:
        print(f"moe_ab_configs: B's configs were tuned on {' and '.join(ARMS)}, not on {args.device}: no A/B of "
              "our tuning on this GPU", file=sys.stderr)
        return 2
    device = args.device.replace(" ", "_")
    sglang_dir = args.sglang_configs or (package_dir() / CONFIG_MODULE).parent
    if args.triton is None:
        import triton

        args.triton = triton.__version__
    shape, write_b = ARMS[args.device]
    baseline_dir(args.out / "baseline", sglang_dir, *shape, device, args.triton)
    write_b(args.out / "patches", device)
    print(f"wrote {args.out / 'baseline'} and {args.out / 'patches'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
