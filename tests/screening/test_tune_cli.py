"""`astra-sglang tune fused_moe` with the screening tier, through click's CliRunner: one-line errors before
anything starts, and a whole run on CPU with the simulated GPU and a fake strict evaluator."""
from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner
from moe_fakes import ARGS, FACTS, LANDSCAPE, Strict

from astra_sglang.cli import main
from astra_sglang.optimize.tuner import moe_two_tier as two_tier
from astra_sglang.triton.moe import configs as moe_configs

SHAPE = "128x768x2048x8"


def test_no_gpu_is_one_line_before_anything_starts(tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the run would tune")
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(main, ["tune", "fused_moe", "--shape", SHAPE, "--buckets", "1", "--gpus", "0",
                                       "--out", str(tmp_path / "run")])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "needs a CUDA GPU" in result.output
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache" / "triton").exists()


@pytest.mark.parametrize("args,message", [(["--gpus", "3"], "no GPU 3 here (visible: 0, 1)"),
                                          (["--finalists", "0"], "at least 1")])
def test_bad_screening_options(args, message, monkeypatch):
    monkeypatch.setattr("astra_sglang.optimize.tuner.moe_run.facts_here", lambda: FACTS)
    monkeypatch.setattr("astra_sglang.optimize.pool.devices.visible_gpus",
                        lambda requested=None: ["0", "1"] if requested is None else requested.split(","))
    result = CliRunner().invoke(main, ["tune", "fused_moe", "--shape", SHAPE, *args])
    assert result.exit_code == 1 and message in result.output


def test_a_run_through_both_tiers(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("astra_sglang.optimize.tuner.moe_run.facts_here", lambda: FACTS)
    monkeypatch.setattr("astra_sglang.optimize.pool.devices.visible_gpus", lambda requested=None: ["0"])
    monkeypatch.setattr("astra_sglang.harness.isolate.evaluate_many", Strict())
    lookup = moe_configs.sglang_module()  # SGLang's own lookup, on the facts' GPU (CPU has no device name)
    monkeypatch.setattr(lookup, "get_device_name", lambda: FACTS.gpu)
    lookup.get_moe_configs.cache_clear()
    real = two_tier.open_screener

    def simulated(shape, options):
        launch = {"landscape": LANDSCAPE, "landscape_args": ARGS,
                  "compile_s": 0.0, "call_s": 0.0002}
        return real(shape, dataclasses.replace(options, compile_workers=1, launch_options=launch,
                                               target="astra_sglang.optimize.tuner.screen_simulate:SimulatedLaunch"))

    monkeypatch.setattr(two_tier, "open_screener", simulated)
    result = CliRunner().invoke(main, ["tune", "fused_moe", "--shape", SHAPE, "--buckets", "1,256", "--gpus", "0",
                                       "--finalists", "2", "--out", str(tmp_path / "run"),
                                       "--patches-dir", str(tmp_path / "patches")])
    assert result.exit_code == 0, result.output
    assert "screening 1" in result.output and "finalists:" in result.output
    assert "config file:" in result.output and (tmp_path / "run" / "screen.jsonl").is_file()
    lookup.get_moe_configs.cache_clear()
