"""The logprob parity check on CPU: a small bf16 Llama (tests/serving/logprob_stand_in.py) answers as SGLang's
/generate does; a correct kernel that rounds otherwise passes, a norm scaling its output by 1.01 (the GPU
fixture's wrong patch) fails, an A/A shows nothing; the reply parsing and the judge's limits on hand-made data."""
from __future__ import annotations

from pathlib import Path

import pytest
from logprob_stand_in import VOCAB, Model

from astra_sglang.errors import AstraError
from astra_sglang.patchset.store import PatchStore
from astra_sglang.serving import parity

WRONG = Path(__file__).resolve().parents[1] / "fixtures" / "wrong-patches"


@pytest.fixture(scope="module")
def answers():
    ids = parity.prompts(6, VOCAB)
    return {mode: parity.probe(Model(mode).generate, ids, tokens=12) for mode in
            ("ref", "alt", "wrong-fused", "wrong-rmsnorm")}


def test_an_aa_shows_no_difference(answers):
    diff = parity.compare([(answers["ref"], parity.probe(Model("ref").generate, parity.prompts(6, VOCAB), 12))])
    assert diff.max_abs == 0.0 and diff.bias_t == 0.0 and diff.identical == diff.prompts == 6
    assert parity.judge(diff).ok


def test_a_correct_kernel_that_rounds_otherwise_passes(answers):
    diff = parity.compare([(answers["ref"], answers["alt"])])
    assert 0.0 < diff.max_abs < parity.TOLERANCE and diff.bias_t < 4
    verdict = parity.judge(diff)
    assert verdict.ok, verdict.lines


def test_a_norm_that_scales_by_1_01_is_caught(answers):
    diff = parity.compare([(answers["ref"], answers["wrong-fused"])])
    verdict = parity.judge(diff)
    assert not verdict.ok
    assert diff.bias_t > 3 * parity.T_LIMIT  # one-way at every position
    assert "systematic shift" in verdict.lines[1] and verdict.lines[1].endswith("FAIL")


def test_a_one_percent_error_in_one_layer_input_norm_is_below_what_parity_sees(answers):
    """Documented limit: as small as a correct kernel's rounding end to end (the harness catches it)."""
    assert parity.judge(parity.compare([(answers["ref"], answers["wrong-rmsnorm"])])).ok


def _answer(values, tokens=(5, 6)):
    return parity.Answer(tokens=list(tokens), top=[[(t, v), (t + 100, v - 1.0)] for t, v in zip(tokens, values)])


def test_compare_stops_at_the_first_parted_token_and_counts_missing_ones():
    a = [_answer([-1.0, -2.0], tokens=(5, 6))]
    b = [parity.Answer(tokens=[5, 9], top=[[(5, -1.1), (7, -3.0)], [(9, -0.5), (6, -2.5)]])]
    diff = parity.compare([(a, b)])
    assert diff.positions == 2 and diff.diverged == [(0, 0, 1)] and diff.identical == 0
    assert diff.max_abs == pytest.approx(0.5) and diff.where == (0, 0, 1)
    assert diff.missing == 2  # token 105 at position 1 and token 106 at position 2 are not in B's top k


def test_judge_against_the_aa_own_difference():
    a = [_answer([-1.0, -2.0])]
    b = [_answer([-1.15, -2.0])]
    diff = parity.compare([(a, b)])
    assert not parity.judge(diff, tolerance=0.1).ok  # 0.15 > the tolerance where the A/A shows nothing
    aa = parity.compare([(a, [_answer([-1.1, -2.0])])])
    verdict = parity.judge(diff, aa, tolerance=0.1)
    assert verdict.ok and "the A/A's own 0.1000; limit 0.2000: ok" in verdict.lines[0]
    assert not parity.judge(parity.ParityDiff()).ok


def test_bias_t_is_infinite_for_a_constant_nonzero_shift():
    diff = parity.ParityDiff(ranks=[[0.01] * 5])
    assert diff.bias_t == float("inf")
    assert parity.ParityDiff(ranks=[[0.0] * 5]).bias_t == 0.0


def test_parse_reads_sglang_meta_info_and_refuses_a_reply_without_logprobs():
    reply = {"text": "", "meta_info": {"output_token_logprobs": [[-0.5, 7, None], [-0.7, 8, None]],
                                       "output_top_logprobs": [[[-0.5, 7, None], [-1.5, 3, None]],
                                                               [[-0.7, 8, None], [-0.9, 2, None]]]}}
    answer = parity.parse([reply])
    assert answer.tokens == [7, 8] and answer.top[1] == [(8, -0.7), (2, -0.9)]
    with pytest.raises(AstraError, match="no output logprobs"):
        parity.parse({"text": "x", "meta_info": {}})


def test_payload_asks_for_greedy_top_logprobs():
    body = parity.payload([1, 2, 3], tokens=4, top_k=3)
    assert body["return_logprob"] and body["top_logprobs_num"] == 3 and body["logprob_start_len"] == -1
    assert body["sampling_params"] == {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}
    assert parity.prompts(3, 100, seed=1) == parity.prompts(3, 100, seed=1)
    assert all(3 <= t < 100 for p in parity.prompts(3, 100) for t in p)


def test_pairs_take_b_against_a_of_its_period_and_a_against_its_first_start():
    rows = [{"period": p, "arm": arm, "answers": [_answer([-float(p), -1.0]).model_dump()]}
            for p, arm in ((1, "A"), (1, "B"), (2, "A"), (2, "B"), (3, "B"))]
    ab, aa = parity.pairs_of(rows)
    assert [(x[0].top[0][0][1], y[0].top[0][0][1]) for x, y in ab] == [(-1.0, -1.0), (-2.0, -2.0), (-2.0, -3.0)]
    assert [(x[0].top[0][0][1], y[0].top[0][0][1]) for x, y in aa] == [(-1.0, -2.0)]


def test_the_gpu_run_wrong_patch_is_a_valid_patch_set_outside_the_shipped_one():
    entry = PatchStore(WRONG).get("fused_add_rmsnorm")
    assert entry.enabled and entry.origin == str(WRONG) and "deliberately wrong" in entry.manifest.provenance.notes
    assert [str(t) for t in entry.targets] == ["sglang.srt.layers.layernorm:fused_add_rmsnorm"]
    assert "WRONG_SCALE 1.01f" in entry.kernel_path.read_text()
