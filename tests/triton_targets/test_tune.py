"""The config tuner on fake evaluations: a synthetic speed landscape per batch size stands in for the GPU."""
from __future__ import annotations

import json

import pytest

from astra_sglang.harness.records import EvalResult, ShapeResult, Timing
from astra_sglang.optimize.tuner.cache import TuneCache
from astra_sglang.optimize.tuner.moe_run import Facts, TuneOptions, file_table, tune_fused_moe
from astra_sglang.optimize.tuner.moe_tune import WIN_MARGIN, Setup, moe_tuner
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.patchset.store import PatchStore
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.configs import Pick
from astra_sglang.triton.moe.op import parse_table
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import VALUES, MoeConfig

SHAPE = MoeShape(128, 768, 2048, 8)
PICK = MoeConfig(64, 64, 32, 8)
TARGET = {1: MoeConfig(16, 64, 128, 1, 4, 3), 64: MoeConfig(16, 128, 128, 1, 4, 3)}
FACTS = Facts(gpu="NVIDIA H100 80GB HBM3", smem=227 * 1024, triton="3.6.0", sglang="0.5.17", source_hash="ab" * 32)


def _distance(a: MoeConfig, b: MoeConfig) -> int:
    steps = 0
    for name, values in VALUES.items():
        x, y = getattr(a, name) or {"warps": 4, "stages": 3}[name], getattr(b, name) or {"warps": 4, "stages": 3}[name]
        steps += abs(values.index(x) - values.index(y))
    return steps


class Landscape:
    """Speedup over SGLang's pick: `peak` at TARGET, 6% less per step away; BLOCK_SIZE_N 256 fails the checks;
    `crash_at` makes the evaluation holding that batch size die there."""

    def __init__(self, peak=1.3, crash_at=None, final_factor=1.0):
        self.peak, self.crash_at, self.final_factor = peak, crash_at, final_factor
        self.requests = []

    def speedup(self, config, tokens):
        return self.peak - 0.06 * _distance(config, TARGET[tokens])

    def __call__(self, requests):
        out = []
        for req in requests:
            self.requests.append(req)
            table = parse_table(req.candidate.path.rsplit(":", 1)[1])
            result = EvalResult(kernel=req.kernel, candidate=req.candidate.name(), ok=True, stage="done", wall_s=30.0)
            for shape in req.shapes:
                tokens = shape[0]
                if tokens == self.crash_at and req.candidate.label != "final":
                    result.ok, result.stage, result.reason = False, "crash", f"killed by SIGSEGV during check of {shape}"
                    break
                config = table[moe_configs.nearest(table, tokens)]
                if config.block_n == 256:
                    result.shapes.append(ShapeResult(shape=shape, dtype="bfloat16", correct=False, reason="wrong values"))
                    result.ok = False
                    continue
                factor = self.final_factor if req.candidate.label == "final" else 1.0
                speed = max(0.2, self.speedup(config, tokens)) * factor if config != PICK else 1.0
                result.shapes.append(ShapeResult(
                    shape=shape, dtype="bfloat16", correct=True, speedup=speed,
                    candidate=Timing(median_us=100 / speed, p10_us=100 / speed, p90_us=100 / speed),
                    baseline=Timing(median_us=100.0, p10_us=100.0, p90_us=100.0)))
            out.append(result)
        return out


def _setup(buckets=(1, 64)):
    picks = {t: Pick(t, PICK, "default") for t in buckets}
    return Setup(shape=SHAPE, buckets=list(buckets), picks=picks, gpu=FACTS.gpu, triton=FACTS.triton,
                 source_hash=FACTS.source_hash)


def test_every_evaluation_tries_one_config_at_every_batch_size():
    land = Landscape()
    tuner = moe_tuner(_setup(), land, echo=lambda _: None, width=3)
    assert tuner.search(rounds=1) == 3
    assert all([s[0] for s in req.shapes] == [1, 64] for req in land.requests)
    assert all(req.baseline.path.endswith(":sglang_pick") for req in land.requests)
    assert all(len(tuner.measured[t]) == 3 for t in (1, 64))


def test_the_search_climbs_to_the_best_config():
    land = Landscape()
    tuner = moe_tuner(_setup(), land, echo=lambda _: None, width=4)
    tuner.search(rounds=12)
    for tokens in (1, 64):
        assert tuner.best(tokens).config == TARGET[tokens].code()
        assert tuner.chosen()[tokens] == TARGET[tokens]
    failed = [m for m in tuner.measured[64].values() if not m.ok]
    assert all(MoeConfig.from_code(m.config).block_n == 256 for m in failed)


def test_sglangs_pick_stays_where_nothing_beats_it():
    land = Landscape(peak=1.0 + (WIN_MARGIN - 1) / 2)  # the best is faster, but by less than the margin
    tuner = moe_tuner(_setup(), land, echo=lambda _: None, width=4)
    tuner.search(rounds=3)
    assert tuner.chosen() == {1: PICK, 64: PICK}
    final = land([tuner.request(tuner.chosen(), "final", final=True)])[0]
    assert [b.verdict for b in tuner.finish(final, tuner.chosen())] == ["sglang-best", "sglang-best"]


def test_a_config_slower_in_the_final_evaluation_is_dropped():
    land = Landscape(final_factor=0.7)
    tuner = moe_tuner(_setup(), land, echo=lambda _: None, width=4)
    tuner.search(rounds=2)
    table = tuner.chosen()
    assert table[1] != PICK
    final = land([tuner.request(table, "final", final=True)])[0]
    results = tuner.finish(final, table)
    assert all(b.verdict == "sglang-best" and b.chosen == PICK.code() for b in results)
    assert results[0].final_speedup < 1.0 and results[0].best != PICK.code()  # won the search, lost the final
    assert table[64] == PICK and results[1].final_speedup == 1.0  # never won: SGLang's pick against itself


def test_a_crash_fails_the_config_it_happened_in_only():
    land = Landscape(crash_at=64)
    tuner = moe_tuner(_setup((1, 64, 256)), land, echo=lambda _: None, width=2)
    tuner.search(rounds=1)
    assert all(m.ok or MoeConfig.from_code(m.config).block_n == 256 for m in tuner.measured[1].values())
    assert all(not m.ok and "SIGSEGV" in m.reason for m in tuner.measured[64].values())
    assert tuner.measured[256] == {}  # never reached: left for a later round


def test_the_cache_spares_evaluations(tmp_path):
    cache = TuneCache("fused_moe", tmp_path)
    first = moe_tuner(_setup(), Landscape(), cache=cache, echo=lambda _: None, width=3)
    first.search(rounds=1)
    again = moe_tuner(_setup(), Landscape(), cache=cache, echo=lambda _: None, width=3)
    assert again.cached == 6 and again.measured == first.measured
    assert not {c.code() for c in again.propose(1, first=True)} & set(first.measured[1])
    other_gpu = Setup(**{**_setup().__dict__, "gpu": "NVIDIA H200"})
    assert moe_tuner(other_gpu, Landscape(), cache=cache, echo=lambda _: None).cached == 0


def test_the_budget_cuts_rounds():
    land = Landscape()  # every evaluation takes 30 s
    tuner = moe_tuner(_setup(), land, echo=lambda _: None, width=4)
    assert tuner.search(rounds=3, budget_s=100.0) == 0  # the first evaluation, assumed 60 s, and the final: no
    assert tuner.search(rounds=1, budget_s=200.0) == 2  # two of the four configs fit beside the final
    assert all(len(m) == 2 for m in tuner.measured.values())
    assert tuner.search(rounds=1, budget_s=10_000.0) == 4  # measured at 30 s now: the whole round


def _picks_at(sizes):
    return [Pick(t, MoeConfig(16, 32, 64, 1) if t <= SHAPE.experts else PICK, "default") for t in sizes]


def test_file_table_keeps_sglangs_picks_around_the_tuned_sizes():
    table = file_table(SHAPE, {64: TARGET[64]}, _picks_at)
    assert set(table) == set(moe_configs.BATCH_SIZES) | {128, 129}
    assert table[64] == TARGET[64] and table[128] == MoeConfig(16, 32, 64, 1) and table[129] == PICK
    assert all(moe_configs.nearest(table, m) in table for m in (1, 100, 5000))


def test_a_whole_run_writes_results_and_the_config_patch(tmp_path):
    options = TuneOptions(rounds=3, width=3, use_cache=False, patches_dir=tmp_path / "patches", command="astra-sglang tune")
    result = tune_fused_moe(SHAPE, [1, 64], tmp_path / "run", options, batch=Landscape(), facts=FACTS,
                            picks_at=_picks_at, echo=lambda _: None)
    assert result.final_ok and result.evaluations == 3 * 3 + 1
    assert [b.verdict for b in result.buckets] == ["tuned", "tuned"]
    saved = json.loads((tmp_path / "run" / "tune.json").read_text())
    assert saved["buckets"][0]["final_speedup"] > WIN_MARGIN
    report = (tmp_path / "run" / "tune.md").read_text()
    assert "| 1 | `m16n32k64g1wdsd` | SGLang's default config" in report and "tuned config" in report
    folder = tmp_path / "patches" / "fused_moe"
    manifest = PatchManifest.load(folder)
    assert manifest.kind == "triton-config" and manifest.configs[0].tuned == [1, 64]
    written = moe_configs.read(folder / manifest.configs[0].path)
    assert written[64] == MoeConfig.from_code(result.buckets[1].chosen).sglang()
    assert manifest.configs[0].path == "configs/triton_3_6_0/E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json"
    assert {tuple(m.shape) for m in manifest.measured} == {(1, 128, 768, 2048, 8), (64, 128, 768, 2048, 8)}
    assert PatchStore(tmp_path / "patches").get("fused_moe").manifest.kind == "triton-config"


def test_nothing_is_written_when_sglang_is_best(tmp_path):
    options = TuneOptions(rounds=1, width=2, use_cache=False, patches_dir=tmp_path / "patches")
    result = tune_fused_moe(SHAPE, [64], tmp_path / "run", options, batch=Landscape(peak=0.9), facts=FACTS,
                            picks_at=_picks_at, echo=lambda _: None)
    assert result.buckets[0].verdict == "sglang-best" and not result.config_file
    assert not (tmp_path / "patches").exists() and "no file written" in result.notes[0]
