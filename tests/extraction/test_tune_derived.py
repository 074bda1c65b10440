"""The tuner on knobs derived from an extracted original: configurations that do not build are left out
(not a crash), the start kernel is the extracted original, and with no GPU the command ends in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from astra_sglang.extraction.knobgen import derive
from astra_sglang.optimize.tuner.cuda_tune import Tuning, tune
from astra_sglang.optimize.tuner.screen import buildable, first_error
from astra_sglang.specs.registry import get_spec

KNOBS = Path(__file__).parent / "fixtures" / "knobs"
SHAPES = [(1, 4096), (64, 11008)]


@pytest.fixture
def knob_source():
    return lambda name: derive(KNOBS / f"{name}.cu").source


def _tuning(source: str, run_dir: Path, batch=None, shapes=SHAPES) -> Tuning:
    return Tuning(get_spec("silu_and_mul"), source, run_dir, echo=lambda _: None, batch=batch, shapes=shapes,
                  arch="sm_90")


def test_a_hand_written_kernel_is_not_build_checked(tmp_path):
    source = (Path(__file__).parents[1] / "fixtures" / "honest" / "silu_and_mul_knobs.cu").read_text()
    tuning = _tuning(source, tmp_path)
    assert buildable(tuning, [(64, 1), (256, 4)]) == [(64, 1), (256, 4)]
    assert not list((tmp_path / "candidates").glob("screen-*"))


@pytest.mark.parametrize("limit", [1, 3, 7])
def test_a_sample_of_derived_configurations_keeps_the_original(knob_source, limit):
    from astra_sglang.kernels.knobs import configs, original_config, parse_knobs

    source = knob_source("all_kinds")
    knobs = parse_knobs(source)
    original = original_config(source, knobs)
    assert original == (256, 4, 4, 2)
    space = configs(knobs, limit, keep=original)
    assert len(space) == limit and original in space and space == configs(knobs, limit, keep=original)


def test_first_error_is_one_short_line():
    log = "kernel.cu(7): warning: x\nkernel.cu(9): error: static assertion failed with \"at most 4\"\n more\n"
    assert first_error(log) == 'kernel.cu(9): error: static assertion failed with "at most 4"'
    assert first_error("") == "failed"


@pytest.mark.nvcc
def test_a_configuration_that_breaks_a_static_assert_is_left_out(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    tuning = _tuning(derive(KNOBS / "static_assert.cu").source, tmp_path / "run")
    assert [k.name for k in tuning.knobs] == ["BLOCK", "VEC"]
    assert buildable(tuning, [(128, 2), (128, 8), (64, 4)]) == [(128, 2), (64, 4)]
    logged = [json.loads(line) for line in (tmp_path / "run" / "tuner.jsonl").read_text().splitlines()]
    assert [(r["tag"], r["config"]) for r in logged] == [("build-check", [128, 8])]
    assert "static assertion" in logged[0]["reason"] or "static_assert" in logged[0]["reason"]


@pytest.mark.nvcc
def test_tuning_goes_on_without_the_configurations_that_do_not_build(tmp_path, monkeypatch):
    """A stand-in evaluator times what the dispatch gives each shape; VEC=8 never reaches it."""
    import re

    from astra_sglang.harness.records import EvalResult, ShapeResult, Timing

    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    seen = []

    def batch(reqs):
        out = []
        for req in reqs:
            text = Path(req.candidate.path).read_text()
            table = dict(re.findall(r"// (\d+x\d+) -> ([\d, ]+)", text))
            seen.extend(table.values())
            rows = [ShapeResult(shape=s, dtype="bfloat16", correct=True,
                                candidate=Timing(median_us=1.0 + 0.1 * int(table["x".join(map(str, s))].split(", ")[1]),
                                                 p10_us=1, p90_us=1)) for s in req.shapes]
            out.append(EvalResult(kernel=req.kernel, candidate="c", ok=True, stage="done", shapes=rows))
        return out

    source = derive(KNOBS / "static_assert.cu").source.replace("astra:knob BLOCK 64 128 256 512", "astra:knob BLOCK 128")
    tuning = _tuning(source, tmp_path / "run", batch=batch)
    _, table = tune(tuning, rounds=1)
    assert table == {s: (128, 1) for s in SHAPES}  # VEC 1 is the stand-in's fastest
    assert seen and not any(v.endswith(", 8") for v in seen)


@pytest.mark.nvcc
def test_optimize_from_extracted_without_gpu_ends_in_one_line(site_dir, tmp_path, monkeypatch):
    """The CLI path end to end on CPU: extract gelu_and_mul from the pinned sglang wheel, derive its knobs,
    build-check them, and stop at the first timing with the one-line "no CUDA device" error."""
    import astra_sglang.optimize.tuner.cuda_tune as tuner
    from astra_sglang.cli import optimize as agents_cli
    from astra_sglang.cli import main
    from astra_sglang.harness.records import EvalResult

    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setattr(tuner, "MAX_CONFIGS", 2)

    def no_gpu(req):  # what the harness's worker answers on a machine without a GPU
        return EvalResult(kernel=req.kernel, candidate=req.candidate.name(),
                          reason="no CUDA GPU: checking and timing need one (builds succeeded)")

    monkeypatch.setattr(agents_cli, "harness_evaluator", lambda: no_gpu)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["optimize", "gelu_and_mul", "--tuner", f"--from-extracted={site_dir / 'sglang'}",
                                       "--rounds", "1", "--gpus", "none", "--out", str(run)])
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: no CUDA device: the tuner times candidates on a GPU"), result.output
    assert "1 knobs derived: BLOCK 64/128/256/512/1024 (original 256)" in result.output
    assert (run / "extracted" / "knobbed.cu").is_file() and (run / "extracted" / "provenance.json").is_file()


def test_from_an_extraction_without_knobs_says_so_in_one_line(tmp_path):
    from astra_sglang.errors import AstraError
    from astra_sglang.optimize.starts import tuner_start

    (tmp_path / "kernel.cu").write_text((KNOBS / "no_knob.cu").read_text())
    (tmp_path / "provenance.json").write_text("{}")
    with pytest.raises(AstraError, match=r"no derivable knob in the launch path") as err:
        tuner_start(get_spec("silu_and_mul"), str(tmp_path), echo=lambda _: None)
    assert "\n" not in str(err.value)


def test_from_and_from_extracted_exclude_each_other(tmp_path):
    from astra_sglang.cli import main

    result = CliRunner().invoke(main, ["optimize", "rmsnorm", "--from", str(tmp_path), "--from-extracted"])
    assert result.exit_code == 1 and "--from and --from-extracted both name a start kernel" in result.output


@pytest.mark.gpu
def test_tune_an_extracted_op_on_two_shapes(site_dir, tmp_path):
    """On a GPU: gelu_and_mul extracted from SGLang, its derived BLOCK tuned per shape, every config correct."""
    from astra_sglang.extraction.pipeline import extract

    kernel_cu = extract("gelu_and_mul", str(site_dir / "sglang"), tmp_path / "x").kernel_cu
    source = derive(kernel_cu).source
    shapes = [(7, 4096), (512, 11008)]
    tuning = Tuning(get_spec("gelu_and_mul"), source, tmp_path / "run", echo=lambda _: None, shapes=shapes)
    final, table = tune(tuning, rounds=2, max_configs=5)
    assert set(table) == set(shapes) and all(c[0] in (64, 128, 256, 512, 1024) for c in table.values())
    assert not tuning.failed and all(len(tuning.samples[s]) == 5 for s in shapes)
    assert "astra_launch_cfg<" in final.read_text()
