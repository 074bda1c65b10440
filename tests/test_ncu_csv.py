"""ncu's CSV with several profiled launches: grouping by ID, attribution to shapes (no GPU needed)."""
import csv
import io
import json

from astra_sglang.harness.ncu_csv import attribute, parse_ncu_csv, parse_ncu_launches, shape_range

# `ncu --csv --page details --nvtx`: the two NVTX columns sit between "Host Name" and "Kernel Name"; a
# push/pop cell is the thread id, then each open range quoted as domain:name:payload/color/message fields.
PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
START_STOP = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
METRICS = [("GPU Speed Of Light Throughput", "Duration", "ns"), ("GPU Speed Of Light Throughput", "DRAM Throughput", "%"),
           ("Memory Workload Analysis", "Memory Throughput", "byte/s"), ("GPU Speed Of Light Throughput", "Bottleneck", "")]


def stack(*ranges: str) -> str:
    return "4242  " + "  ".join(f'"<default domain>:{name}:none:none:none:none:none:none"' for name in ranges)


def ncu_csv(launches, nvtx: bool = True) -> str:
    """launches: (kernel name, shape index or None, duration ns) in launch order -> ncu's details CSV."""
    buf = io.StringIO()
    out = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    out.writerow(["ID", "Process ID", "Process Name", "Host Name", *([PUSH_POP, START_STOP] if nvtx else []),
                  "Kernel Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name",
                  "Metric Name", "Metric Unit", "Metric Value"])
    for launch_id, (kernel, shape, duration) in enumerate(launches):
        ranges = [stack("astra", shape_range(shape)) if shape is not None else stack("astra"), ""]
        values = [f"{duration:,}", "40.5", "1,445,185,667,752.44", "Memory"]
        for (section, name, unit), value in zip(METRICS, values):
            out.writerow([launch_id, 4242, "python3", "127.0.0.1", *(ranges if nvtx else []), kernel, 1, 7,
                          "(256, 1, 1)", "(512, 1, 1)", 0, "9.0", section, name, unit, value])
    return "==PROF== Connected to process 4242\n==PROF== Disconnected from process 4242\n" + buf.getvalue()


def test_launches_are_grouped_by_id_in_launch_order_with_their_shape_range():
    launches = parse_ncu_launches(ncu_csv([("norm_kernel", 0, 2144), ("norm_kernel", 1, 3100), ("other", 2, 5000)]))
    assert [(x.id, x.kernel_name, x.shape_index) for x in launches] == [(0, "norm_kernel", 0), (1, "norm_kernel", 1),
                                                                        (2, "other", 2)]
    assert launches[1].facts["GPU Speed Of Light Throughput: Duration (ns)"] == 3100.0  # thousands separator
    assert launches[0].facts["Memory Workload Analysis: Memory Throughput (byte/s)"] == 1445185667752.44
    assert all(isinstance(v, float) for x in launches for v in x.facts.values())  # names and text values stay out
    assert parse_ncu_launches("==PROF== no kernels were profiled\n") == []


def test_single_shape_parse_keeps_the_first_kernels_values():
    text = ncu_csv([("a", 0, 2144), ("b", 0, 9999)])
    assert parse_ncu_csv(text)["GPU Speed Of Light Throughput: Duration (ns)"] == 2144.0


def test_nvtx_ranges_attribute_an_op_of_two_kernels_and_a_refused_shape():
    launches = parse_ncu_launches(ncu_csv([("reduce", 0, 100), ("apply", 0, 200), ("reduce", 2, 300), ("apply", 2, 400)]))
    per_shape, problem = attribute(launches, 3, codes=[0, -1, 0])
    assert per_shape[0]["kernel 0: GPU Speed Of Light Throughput: Duration (ns)"] == 100.0
    assert per_shape[0]["kernel 1: GPU Speed Of Light Throughput: Duration (ns)"] == 200.0
    assert per_shape[2]["kernel 1: GPU Speed Of Light Throughput: Duration (ns)"] == 400.0
    assert per_shape[1] == {} and "[1]" in problem


def test_one_kernel_per_shape_keeps_the_single_shape_keys():
    per_shape, problem = attribute(parse_ncu_launches(ncu_csv([("k", 0, 100), ("k", 1, 200)])), 2)
    assert problem is None
    assert [f["GPU Speed Of Light Throughput: Duration (ns)"] for f in per_shape] == [100.0, 200.0]


def test_without_nvtx_ranges_only_an_exact_count_is_attributed():
    plain = parse_ncu_launches(ncu_csv([("k", None, 100), ("k", None, 300)], nvtx=False))
    assert all(x.shape_index is None for x in plain)
    per_shape, problem = attribute(plain, 2)
    assert problem is None and [f["GPU Speed Of Light Throughput: Duration (ns)"] for f in per_shape] == [100.0, 300.0]
    per_shape, problem = attribute(plain, 3, codes=[0, -1, 0])  # the refused shape launched nothing
    assert problem is None and per_shape[1] == {}
    assert per_shape[2]["GPU Speed Of Light Throughput: Duration (ns)"] == 300.0
    per_shape, problem = attribute(plain, 3)  # 2 kernels for 3 launched shapes: not guessed
    assert per_shape == [{}, {}, {}] and "not attributed" in problem
    unranged = parse_ncu_launches(ncu_csv([("k", None, 100), ("k", None, 300)]))  # the column, outer range only
    assert attribute(unranged, 1)[0] == [{}]


def test_a_shape_range_beyond_the_request_is_not_trusted():
    per_shape, problem = attribute(parse_ncu_launches(ncu_csv([("k", 5, 100)])), 2)
    assert per_shape == [{}, {}] and problem


def test_ncu_table_defaults_to_every_paper_shape_and_reads_dram_bytes_per_second():
    from astra_sglang.profile import ncu_table as table

    wanted = table.wanted_shapes([])
    assert list(wanted) == ["silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse"]
    assert sum(map(len, wanted.values())) == 26
    assert table.wanted_shapes(["rmsnorm:256x13824", "rmsnorm:512x14336"]) == {"rmsnorm": [(256, 13824), (512, 14336)]}
    more = table.wanted_shapes(["paper", "rmsnorm:128x4096", "rmsnorm:16384x8192"])  # a paper shape is not repeated
    assert more["rmsnorm"] == wanted["rmsnorm"] + [(16384, 8192)] and more["silu_and_mul"] == wanted["silu_and_mul"]
    facts = {"GPU Speed Of Light Throughput: Memory Throughput (%)": 35.0,
             "Memory Workload Analysis: Memory Throughput (Tbyte/s)": 1.45,
             "GPU Speed Of Light Throughput: Duration (usecond)": 9.8}
    assert table.pick(facts, ": Memory Throughput", table.RATE_UNITS) == 1450.0  # the % of the same name skipped
    assert table.pick(facts, ": Duration", table.TIME_UNITS) == 9.8
    two = {"kernel 0: S: Duration (ns)": 1000.0, "kernel 1: S: Duration (ns)": 2000.0}
    assert "| ours (2 kernels, 1st shown) | 1.00 |" in table.row("op", "1x2", "ours", two)


def test_stall_shares_are_percentages_of_the_cycles_per_issue(tmp_path):
    from astra_sglang.profile import ncu_table as table

    facts = {"Warp State Statistics: Warp Cycles Per Issued Instruction (cycle)": 20.0,
             **{f"Command line profiler metrics: {m}": v for m, v in zip(table.STALL_METRICS, (10.0, 2.0, 1.0, 3.0))}}
    path = tmp_path / "ncu.jsonl"
    path.write_text("\n".join(json.dumps({"op": "rmsnorm", "shape": [1, 5120], "side": side, "facts": facts})
                              for side in ("ours", "SGLang")) + "\n"
                    + json.dumps({"op": "rmsnorm", "shape": [8, 8], "side": "ours", "facts": {}}) + "\n")
    rows = [line for line in table.stall_shares(path).splitlines() if line.startswith("| rmsnorm")]
    assert rows == ["| rmsnorm | 1x5120 | 20.0 | 50 | 10 | 5 | 15 | 15 |"]  # ours only; no facts, no row
