"""The tuner's knob parsing and generated per-shape dispatch (compile-only here; GPU runs in benchmarks)."""
from pathlib import Path

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.harness.build import build_library
from astra_sglang.specs.registry import get_spec
from astra_sglang.tuner import run_tuner
from astra_sglang.tuner.knobs import Knob, configs, dim_sources, dispatch_source, parse_knobs

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
