"""The serving A/B's noise controls on CPU: nvidia-smi readings, throttle flags, their summary, and the stop rule."""
import subprocess

import pytest

from astra_sglang.serving import noise


@pytest.mark.parametrize("line, expected", [
    ("1980, 2619, 41, 305.12, 0x0000000000000000", dict(sm_mhz=1980.0, mem_mhz=2619.0, temp_c=41.0, power_w=305.12,
                                                         reasons=0)),
    ("345, 2619, 33, 71.5, 0x0000000000000001", dict(sm_mhz=345.0, mem_mhz=2619.0, temp_c=33.0, power_w=71.5,
                                                      reasons=1)),
])
def test_parse_state(line, expected):
    assert noise.parse_state(line) == expected


@pytest.mark.parametrize("line", ["[N/A], 2619, 41, 305, 0x0", "1980, 2619, 41", ""])
def test_unparseable_state(line):
    assert noise.parse_state(line) is None


def test_gpu_state_falls_back_to_the_older_field_name(monkeypatch):
    monkeypatch.setattr(noise.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4")
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        if "clocks_event_reasons.active" in argv[1]:  # an older driver does not know the new name
            return subprocess.CompletedProcess(argv, 2, 'Field "clocks_event_reasons.active" is not valid', "")
        return subprocess.CompletedProcess(argv, 0, "1755, 2619, 52, 410.0, 0x0000000000000004\n", "")

    state = noise.gpu_state(run)
    assert state["sm_mhz"] == 1755.0 and noise.throttled(state)
    assert len(calls) == 2 and calls[1][-2:] == ["-i", "3"]


def test_no_nvidia_smi(monkeypatch):
    monkeypatch.setattr(noise.shutil, "which", lambda name: None)
    assert noise.gpu_state() is None


@pytest.mark.parametrize("reasons, flagged", [(0x0, False), (0x1, False), (0x4, True), (0x41, True)])
def test_throttled_ignores_idle(reasons, flagged):
    assert noise.throttled({"reasons": reasons}) is flagged


def _state(sm, temp=40.0, reasons=0):
    return {"sm_mhz": sm, "mem_mhz": 2619.0, "temp_c": temp, "power_w": 300.0, "reasons": reasons}


def test_clock_summary_per_arm():
    rows = [{"arm": "A", "gpu": {"before": _state(1980), "after": _state(1755, 61, 0x20)}},
            {"arm": "A", "gpu": {"before": _state(1980), "after": None}},
            {"arm": "B", "gpu": {"before": _state(1965, 50), "after": _state(1980, 55)}},
            {"arm": "B"}]
    assert noise.clock_summary(rows) == [
        dict(arm="A", samples=3, sm_min=1755.0, sm_max=1980.0, temp_max=61.0, throttled=1, benchmarks=2),
        dict(arm="B", samples=2, sm_min=1965.0, sm_max=1980.0, temp_max=55.0, throttled=0, benchmarks=2)]
    assert noise.clock_summary([{"arm": "A", "gpu": None}]) == []


def _rows(changes):
    rows = []
    for run, pct in enumerate(changes, start=1):
        for arm, value in (("A", 100.0), ("B", 100.0 * (1 + pct / 100))):
            rows.append({"arm": arm, "run": run, "paired": True, "order": "AB",
                         "metrics": {"output_throughput": value}})
    return rows


def test_width_reached_needs_enough_rounds_and_a_narrow_interval():
    steady = [0.1, -0.2, 0.3, 0.0, -0.1, 0.2]
    assert not noise.width_reached(_rows(steady[:4]), 1.0)  # fewer than paired_stats.RELIABLE_ROUNDS
    assert noise.width_reached(_rows(steady), 1.0)
    assert not noise.width_reached(_rows([3.0, -4.0, 5.0, -2.0, 6.0, -5.0]), 1.0)
