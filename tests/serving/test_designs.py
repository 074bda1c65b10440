"""The designs' schedules (which arm starts on which GPU in each period) and the pinned client settings."""
from __future__ import annotations

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.serving import designs
from astra_sglang.serving.client import ClientSettings


def _layout(periods):
    return [(p.index, p.rounds, [(s.arm, s.gpu) for s in p.slots]) for p in periods]


def test_crossover_swaps_the_gpus_every_period_and_runs_both_arms_at_once():
    assert _layout(designs.crossover(4, 2)) == [
        (1, 2, [("A", 0), ("B", 1)]), (2, 2, [("A", 1), ("B", 0)]),
        (3, 2, [("A", 0), ("B", 1)]), (4, 2, [("A", 1), ("B", 0)])]


@pytest.mark.parametrize("periods", [1, 2, 5, 8])
def test_crossover_never_puts_both_arms_on_one_gpu_and_balances_even_runs(periods):
    schedule = designs.crossover(periods, 1)
    for p in schedule:
        assert sorted(s.gpu for s in p.slots) == [0, 1]
    b_on_0 = sum(p.slot("B").gpu == 0 for p in schedule)
    assert b_on_0 == periods // 2  # B on GPU 0 in every even period


def test_restarts_run_one_server_at_a_time_in_abba_order():
    schedule = designs.restarts(3, 2)
    assert _layout(schedule) == [(1, 2, [("A", 0)]), (2, 2, [("B", 0)]), (3, 2, [("B", 0)]),
                                 (4, 2, [("A", 0)]), (5, 2, [("A", 0)]), (6, 2, [("B", 0)])]
    assert designs.restart_order(8) == list("ABBAABBA")


def test_restarts_refuse_fewer_than_three_starts_per_arm():
    with pytest.raises(AstraError, match="at least 3 starts per arm"):
        designs.restarts(2, 2)


@pytest.mark.parametrize("design, gpus, match", [
    ("crossover", ["0"], "needs two GPUs"), ("crossover", [], "needs two GPUs"),
    ("restarts", ["0", "1"], "runs on one GPU"), ("paired", [], "no schedule"),
])
def test_schedule_checks_the_gpus(design, gpus, match):
    with pytest.raises(AstraError, match=match):
        designs.schedule(design, 3, 2, gpus)


def test_gpu_of_maps_a_slot_to_its_visible_device():
    slot = designs.Slot(arm="B", gpu=1)
    assert designs.gpu_of(slot, ["2", "5"]) == "5" and designs.gpu_of(slot, []) is None


def test_client_settings_are_pinned_in_the_benchmark_command():
    client = ClientSettings(num_prompts=64, input_len=128, output_len=128, concurrency=32, seed=7, warmup_requests=2)
    argv = client.argv("m", 31000, "b.jsonl", python="py")
    pairs = {f: argv[i + 1] for i, f in enumerate(argv[:-1]) if f.startswith("--")}
    assert pairs["--seed"] == "7" and pairs["--num-prompts"] == "64" and pairs["--max-concurrency"] == "32"
    assert pairs["--random-range-ratio"] == "1.0" and pairs["--warmup-requests"] == "2"  # fixed lengths
    assert "--flush-cache" in argv  # every round from an empty prefix cache
    assert "64 prompts of 128 tokens in / 128 out (fixed lengths), 32 concurrent, seed 7" in client.describe()
    assert ClientSettings.from_opts({"num_prompts": 9, "port": 1, "extra": []}).num_prompts == 9
