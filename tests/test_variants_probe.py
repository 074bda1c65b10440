"""benchmarks/gpu/variants.py's row-dependency probe: the norms' reduction cut to one barrier (no GPU)."""
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("op", ["rmsnorm", "fused_add_rmsnorm"])
def test_probe_replaces_every_row_reduction_of_the_shipped_norm(op, bench_script):
    source = (ROOT / "patches" / op / "kernel.cu").read_text()
    calls = len(re.findall(r"\brow_sum<", source))
    assert calls >= 3  # register, loop and cached-row paths
    probe = bench_script("gpu/variants").barrier_probe(source)
    assert "row_sum<" not in probe
    assert probe.count("probe_barrier(ss)") == calls
    assert "__syncthreads_count" in probe  # the barrier's predicate depends on each thread's loads


def test_probe_refuses_a_kernel_without_the_reduction_call(bench_script):
    with pytest.raises(SystemExit, match="row_sum"):
        bench_script("gpu/variants").barrier_probe("__global__ void k() {}\n")


def test_open_probe_plan_has_a_probe_file_per_variant_and_writes_them(tmp_path, monkeypatch, bench_script):
    variants = bench_script("gpu/variants")
    plan = variants.PLANS["open-probe"]
    assert {op for op, *_ in plan} == {"rmsnorm", "fused_add_rmsnorm"}
    assert all(label.startswith("probe-") and src.endswith("_probe.cu") for _, label, src, *_ in plan)
    monkeypatch.chdir(tmp_path)
    for folder in ("patches", "benchmarks"):  # the sources it reads; it writes work/cfg/ under tmp_path
        (tmp_path / folder).symlink_to(ROOT / folder)
    variants.write_generated()
    shipped = (tmp_path / "work/cfg/rmsnorm__probe.cu").read_text()
    assert "ASTRA_ENTRY {" in shipped and "#define ASTRA_NO_DEFAULT_ENTRY" not in shipped  # its own dispatch
    fixed = (tmp_path / "work/cfg/rmsnorm_512_4_1_1_1_1_probe.cu").read_text()
    assert fixed.rstrip().endswith("astra_launch_cfg<512, 4, 1, 1, 1, 1>(tensors, num_tensors, scalars, num_scalars, "
                                   "stream); }")


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_probe_of_the_shipped_rmsnorm_builds(tmp_path, monkeypatch, bench_script):
    from astra_sglang.harness.build import build_library

    monkeypatch.setenv("ASTRA_SGLANG_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "probe.cu"
    source.write_text(bench_script("gpu/variants").barrier_probe((ROOT / "patches/rmsnorm/kernel.cu").read_text()))
    build = build_library(source, arch="sm_90")
    assert build.ok, build.log[-2000:]
