"""benchmarks/bounds_table.py: the streaming reference and the bound labels (no GPU)."""
import json


def _row(kernel, nbytes, ours_us, base_us, roofline_gbps=4000.0, dtype="bfloat16"):
    return {"type": "shape", "kernel": kernel, "dtype": dtype, "shape": [1], "min_bytes": nbytes,
            "roofline_gbps": roofline_gbps, "speedup": base_us / ours_us, "pct_roofline": None,
            "candidate": {"median_us": ours_us}, "baseline": {"median_us": base_us}}


def test_streaming_reference_takes_the_faster_side_and_interpolates_in_log_bytes(tmp_path, bench_script):
    bt = bench_script("bounds_table")
    rows = [_row("silu_and_mul", 4_000_000, 2.0, 4.0),  # 1 us at the roofline: 50% (ours)
            _row("silu_and_mul", 16_000_000, 8.0, 5.0),  # 4 us: 80% (SGLang's side is faster)
            _row("rmsnorm", 8_000_000, 1.0, 1.0), _row("silu_and_mul", 8_000_000, 1.0, 1.0, dtype="float16")]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    points = bt.streaming_points([str(path)], "bfloat16")
    assert [round(p, 6) for _, p in points] == [50.0, 80.0]
    assert abs(bt.streaming_at(points, 8_000_000) - 65.0) < 1e-9  # halfway in log(bytes)
    assert bt.streaming_at(points, 1_000_000) is None and bt.streaming_at(points, 32_000_000) is None


def test_bound_labels(bench_script):
    bt = bench_script("bounds_table")
    norm = {"kernel": "rmsnorm", "speedup": 1.1, "min_bytes": 16 << 20}
    assert bt.bound({**norm, "speedup": 1.4}, 90, 80) == "none: 1.32x met"
    assert bt.bound(norm, 104, 95).startswith("bandwidth")
    assert bt.bound(norm, 84, 81).startswith("size")
    assert bt.bound(norm, 75, 83) == "open: a streaming kernel gets there at this size"
    assert bt.bound({**norm, "min_bytes": 4 << 20}, 42, 46).endswith("(latency range)")
    assert bt.bound({**norm, "kernel": "silu_and_mul", "min_bytes": 1 << 20}, 8, 7).startswith("latency")


def test_probe_rows_give_the_row_dependency_bound(tmp_path, bench_script):
    bt = bench_script("bounds_table")
    norm = {"kernel": "rmsnorm", "speedup": 1.2, "min_bytes": 4 << 20}
    assert bt.bound(norm, 42, 46, probe=1.29).startswith("row dependency")
    assert bt.bound(norm, 42, 46, probe=1.38).startswith("open: the row reduction costs the rest")
    assert bt.bound(norm, 50, 46, probe=1.10).startswith("size")  # the size bound comes first
    rows = [{**_row("rmsnorm", 1, 2.0, 2.6), "shape": [128, 4096], "candidate_label": f"{plan}:{label}"}
            for plan, label in (("open-probe", "probe-shipped"), ("tie", "probe-512x4r1"), ("tie", "new"))]
    rows[1]["speedup"] = 1.4  # the best probe row wins; the non-probe row is not a probe
    rows[2]["speedup"] = 2.0
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bt.probe_best([str(path)], "bfloat16") == {("rmsnorm", (128, 4096)): 1.4}


def test_label_keeps_one_candidate_and_a_later_file_replaces_a_row(tmp_path, bench_script):
    bt = bench_script("bounds_table")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rows = [{**_row("rmsnorm", 1, 2.0, 2.6), "candidate_label": label} for label in ("models:shipped", "tie:old")]
    a.write_text("".join(json.dumps(r) + "\n" for r in rows))
    b.write_text(json.dumps({**_row("rmsnorm", 1, 1.0, 2.6), "candidate_label": "models:shipped"}) + "\n")
    ncu = tmp_path / "ncu.jsonl"
    ncu.write_text("")
    kept, _ = bt.load([str(a)], [str(ncu)], "bfloat16", ("tie:old",))
    assert [r["candidate_label"] for r in kept.values()] == ["tie:old"]
    kept, _ = bt.load([str(a), str(b)], [str(ncu)], "bfloat16", ("models:shipped",))
    assert [r["candidate"]["median_us"] for r in kept.values()] == [1.0]


def test_stream_probe_rows_join_the_reference_and_bound_silu(tmp_path, bench_script):
    bt = bench_script("bounds_table")
    probe = tmp_path / "stream.jsonl"
    probe.write_text("".join(json.dumps({"bytes": b, "reads": r, "threads": 256, "vpt": 1, "median_us": 1.0,
                                         "pct_roofline": pct, "roofline_gbps": 4000.0}) + "\n"
                             for b, r, pct in ((4_000_000, 1, 40.0), (4_000_000, 2, 45.0), (16_000_000, 2, 70.0))))
    silu = tmp_path / "silu.jsonl"
    silu.write_text(json.dumps(_row("silu_and_mul", 16_000_000, 4.0, 8.0)) + "\n")  # 100% at 16 MB
    points = bt.streaming_points([str(silu)], "bfloat16", [str(probe)])
    assert [round(p, 6) for _, p in points] == [45.0, 100.0]  # the best configuration, then the faster kind
    assert [round(p, 6) for _, p in bt.streaming_points([], "bfloat16", [str(probe)])] == [45.0, 70.0]
    silu_row = {"kernel": "silu_and_mul", "speedup": 1.02, "min_bytes": 10 << 20}
    assert bt.bound(silu_row, 82, 68).startswith("size")
    assert bt.bound(silu_row, 82, 90) == "open"
    assert bt.bound(silu_row, 82) == "open"  # no probe rows: as before
    assert bt.bound({**silu_row, "min_bytes": 1 << 20}, 82, 68).startswith("latency")
