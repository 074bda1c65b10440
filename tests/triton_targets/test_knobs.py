"""The split-K knob as a dimension of the config space: codes, config-file entries, and the values tried."""
from __future__ import annotations

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe import knobs
from astra_sglang.triton.moe.knobs import SplitK, Variant
from astra_sglang.triton.moe.space import MoeConfig

CONFIG = MoeConfig(16, 64, 128, 1, 4, 4)


@pytest.mark.parametrize("variant, code", [
    (Variant(CONFIG), "m16n64k128g1w4s4"),
    (Variant(CONFIG, SplitK(1, 4)), "m16n64k128g1w4s4su1sd4"),
    (Variant(MoeConfig(64, 64, 32, 8), SplitK(2, 16)), "m64n64k32g8wdsdsu2sd16"),
])
def test_codes_round_trip(variant, code):
    assert variant.code() == code and Variant.from_code(code) == variant
    assert code.isidentifier()


def test_file_entries_carry_the_splits_as_extra_keys():
    variant = Variant(CONFIG, SplitK(1, 8))
    entry = variant.file_entry()
    assert entry == {**CONFIG.sglang(), "SPLIT_K_DOWN": 8}
    assert Variant.from_file_entry(entry) == variant and knobs.strip(entry) == CONFIG.sglang()
    assert Variant(CONFIG).file_entry() == CONFIG.sglang()  # no split: SGLang's entry exactly


def test_a_split_below_one_is_refused():
    with pytest.raises(AstraError, match="at least 1"):
        SplitK(0, 2)


@pytest.mark.parametrize("tokens, experts, topk, block_m, block_n, n, blocks", [
    (1, 8, 2, 16, 64, 4096, 128),     # Mixtral's down projection at batch 1: 2 experts x 64 N-blocks
    (256, 8, 2, 16, 64, 4096, 2048),  # 8 experts x 4 M-blocks x 64
    (1, 128, 8, 16, 64, 2048, 256),   # Qwen3-30B-A3B: 8 experts hit x 32
])
def test_expected_blocks(tokens, experts, topk, block_m, block_n, n, blocks):
    assert knobs.expected_blocks(tokens, experts, topk, block_m, block_n, n) == pytest.approx(blocks, rel=0.02)


def test_splits_are_tried_where_blocks_are_few_and_k_is_long():
    assert knobs.split_values(128, 14336, 128) == [1, 2, 4]
    assert knobs.split_values(32, 14336, 128) == [1, 2, 4, 8, 16]
    assert knobs.split_values(2048, 14336, 128) == [1]
    assert knobs.split_values(32, 768, 128) == [1, 2]  # 768 = 6 tiles: 2 splits of 3, not 4 of 1.5
    assert knobs.split_values(100, 14336, 128, sms=16) == [1]


def test_extend_gives_the_config_first_then_its_splits():
    mixtral = dict(experts=8, inter=14336, hidden=4096, topk=2)
    variants = knobs.extend(CONFIG, 1, **mixtral)
    assert variants[0] == Variant(CONFIG)
    assert {v.split for v in variants} == {SplitK(1, 1), SplitK(1, 2), SplitK(1, 4)}  # the up GEMM has 896 blocks
    assert knobs.extend(CONFIG, 4096, **mixtral) == [Variant(CONFIG)]


@pytest.mark.parametrize("variant, code", [
    (Variant(CONFIG), "m16n64k128g1w4s4"),
    (Variant(CONFIG, SplitK(1, 4)), "m16n64k128g1w4s4+splitk:SPLIT_K_DOWN=4"),
    (Variant(CONFIG, SplitK(2, 8)), "m16n64k128g1w4s4+splitk:SPLIT_K_UP=2,SPLIT_K_DOWN=8"),
])
def test_screen_codes_name_the_knobs_by_their_file_keys(variant, code):
    assert variant.screen_code() == code
    base, _, knobs_text = code.partition("+")
    extra = dict(item.split("=") for item in knobs_text.partition(":")[2].split(",") if item)
    assert Variant.from_file_entry({**MoeConfig.from_code(base).sglang(), **{k: int(v) for k, v in extra.items()}}) == variant


@pytest.mark.parametrize("variant", [Variant(CONFIG), Variant(CONFIG, SplitK(1, 4)),
                                     Variant(MoeConfig(64, 64, 32, 8), SplitK(2, 16))])
@pytest.mark.parametrize("source", ["splitk", "agent-0123456789abcdef"])
def test_screen_codes_round_trip_whatever_the_variant_name(variant, source):
    assert Variant.from_screen_code(variant.screen_code(source)) == variant
