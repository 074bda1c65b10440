"""Fused MoE's config space: codes, SGLang's dict form, shared-memory and batch-size pruning, neighbours."""
from __future__ import annotations

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.space import MoeConfig, fits, neighbors, space, useful


@pytest.mark.parametrize("config", [MoeConfig(64, 64, 32, 8), MoeConfig(16, 256, 128, 1, 8, 2)])
def test_codes_and_sglang_dicts_round_trip(config):
    assert MoeConfig.from_code(config.code()) == config
    assert MoeConfig.from_sglang(config.sglang()) == config
    assert config.code().isidentifier() or config.code()[0] == "m"


def test_default_config_leaves_launch_options_to_triton():
    default = MoeConfig.from_sglang({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8})
    assert default.code() == "m64n64k32g8wdsd" and "num_warps" not in default.sglang()
    with pytest.raises(AstraError, match="not a fused MoE config"):
        MoeConfig.from_sglang({"BLOCK_SIZE_M": 64})
    with pytest.raises(AstraError, match="not a fused MoE config code"):
        MoeConfig.from_code("m64n64")


def test_shared_memory_pruning():
    big = MoeConfig(256, 256, 256, 1, 8, 5)
    assert big.smem_bytes() == 4 * (256 * 256 + 256 * 256) * 2 and not fits(big)
    assert fits(MoeConfig(16, 128, 256, 1, 4, 4))  # SGLang's H100 file for E=16 N=2048 holds it: it ran
    assert fits(MoeConfig(64, 64, 64, 1, 4, 3))
    assert all(fits(c) for c in space(4096, 128, 8))


H200_LIMIT = 232448
"""An H200's opt-in shared memory a block (the OutOfResources messages' 'Hardware limit')."""


@pytest.mark.parametrize("code, required", [
    ("m64n256k128g16w8s3", 245760), ("m64n128k128g1w4s5", 245760), ("m128n128k256g1w8s2", 262144),
    ("m64n128k256g16w8s3", 294912), ("m32n128k256g16w4s3", None), ("m16n128k256g64w4s4", None),
    ("m32n256k256g1w8s2", None), ("m64n128k128g1w4s3", None)])
def test_hoppers_wgmma_tiles_hold_every_stage(code, required):
    """On an H200 (2026-11-27, commit 45b7284, Mixtral's experts at batch 64) these failed at load with
    OutOfResources 'Required: <required>' (stages x the A and B tiles, all with 64 rows or more), or ran (None,
    the first three of fewer rows over that size)."""
    config = MoeConfig.from_code(code)
    assert fits(config, H200_LIMIT, wgmma=True) == (required is None)
    if required:
        assert config.smem_bytes(wgmma=True) == required
    assert fits(config, H200_LIMIT)  # the lower bound without wgmma keeps them all


def test_no_config_sglang_ships_for_a_hopper_breaks_the_wgmma_rule():
    root = moe_configs.default_config_dir() / "configs"
    hopper = [p for p in root.glob("triton_*/E=*.json") if any(h in p.name for h in ("H100", "H200", "H800"))]
    checked = 0
    for path in hopper:
        element = 1 if "fp8" in path.name or "int8" in path.name else 2
        try:
            table = moe_configs.read(path)
        except Exception:  # noqa: BLE001 - a file of another kernel's format
            continue
        for config in table.values():
            c = MoeConfig.from_sglang(config)
            assert c.smem_bytes(element, wgmma=True) <= H200_LIMIT, (path.name, c.code())
            checked += 1
    assert checked > 1000


def test_sglangs_shipped_file_keeps_to_the_useful_block_sizes():
    path = next(moe_configs.default_config_dir().glob("configs/triton_*/E=128,N=768,device_name=NVIDIA_H200.json"))
    for tokens, config in moe_configs.read(path).items():  # Qwen3-30B-A3B: 128 experts, top-8
        assert useful(MoeConfig.from_sglang(config), tokens, 128, 8), tokens


def test_space_shrinks_at_small_batches():
    small, large = space(1, 128, 8), space(4096, 128, 8)
    assert {c.block_m for c in small} == {16} and max(c.block_m for c in large) == 256
    assert len(small) < len(large)


def test_neighbors_move_one_knob_one_step():
    config = MoeConfig(64, 64, 64, 8, 4, 3)
    found = neighbors(config)
    assert len(found) == len(set(found)) and config not in found
    for other in found:
        changed = [f for f in ("block_m", "block_n", "block_k", "group_m", "warps", "stages")
                   if getattr(other, f) != getattr(config, f)]
        assert len(changed) == 1
    # from Triton's defaults: the moved config spells them out
    assert all(c.warps and c.stages for c in neighbors(MoeConfig(64, 64, 32, 8)))
