"""The users' wall of SGLang's fused MoE tuner on H200 as the committed cold samples give it
(benchmarks/results/2026-11-28-h200/moe-bar-cold): every figure of that page's table, from the samples' costs."""
from __future__ import annotations

from pathlib import Path

import pytest

from astra_sglang.triton.moe.sglang_tuner_records import TunerRun

COLD = Path(__file__).parents[2] / "benchmarks" / "results" / "2026-11-28-h200" / "moe-bar-cold"
# folder, batch size, configs sampled, (minutes, 95% half-width), ours' wall s and GPUs (the bar page's walls.txt),
# and the page's ratios: ours / users' wall, at the interval's low end, in GPU time
ROWS = [
    ("qwen3-30b-a3b-1-64", 1, 40, (38.2, 11.2), 329, 2, (0.14, 0.20, 0.29)),
    ("qwen3-30b-a3b-1-64", 64, 40, (42.1, 8.9), 326, 2, (0.13, 0.16, 0.26)),
    ("deepseek-v2-lite-1-64", 1, 33, (38.5, 13.3), 333, 2, (0.14, 0.22, 0.29)),
    ("deepseek-v2-lite-1-64", 64, 30, (46.7, 11.4), 355, 1, (0.13, 0.17, 0.13)),
    ("mixtral-8x7b-tp2-1", 1, 40, (37.0, 11.8), 213, 2, (0.10, 0.14, 0.19)),
    ("mixtral-8x7b-tp2-fp8-1", 1, 40, (44.1, 17.9), 231, 2, (0.09, 0.15, 0.17)),
]


@pytest.mark.parametrize("folder, tokens, sampled, minutes, ours_s, gpus, ratios", ROWS)
def test_the_pages_users_wall_and_ratios_come_from_the_committed_samples(folder, tokens, sampled, minutes, ours_s,
                                                                         gpus, ratios):
    run = TunerRun.model_validate_json((COLD / folder / "tuner.json").read_text())
    assert run.mode == "cold"
    batch = next(b for b in run.batches if b.tokens == tokens)
    assert len(batch.cold_costs) == sampled and batch.space == 1920
    seconds, half = batch.estimate()
    assert (round(seconds / 60, 1), round(half / 60, 1)) == minutes
    assert (round(ours_s / seconds, 2), round(ours_s / (seconds - half), 2),
            round(ours_s * gpus / seconds, 2)) == ratios
    assert f"{minutes[0]} +- {minutes[1]} min" in (COLD / "summary.md").read_text()
