"""The tuner's knob parsing and generated per-shape dispatch (compile-only here; GPU runs in benchmarks)."""
from pathlib import Path

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.harness.build import build_library
from astra_sglang.kernels.knobs import Knob, configs, dim_sources, dispatch_source, parse_knobs
from astra_sglang.optimize.tuner.cuda_tune import run_tuner
from astra_sglang.specs.registry import get_spec

FIXTURE = Path(__file__).parent / "fixtures" / "honest" / "silu_and_mul_knobs.cu"


def test_knobs_are_parsed_in_order():
    assert parse_knobs(FIXTURE.read_text()) == [Knob("THREADS", (64, 256)), Knob("ROWS", (1, 4))]
    with pytest.raises(AstraError, match="must be integers"):
        parse_knobs("// astra:knob X 1 two\n")


def test_configs_sample_is_deterministic_and_bounded():
    knobs = [Knob("A", tuple(range(10))), Knob("B", tuple(range(10)))]
    assert len(configs(knobs, 1000)) == 100
    assert configs(knobs, 7) == configs(knobs, 7) and len(configs(knobs, 7)) == 7


def test_dims_are_read_from_tensor_axes():
    merge = dim_sources(get_spec("merge_attn_states_lse"))
    assert [(d.name, d.tensor, d.axis) for d in merge] == [("tokens", 0, 0), ("heads", 0, 1), ("head_dim", 0, 2)]
    silu = dim_sources(get_spec("silu_and_mul"))
    assert [(d.name, d.tensor, d.axis) for d in silu] == [("tokens", 0, 0), ("d", 1, 1)]


def test_a_start_kernel_without_knobs_is_a_clear_error(tmp_path):
    plain = tmp_path / "k.cu"
    plain.write_text("// no knobs here\n")
    with pytest.raises(AstraError, match="declares no `// astra:knob"):
        run_tuner(get_spec("silu_and_mul"), plain, 1, tmp_path / "run", evaluator=None)


@pytest.mark.nvcc
def test_generated_dispatch_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    spec = get_spec("silu_and_mul")
    table = {(1, 4096): (64, 1), (512, 14336): (256, 4)}
    source = dispatch_source(spec, FIXTURE.read_text(), parse_knobs(FIXTURE.read_text()), table, "test")
    assert "astra_launch_cfg<64, 1>" in source and "astra_launch_cfg<256, 4>" in source
    path = tmp_path / "dispatch.cu"
    path.write_text(source)
    info = build_library(path, arch="sm_90")
    assert info.ok, info.log


def _standin_evaluator(calls):
    """Times each shape by the configuration the generated dispatch gives it: THREADS=64 is fastest below
    64 rows, THREADS=256 above; ROWS=4 costs 10%. The final evaluation (all dtypes) gets the same law."""
    import math
    import re

    from astra_sglang.harness.records import EvalResult, ShapeResult, Timing

    def evaluate(req):
        calls.append(req)
        source = open(req.candidate.path).read()
        table = {tuple(int(x) for x in s.split("x")): tuple(int(x) for x in c.split(", "))
                 for s, c in re.findall(r"// (\d+(?:x\d+)+) -> ([\d, ]+)", source)}
        rows = []
        for dtype in req.dtypes:
            for shape in req.shapes:
                nearest = min(table, key=lambda t: sum((math.log2(a) - math.log2(b)) ** 2 for a, b in zip(t, shape)))
                threads, rows_knob = table[nearest]
                best = 64 if shape[0] < 64 else 256
                us = (1.0 if threads == best else 2.0) * (1.1 if rows_knob == 4 else 1.0)
                rows.append(ShapeResult(shape=shape, dtype=dtype, correct=True, candidate=Timing(
                    median_us=us, p10_us=us, p90_us=us), baseline=Timing(median_us=2.0, p10_us=2.0, p90_us=2.0),
                    speedup=2.0 / us, pct_roofline=50.0))
        return EvalResult(kernel=req.kernel, candidate=req.candidate.name(), ok=True, stage="done", shapes=rows,
                          gpu="stand-in")

    return evaluate


@pytest.mark.nvcc
def test_tuner_latin_square_picks_each_shapes_best_configuration(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    calls = []
    winner = run_tuner(get_spec("silu_and_mul"), FIXTURE, 2, tmp_path / "run", _standin_evaluator(calls),
                       echo=lambda _: None)
    # 4 configurations: a 4-evaluation Latin square, 3 re-timing evaluations, 1 final evaluation
    assert len(calls) == 4 + 3 + 1
    final = (tmp_path / "run" / "candidates" / "final.cu").read_text()
    assert "// 16x4096 -> 64, 1" in final and "// 8192x14336 -> 256, 1" in final
    # held-out shapes take their nearest tuned shape's configuration, which can sit across the 64-row line
    assert winner is not None and winner.method == "tuner" and winner.speedup > 1.7
    assert (tmp_path / "run" / "tuner.md").read_text().count("| 64 | 1 |") >= 5


def test_a_tuned_kernel_can_be_tuned_again():
    from astra_sglang.kernels.knobs import dispatch_source, parse_knobs, strip_dispatch
    from astra_sglang.paths import patches_dir
    from astra_sglang.specs.registry import get_spec

    spec = get_spec("silu_and_mul")
    source = (patches_dir() / "silu_and_mul" / "kernel.cu").read_text()
    source = strip_dispatch(source)  # the shipped file may itself be a tuner winner
    knobs = parse_knobs(source)
    first = dispatch_source(spec, source, knobs, {(16, 4096): tuple(k.values[0] for k in knobs)}, "one")
    assert strip_dispatch(first) == source
    second = dispatch_source(spec, strip_dispatch(first), knobs, {(64, 8192): tuple(k.values[-1] for k in knobs)}, "two")
    assert second.count("ASTRA_ENTRY {") == first.count("ASTRA_ENTRY {")


def test_a_winner_replaces_a_patch_only_when_faster(tmp_path):
    from astra_sglang.harness.records import EvalResult, ShapeResult, Timing
    from astra_sglang.optimize.records import Winner
    from astra_sglang.optimize.winner import existing_is_better, write_patch

    def winner(speedups):
        rows = [ShapeResult(shape=(n, 4096), dtype="bfloat16", correct=True, speedup=x,
                            candidate=Timing(median_us=1 / x, p10_us=1, p90_us=1), baseline=Timing(median_us=1, p10_us=1, p90_us=1))
                for n, x in zip((1, 16, 128), speedups)]
        source = tmp_path / "k.cu"
        source.write_text("// kernel\n")
        return Winner(kernel="silu_and_mul", source=str(source), round=1, speedup=1.0, method="tuner",
                      final=EvalResult(kernel="silu_and_mul", candidate="k.cu", ok=True, stage="done", shapes=rows))

    assert existing_is_better(winner([1.1, 1.1, 1.1]), tmp_path / "patches") is None  # nothing there yet
    write_patch(winner([1.2, 1.2, 1.0]), tmp_path / "patches")
    kept = existing_is_better(winner([1.1, 1.1, 1.1]), tmp_path / "patches")
    assert kept and "1.129x vs the winner's 1.100x" in kept and "3 cases" in kept
    assert existing_is_better(winner([1.3, 1.2, 1.1]), tmp_path / "patches") is None
