"""The config tuner with the split-K knob, on fake evaluations: a speed landscape over configs and splits stands in
for the GPU; the run writes a source patch; the CLI refuses a variant it cannot make, in one line."""
from __future__ import annotations

import json

from click.testing import CliRunner
from moe_standins import timed_row

from astra_sglang.cli import main
from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.tuner.moe_knob_tune import knob_tuner
from astra_sglang.optimize.tuner.moe_run import Facts, TuneOptions, tune_fused_moe
from astra_sglang.optimize.tuner.moe_tune import Setup
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe import sources
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.knobs import SplitK, Variant
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.source_op import parse
from astra_sglang.triton.moe.space import MoeConfig

SHAPE = MoeShape(8, 14336, 4096, 2)
PICK = MoeConfig(16, 64, 128, 1, 4, 4)
FACTS = Facts(gpu="NVIDIA H100 80GB HBM3", smem=227 * 1024, triton="3.6.0", sglang="0.5.17", source_hash="cd" * 32)


class SplitLandscape:
    """Batch 1: SGLang's pick with split 4 on the down projection is 1.25x, split 2 1.1x, anything else 0.9x;
    batch 256: nothing beats SGLang's pick."""

    def __init__(self):
        self.requests = []

    def speedup(self, variant: Variant, tokens: int) -> float:
        if tokens == 1 and variant.config == PICK:
            return {SplitK(1, 4): 1.25, SplitK(1, 2): 1.1}.get(variant.split, 0.9)
        return 0.9

    def __call__(self, requests):
        out = []
        for req in requests:
            self.requests.append(req)
            source, table = parse(req.candidate.path.rsplit(":", 1)[1])
            assert source == "splitk"
            result = EvalResult(kernel=req.kernel, candidate=req.candidate.name(), ok=True, stage="done", wall_s=30.0)
            for shape in req.shapes:
                result.shapes.append(timed_row(shape, self.speedup(table[moe_configs.nearest(table, shape[0])],
                                                                   shape[0])))
            out.append(result)
        return out


def _picks_at(sizes):
    return [Pick(t, PICK, "default") for t in sizes]


def test_round_one_tries_the_splits_worth_measuring(tmp_path):
    setup = Setup(shape=SHAPE, buckets=[1, 256], picks={t: Pick(t, PICK, "default") for t in (1, 256)},
                  gpu=FACTS.gpu, triton=FACTS.triton, source_hash=FACTS.source_hash)
    tuner = knob_tuner(KernelSourceProvider("splitk"), setup, SplitLandscape(), echo=lambda _: None, width=8)
    proposed = tuner.propose(1, first=True)
    assert {v.split for v in proposed} == {SplitK(1, 2), SplitK(1, 4)} and all(v.config == PICK for v in proposed)
    assert tuner.propose(256, first=True) == []  # 2048 output blocks: no split is worth it, and the pick is known
    assert "+splitk:" in tuner.op.key(1).source_hash


def test_a_run_finds_the_split_and_writes_a_source_patch(tmp_path):
    options = TuneOptions(rounds=2, width=3, use_cache=False, patches_dir=tmp_path / "patches", source_knob="splitk")
    land = SplitLandscape()
    result = tune_fused_moe(SHAPE, [1, 256], tmp_path / "run", options, batch=land, facts=FACTS, picks_at=_picks_at,
                            echo=lambda _: None)
    assert [b.verdict for b in result.buckets] == ["tuned", "sglang-best"]
    assert result.buckets[0].chosen == "m16n64k128g1w4s4su1sd4"
    assert all(r.candidate.path.startswith("py:astra_sglang.triton.moe.source_op:") for r in land.requests)
    folder = tmp_path / "patches" / "fused_moe"
    manifest = PatchManifest.load(folder)
    assert manifest.kind == "triton-source" and manifest.variant.source_hash == sources.splitk_source().base_hash
    written = json.loads((folder / manifest.configs[0].path).read_text())
    assert written["1"] == {**PICK.sglang(), "SPLIT_K_DOWN": 4} and written["256"] == PICK.sglang()
    assert result.config_file.endswith(manifest.configs[0].path)


def test_the_cli_refuses_a_variant_it_cannot_make(tmp_path):
    result = CliRunner().invoke(main, ["tune", "fused_moe", "--shape", "8x14336x4096x2", "--source-knob", "agent-0000",
                                       "--out", str(tmp_path / "run")])
    assert result.exit_code == 1
    assert result.output.startswith("error: no Triton variant 'agent-0000'") and result.output.count("\n") == 1
