"""The two arms of the Mixtral-shaped serving A/B, as config folders. CPU-testable; the GPU name is an argument.

A: SGLang's best available fused-MoE config for this GPU. SGLang 0.5.17 ships no file for Mixtral's expert
   shape (E=8, N=14336) on an H100, so its server runs its default config; its nearest GPU with a shipped file is
   the H200 (same architecture, sm_90). A's folder, for $SGLANG_MOE_CONFIG_DIR, holds SGLang's own files with
   that file copied under this GPU's name in the running Triton's version folder, where SGLang looks first.
B: the configs `astra-sglang tune fused_moe` chose on an H100 (benchmarks/results/2026-11-25-h100/mixtral-tune/:
   tune.json, and the file itself in mixtral-profile/tuned-config.json), written as a patch folder
   (patches/fused_moe/, kind triton-config) that `ab --patches` puts over A's folder.

Usage: python3 benchmarks/moe_ab_configs.py OUT --device "NVIDIA H100 80GB HBM3" [--triton 3.6.0]
Writes OUT/baseline (A's $SGLANG_MOE_CONFIG_DIR) and OUT/patches (B's --patches); prints which file A reads.
On another GPU it writes nothing and exits 2: B's configs are the answer of a tuning run on that H100, not on this
GPU (on an H200, SGLang ships its own tuned file for the shape, and our tiers there kept SGLang's pick).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUNE = ROOT / "benchmarks" / "results" / "2026-11-25-h100" / "mixtral-tune" / "tune.json"
TUNED_FILE = ROOT / "benchmarks" / "results" / "2026-11-25-h100" / "mixtral-profile" / "tuned-config.json"
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", required=True, help="torch.cuda.get_device_name(), e.g. 'NVIDIA H100 80GB HBM3'")
    parser.add_argument("--triton", default=None, help="Triton's version (default: the installed one)")
    parser.add_argument("--sglang-configs", type=Path, default=None,
                        help="SGLang's fused_moe config folder (default: the installed SGLang's)")
    args = parser.parse_args(argv)
    from astra_sglang.triton.moe.configs import CONFIG_MODULE, package_dir
    from astra_sglang.triton.results import TuneResult

    tuned_on = TuneResult.model_validate_json(TUNE.read_text()).gpu
    if args.device != tuned_on:
        print(f"moe_ab_configs: B's configs were tuned on {tuned_on}, not on {args.device}: no A/B of our tuning "
              "on this GPU", file=sys.stderr)
        return 2
    device = args.device.replace(" ", "_")
    sglang_dir = args.sglang_configs or (package_dir() / CONFIG_MODULE).parent
    if args.triton is None:
        import triton

        args.triton = triton.__version__
    result_shape = (8, 14336)
    baseline_dir(args.out / "baseline", sglang_dir, *result_shape, device, args.triton)
    tuned_patches(args.out / "patches", device)
    print(f"wrote {args.out / 'baseline'} and {args.out / 'patches'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
