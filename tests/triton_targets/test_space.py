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
