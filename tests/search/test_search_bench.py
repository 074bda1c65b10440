"""benchmarks/search_bench.py on the CPU (--simulate): every arm runs, the table and rows are complete.
Figures are not asserted: they are the benchmark's to report, on a GPU."""
import json


def test_simulated_search_bench(tmp_path, bench_script):
    sb = bench_script("search_bench")
    rows = sb.main(["--simulate", "--out", str(tmp_path), "--budget", "6", "--sim-eval-s", "0.2",
                    "--sim-build-s", "0.1", "--latency", "0.05"])
    assert [r.arm for r in rows] == ["sequential", "pool-1gpu", "pool-2gpu", "loop-paper", "loop-population-1gpu"]
    by = {r.arm: r for r in rows}
    assert set(by["pool-2gpu"].gpu_shares) == {"0", "1"} and min(by["pool-2gpu"].gpu_shares.values()) > 0
    assert all(r.evaluations > 0 and r.median_eval_s for r in rows if not r.arm.startswith("loop"))
    for arm in ("loop-paper", "loop-population-1gpu"):
        assert by[arm].candidates >= 1 and by[arm].drafts_per_hour > 0
        assert set(by[arm].fast_p) == {"fast_1.0", "fast_1.1"}
        assert by[arm].prompt_tokens["coder draft"] > 1000 and "planner" in by[arm].prompt_tokens
    assert by["loop-paper"].rounds >= 1 and by["loop-population-1gpu"].candidates >= 4  # a population round
    saved = [json.loads(x) for x in (tmp_path / "search.jsonl").read_text().splitlines()]
    assert [s["arm"] for s in saved] == [r.arm for r in rows]
    table = (tmp_path / "search.md").read_text().strip().splitlines()
    assert table[-1].startswith("| loop-population-1gpu | 1 |") and '"simulated": true' in table[2]


def test_arms_subset_and_unknown_arm(tmp_path, bench_script):
    sb = bench_script("search_bench")
    rows = sb.main(["--simulate", "--out", str(tmp_path), "--budget", "1", "--sim-eval-s", "0.1",
                    "--sim-build-s", "0.05", "--arms", "sequential,pool-2gpu", "--gpus", "0,1"])
    assert [r.arm for r in rows] == ["sequential", "pool-2gpu"]
    try:
        sb.main(["--simulate", "--out", str(tmp_path), "--arms", "nope"])
    except SystemExit as exc:
        assert "unknown arms ['nope']" in str(exc)
    else:
        raise AssertionError("an unknown arm must be refused")
