"""A source knob through both tiers on CPU: the split values worth measuring of SGLang's pick screened right after
it (simulated GPUs: the cost model, with one split far faster), the finalists with their splits through the
evaluator op that runs the variant (a fake strict evaluator reading its tables), the source patch written."""
from __future__ import annotations

import json

from moe_fakes import ARGS, FACTS, PICK, SHAPE, us_of
from moe_standins import timed_row

from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.tuner.moe_run import TuneOptions, tune_fused_moe
from astra_sglang.optimize.tuner.moe_two_tier import ScreenOptions, with_knob
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.knobs import SplitK, Variant
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.source_op import parse, screen_hook

FAST = Variant(PICK, SplitK(1, 2))
"""At batch size 1 the pick with its down projection split in two runs in half the pick's time: faster than any
config of the space by the cost model."""


def split_landscape_us(config: str, tokens: int, **args) -> float:
    variant = Variant.from_screen_code(config)
    return us_of(PICK, tokens) / 2 if (variant, tokens) == (FAST, 1) else us_of(variant.config, tokens)


class SplitStrict:
    """The strict evaluator's answers for source_op candidates, agreeing with the screening landscape."""

    def __init__(self):
        self.requests = []

    def __call__(self, reqs):
        out = []
        for req in reqs:
            self.requests.append(req)
            source, table = parse(req.candidate.path.rsplit(":", 1)[1])
            assert source == "splitk"
            rows = []
            for shape in req.shapes:
                base = us_of(PICK, shape[0])
                cand = split_landscape_us(table[moe_configs.nearest(table, shape[0])].screen_code(), shape[0])
                rows.append(timed_row(shape, base / cand, base, SHAPE.dtype))
            out.append(EvalResult(kernel=req.kernel, candidate=req.candidate.name(), ok=True, stage="done",
                                  shapes=rows, wall_s=40.0))
        return out


def test_split_variants_follow_the_pick_and_the_seeds_in_the_screening_order():
    codes = with_knob([PICK], [PICK.code(), "later"], 0, KernelSourceProvider("splitk"), 1, SHAPE)
    assert codes[0] == PICK.code() and codes[-1] == "later"
    assert {Variant.from_screen_code(c).split for c in codes[1:-1]} == {SplitK(1, 2), SplitK(2, 1), SplitK(2, 2)}
    assert all(c.startswith(PICK.code() + "+splitk:SPLIT_K_") for c in codes[1:-1])
    assert screen_hook("splitk") == "astra_sglang.triton.moe.source_op:screen"
    assert screen_hook("agent-0123456789abcdef") == "astra_sglang.triton.moe.source_op:screen_agent0123456789abcdef"


def test_a_screened_split_reaches_the_strict_tier_and_is_written_as_a_source_patch(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    launch = {"landscape": "test_knob_two_tier:split_landscape_us", "landscape_args": ARGS, "compile_s": 0.0,
              "call_s": 0.0005}
    options = TuneOptions(use_cache=False, patches_dir=tmp_path / "patches", source_knob="splitk",
                          screen=ScreenOptions(gpus=["0"], finalists=2, compile_workers=1, config_timeout_s=10,
                                               target="astra_sglang.optimize.tuner.screen_simulate:SimulatedLaunch",
                                               launch_options=launch))
    strict = SplitStrict()
    result = tune_fused_moe(SHAPE, [1, 256], tmp_path / "run", options, strict, facts=FACTS,
                            picks_at=lambda sizes: [Pick(t, PICK, "default") for t in sizes], echo=lambda _: None)
    assert result.buckets[0].screen_best == FAST.screen_code()
    first = parse(strict.requests[0].candidate.path.rsplit(":", 1)[1])[1]
    assert first[1] == FAST  # the screened best is the strict tier's first finalist at batch size 1
    assert result.buckets[0].verdict == "tuned" and result.buckets[0].chosen == FAST.code()
    folder = tmp_path / "patches" / "fused_moe"
    manifest = PatchManifest.load(folder)
    assert manifest.kind == "triton-source"
    written = json.loads((folder / manifest.configs[0].path).read_text())
    assert written["1"] == {**PICK.sglang(), "SPLIT_K_DOWN": 2}
