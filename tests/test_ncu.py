"""Nsight Compute output parsing and the profiler's choices (ncu itself runs only on GPU machines)."""
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from astra_sglang.harness.ncu import NcuProfiler, ProfileRequest, parse_ncu_csv, pick_shape
from astra_sglang.harness.records import BuildInfo, EvalResult, ShapeResult

# The layout of `ncu --csv --page details`: a preamble, then one row per (kernel, section, metric).
NCU_CSV = '''==PROF== Connected to process 4242
==PROF== Profiling "silu_and_mul_kernel" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","127.0.0.1","silu_and_mul_kernel","1","13","(128, 1, 1)","(16, 64, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","41.37"
"0","4242","python3","127.0.0.1","silu_and_mul_kernel","1","13","(128, 1, 1)","(16, 64, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","nsecond","2,144"
"0","4242","python3","127.0.0.1","silu_and_mul_kernel","1","13","(128, 1, 1)","(16, 64, 1)","0","9.0","Occupancy","Achieved Occupancy","%","38.5"
"0","4242","python3","127.0.0.1","silu_and_mul_kernel","1","13","(128, 1, 1)","(16, 64, 1)","0","9.0","Launch Statistics","Registers Per Thread","register/thread","32"
"0","4242","python3","127.0.0.1","silu_and_mul_kernel","1","13","(128, 1, 1)","(16, 64, 1)","0","9.0","Warp State Statistics","Warp Cycles Per Issued Instruction","cycle","21.2"
"0","4242","python3","127.0.0.1","silu_and_mul_kernel","1","13","(128, 1, 1)","(16, 64, 1)","0","9.0","GPU Speed Of Light Throughput","Bottleneck","","Memory"
'''


def test_ncu_csv_becomes_named_numbers():
    facts = parse_ncu_csv(NCU_CSV)
    assert facts["GPU Speed Of Light Throughput: DRAM Throughput (%)"] == 41.37
    assert facts["GPU Speed Of Light Throughput: Duration (nsecond)"] == 2144.0  # thousands separator
    assert facts["Occupancy: Achieved Occupancy (%)"] == 38.5
    assert not any("Bottleneck" in k for k in facts)  # text values are dropped
    assert parse_ncu_csv("==PROF== no kernels were profiled\n") == {}


def test_profiler_picks_the_shape_furthest_from_the_roofline():
    rows = [ShapeResult(shape=(1, 4096), dtype="float16", pct_roofline=5.0),
            ShapeResult(shape=(8192, 4096), dtype="bfloat16", pct_roofline=90.0),
            ShapeResult(shape=(64, 4096), dtype="bfloat16", pct_roofline=20.0),
            ShapeResult(shape=(3, 11), dtype="bfloat16", correct=False)]
    assert pick_shape(EvalResult(kernel="k", candidate="c", shapes=rows)).shape == (64, 4096)


def test_ncu_command_filters_on_the_nvtx_range_and_keeps_clocks(tmp_path):
    cmd = NcuProfiler("silu_and_mul", ncu="ncu").command(Path("req.json"))
    assert cmd[:2] == ["ncu", "--csv"] and "--nvtx-include" in cmd and cmd[cmd.index("--nvtx-include") + 1] == "astra/"
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[-3:] == ["-m", "astra_sglang.harness.ncu", "req.json"]


def test_without_a_timed_shape_only_compiler_facts_are_returned():
    result = EvalResult(kernel="silu_and_mul", candidate="c", build=BuildInfo(ok=True, registers=40, spill_bytes=0))
    facts = NcuProfiler("silu_and_mul", ncu="ncu")("k.cu", result)
    assert facts.registers == 40 and facts.spill_bytes == 0 and facts.ncu == {}


def test_a_request_names_one_shape_or_several():
    one = ProfileRequest(kernel="rmsnorm", library="lib.so", shape=(256, 4096), dtype="bfloat16")
    many = ProfileRequest.model_validate_json(ProfileRequest(
        kernel="rmsnorm", library="lib.so", shapes=[(128, 4096), (256, 13824)], dtype="bfloat16").model_dump_json())
    assert one.all_shapes() == [(256, 4096)] and many.all_shapes() == [(128, 4096), (256, 13824)]
    with pytest.raises(ValidationError):
        ProfileRequest(kernel="rmsnorm", library="lib.so", dtype="bfloat16")
    with pytest.raises(ValidationError):
        ProfileRequest(kernel="rmsnorm", library="lib.so", shape=(1, 2), shapes=[(1, 2)], dtype="bfloat16")


# Stands in for ncu + the driver: reports the launch codes the driver would, prints one kernel per launched
# shape inside its NVTX shape range (shape 1 refused), as ncu's CSV would.
FAKE_NCU = """import json, pathlib, sys
request = pathlib.Path(sys.argv[-1])
shapes = json.loads(request.read_text())["shapes"]
codes = [-1 if i == 1 else 0 for i in range(len(shapes))]
request.with_name(request.stem + ".launched.json").write_text(json.dumps({"codes": codes}))
print('"ID","Process ID","thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
      '"Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"')
launched = [i for i, code in enumerate(codes) if code == 0]
for launch_id, i in enumerate(launched):
    cell = '7  ""<default domain>:astra:none""  ""<default domain>:astra_shape_%d:none""' % i
    print('"%d","7","%s","k","Launch Statistics","Grid Size","","%d"' % (launch_id, cell, shapes[i][0]))
"""


def test_profile_many_runs_one_process_and_maps_launches_to_shapes(tmp_path, caplog):
    fake = tmp_path / "ncu"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_NCU)
    fake.chmod(0o755)
    per_shape = NcuProfiler("rmsnorm", ncu=str(fake)).profile_many("lib.so", [(128, 4096), (256, 4096), (512, 8)],
                                                                     "bfloat16")
    assert per_shape == [{"Launch Statistics: Grid Size": 128.0}, {}, {"Launch Statistics: Grid Size": 512.0}]
    assert "no profiled kernel for shape(s) [1]" in caplog.text and "[0, -1, 0]" in caplog.text
    assert NcuProfiler("rmsnorm", ncu="ncu").profile_many("lib.so", [], "bfloat16") == []
