"""The screening order: SGLang's pick first, the configs SGLang ships anywhere next, then the cost model's order;
what cannot fit or is hopeless is dropped with the reason. The cost model is held to SGLang's own tuning: the
configs its files hold for an H200 (each the winner of a full 1,920-config sweep there) come early in the order."""
from __future__ import annotations

import random
import statistics

import pytest
import torch

from astra_sglang.optimize.tuner.order import order
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.optimize.tuner.moe_order import (expected_blocks, gpu_model, infeasible, ordered, predict_us,
                                           shipped_seeds)
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import SPACES, MoeConfig

H200 = gpu_model("NVIDIA H200")
MIXTRAL = MoeShape(8, 14336, 4096, 2)
QWEN3 = MoeShape(128, 768, 2048, 8)


def test_generic_order_first_seeds_then_cost_with_reasons():
    space = list(range(20))
    out = order(first=[7], seeds=[3, 7, 99, 5], space=space, cost=lambda c: abs(c - 10) + 1,
                infeasible=lambda c: "too big" if c in (99, 19, 7) else None, code=str, prune_factor=5.0)
    assert out.configs[:3] == [7, 3, 5] and out.seeds == 2  # the first is screened even where the rules say no
    assert out.pruned["99"] == "too big" and out.pruned["19"] == "too big"
    rest = out.configs[3:]
    assert rest == sorted(rest, key=lambda c: (abs(c - 10) + 1, str(c)))
    assert "0" in out.pruned and "cost model: 11.0x" in out.pruned["0"]  # 11 vs the best 1: past 5x
    assert len(out.configs) + len(out.pruned) == 21  # every config screened or dropped, none twice


@pytest.mark.parametrize("tokens,experts,topk", [(1, 8, 2), (16, 8, 2), (64, 128, 8), (333, 60, 4), (4096, 128, 8)])
@pytest.mark.parametrize("block_m", [16, 64, 256])
def test_expected_blocks_match_random_routing(tokens, experts, topk, block_m):
    gen = torch.Generator().manual_seed(tokens * 7 + block_m)
    counts = []
    for _ in range(200):
        ids = torch.rand(tokens, experts, generator=gen).topk(topk, dim=1).indices.flatten()
        rows = torch.bincount(ids, minlength=experts)
        counts.append(float(((rows + block_m - 1) // block_m).float().mean()))
    assert expected_blocks(tokens, experts, topk, block_m) == pytest.approx(statistics.mean(counts), rel=0.03, abs=0.01)


def test_cost_model_sense():
    small, big = MoeConfig(16, 64, 128, 1, 4, 3), MoeConfig(256, 64, 128, 1, 4, 3)
    assert predict_us(small, 1, QWEN3, H200) < predict_us(big, 1, QWEN3, H200)  # padded rows at decode
    tiled, thin = MoeConfig(128, 256, 64, 16, 8, 4), MoeConfig(16, 32, 64, 1, 4, 2)
    assert predict_us(tiled, 4096, MIXTRAL, H200) < predict_us(thin, 4096, MIXTRAL, H200) / 2  # compute-bound
    assert infeasible(MoeConfig(256, 256, 256, 1, 8, 5), H200).startswith("shared memory")
    assert infeasible(MoeConfig(16, 128, 256, 1, 4, 4), H200) is None


def test_the_h200_order_drops_what_failed_at_load_there():
    """Mixtral's 1,504 ordered configs at batch 64 on an H200 (2026-11-27, commit 45b7284): 184 failed at load
    (OutOfResources), each a tile of 64 rows or more whose every stage does not fit; the order drops exactly as
    many now, and only wgmma tiles (an A100 keeps them)."""
    pick = MoeConfig.from_code("m32n128k128g64w4s3")
    now = ordered(MIXTRAL, 64, pick, gpu_model("NVIDIA H200", 232448), prune=None)
    before = ordered(MIXTRAL, 64, pick, gpu_model("NVIDIA A100-SXM4-80GB", 232448), prune=None)
    assert len(before.codes) == 1504 and len(now.codes) == 1320
    dropped = set(before.codes) - set(now.codes)
    assert all(MoeConfig.from_code(c).block_m >= 64 for c in dropped)
    assert all(now.pruned[c].startswith("shared memory") for c in dropped)


@pytest.mark.parametrize("shape,name", [(MIXTRAL, "triton_3_1_0/E=8,N=14336,device_name=NVIDIA_H200.json"),
                                        (QWEN3, "triton_3_6_0/E=128,N=768,device_name=NVIDIA_H200.json")])
def test_sglangs_h200_winners_come_early_in_the_cost_order(shape, name):
    table = moe_configs.read(moe_configs.default_config_dir() / "configs" / name)
    ranks = []
    for tokens in moe_configs.BATCH_SIZES:
        out = order([], [], SPACES["sglang"](), cost=lambda c: predict_us(c, tokens, shape, H200),
                    infeasible=lambda c: infeasible(c, H200), code=MoeConfig.code)
        winner = MoeConfig.from_sglang(table[moe_configs.nearest(table, tokens)]).code()
        ranks.append(out.codes.index(winner) / len(out.codes))
    assert statistics.median(ranks) < 0.1  # a random order puts them at 0.5
    assert sum(r < 0.25 for r in ranks) >= 14


def test_moe_order_starts_with_the_pick_then_this_shapes_shipped_configs():
    pick = MoeConfig(64, 64, 32, 8)
    out = ordered(MIXTRAL, 64, pick, H200)
    assert out.configs[0] == pick and out.seeds > 50
    same_shape = set()
    for path in (moe_configs.default_config_dir() / "configs").glob("triton_*/E=8,N=14336,*.json"):
        table = moe_configs.read(path)  # every GPU and quantization of this expert shape
        same_shape.add(MoeConfig.from_sglang(table[moe_configs.nearest(table, 64)]))
    same_shape = {c for c in same_shape if not infeasible(c, H200)} - {pick}
    assert len(same_shape) >= 3 and set(out.configs[1:1 + len(same_shape)]) == same_shape
    assert all(why.startswith("shared memory") or why.startswith("cost model") for why in out.pruned.values())
    assert len(set(out.codes)) == len(out.codes)
    sglang = {c.code() for c in SPACES["sglang"]()}
    assert sglang <= set(out.codes) | set(out.pruned)  # the whole of SGLang's space: screened or dropped with why


def test_seeds_hold_every_shipped_file_at_its_nearest_key():
    seeds = set(shipped_seeds(1, QWEN3))
    root = moe_configs.default_config_dir() / "configs"
    files = list(root.glob("triton_*/E=*.json"))
    sample = random.Random(0).sample(files, 20)
    for path in sample:
        table = moe_configs.read(path)
        assert MoeConfig.from_sglang(table[moe_configs.nearest(table, 1)]) in seeds, path.name


def test_an_fp8_shape_seeds_its_own_quantizations_files_first_and_counts_a_byte_an_element():
    fp8 = MoeShape(8, 7168, 4096, 2, quant="fp8_w8a8")
    pick = MoeConfig(64, 64, 32, 8)
    out, plain = ordered(fp8, 64, pick, H200), ordered(MoeShape(8, 7168, 4096, 2), 64, pick, H200)
    own = set()
    for path in (moe_configs.default_config_dir() / "configs").glob("triton_*/E=8,N=7168,*,dtype=fp8_w8a8.json"):
        table = moe_configs.read(path)
        own.add(MoeConfig.from_sglang(table[moe_configs.nearest(table, 64)]))
    own -= {pick}
    assert own and set(out.configs[1:1 + len(own)]) == own
    smem = {k for k, why in out.pruned.items() if why.startswith("shared memory")}
    assert smem < {k for k, why in plain.pruned.items() if why.startswith("shared memory")}  # fp8 tiles: half
    assert all(infeasible(MoeConfig.from_code(k), H200, 1) for k in smem)


@pytest.mark.parametrize("shape", [QWEN3, MoeShape(64, 1408, 2048, 6), MoeShape(8, 7168, 4096, 2)])
def test_batch_1_screens_the_16_row_configs_only(shape):
    """At batch 1 a tile of more than 16 rows makes the same blocks as its 16-row twin, padded: dropped with the
    reason, on Hopper and for unquantized calls only; the pick is screened whatever it is, and batch 2 keeps all."""
    pick = MoeConfig.from_code("m64n128k128g1w4s4")
    one, two = ordered(shape, 1, pick, H200, prune=None), ordered(shape, 2, pick, H200, prune=None)
    assert one.configs[0] == pick and all(c.block_m == 16 for c in one.configs[1:])
    padded = [c for c, why in one.pruned.items() if why.startswith("padded rows only")]
    assert padded and all(MoeConfig.from_code(c).block_m > 16 for c in padded)
    sixteen = {c.code() for c in SPACES["sglang"]() if c.block_m == 16 and not infeasible(c, H200)}
    assert sixteen <= set(one.codes)  # every 16-row config of SGLang's space is still screened
    assert {MoeConfig.from_code(c).block_m for c in two.codes} == {16, 32, 64, 128, 256}
    assert len(one.codes) < len(two.codes) / 3  # the compiles a batch-1 screening saves
    fp8 = MoeShape(shape.experts, shape.inter, shape.hidden, shape.topk, quant="fp8_w8a8")
    assert any(c.block_m > 16 for c in ordered(fp8, 1, pick, H200, prune=None).configs[1:])
    a100 = ordered(shape, 1, pick, gpu_model("NVIDIA A100-SXM4-80GB"), prune=None)
    assert any(c.block_m > 16 for c in a100.configs[1:])


def test_the_batch_1_rule_is_what_the_h200_screens_measured():
    """Every committed H200 screen at batch 1 of an unquantized shape: the fastest config of 32 rows or more was
    2.9-10.3% slower than the fastest of 16, so the rule drops nothing that could have won; and every Hopper bf16
    file SGLang ships picks 16 rows at key 1 (the figures moe_order.padded_only cites)."""
    import gzip
    import importlib.util
    import json
    from pathlib import Path

    bar = Path(__file__).parents[2] / "benchmarks" / "results" / "2026-11-27-h200" / "moe-bar"
    screens = [p for p in bar.glob("ours-*/tiers/screen/*@1.jsonl.gz") if "fp8" not in p.name]
    assert len(screens) == 3
    gaps = []
    for path in screens:
        rows = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
        timed = [(MoeConfig.from_code(r["config"]).block_m, r["us"]) for r in rows
                 if r.get("stage") == "done" and r.get("us") and "+" not in r["config"]]
        gaps.append(min(us for m, us in timed if m > 16) / min(us for m, us in timed if m == 16) - 1)
    assert (round(100 * min(gaps), 1), round(100 * max(gaps), 1)) == (2.9, 10.3)
    if importlib.util.find_spec("sglang") is None:
        return
    hopper = [path for path in (moe_configs.default_config_dir() / "configs").glob("triton_*/E=*.json")
              if "dtype=" not in path.name and any(g in path.name for g in ("H100", "H200", "H800", "H20"))]
    firsts = [table[1] for path in hopper if 1 in (table := moe_configs.read(path))]
    assert len(firsts) == 100 and all(c["BLOCK_SIZE_M"] == 16 for c in firsts)
