"""benchmarks/attention_run.py on CPU: its stages' commands, and the results it writes from fake tuning runs
and profiles (no GPU, no server)."""
from __future__ import annotations

import json

import pytest


def _tune_json(kernel, buckets):
    return {"kernel": kernel, "date": "2025-01-01", "gpu": "GPU", "triton": "3.6.0", "sglang": "0.5.17",
            "final_ok": True, "buckets": [
                {"bucket": list(b), "pick": "h16n32w4s2", "best": best, "best_speedup": speed, "chosen": chosen,
                 "verdict": verdict, "final_speedup": final, "pick_us": 10.0, "final_us": 10.0 / (final or 1.0)}
                for b, best, speed, chosen, verdict, final in buckets]}


def test_stages_tune_both_kernels_then_profile(bench_script, tmp_path):
    run = bench_script("attention_run")
    names = [s.name for s in run.stages(tmp_path, 20, 30125)]
    assert names == ["tune-decode", "tune-extend", "base", "patched"]
    tune = run.stages(tmp_path, 20, 30125)[0].argv
    assert tune[tune.index("--model") + 1] == "llama-3-8b" and "decode_attention" in tune
    # The searches end within their budgets (final evaluation included) inside the default deadline; the profiles
    # run after them where time is left, or alone with PATCHES and DEADLINE=580 (one GPU command's 600 s less 20).
    assert sum(run.BUDGETS.values()) <= run.DEFAULT_DEADLINE - 40 and run.RESERVE_PROFILES <= 580 - 40
    assert run.RESERVE_PROFILES <= sum(s.limit_s for s in run.stages(tmp_path, 20, 30125)[2:])


@pytest.mark.parametrize("profiles", [False, True])
def test_results_and_summary_from_fake_runs(bench_script, tmp_path, profiles):
    run = bench_script("attention_run")
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    for kind, buckets in (("decode", [((1, 1024), None, None, "h16n32w4s2", "sglang-best", None),
                                      ((64, 4096), "h16n64w8s2", 1.21, "h16n64w8s2", "tuned", 1.18)]),
                          ("extend", [((1024, 0), "m128n64w8s1", 1.0, "m128n64w8s1", "sglang-best", None)])):
        (work / f"tune-{kind}").mkdir(parents=True)
        (work / f"tune-{kind}" / "tune.json").write_text(json.dumps(_tune_json(f"{kind}_attention", buckets)))
    if profiles:
        for name, us in (("base", 40.0), ("patched", 34.0)):
            (work / name).mkdir()
            rows = [{"name": "_fwd_grouped_kernel_stage1", "per_step_us": us, "share": 0.05},
                    {"name": "_fwd_kernel_stage2", "per_step_us": 2.0, "share": 0.01},
                    {"name": "nvjet_gemm", "per_step_us": 500.0, "share": 0.9}]
            (work / name / "profile.json").write_text(json.dumps({"phases": [{"name": "decode", "rows": rows}],
                                                                  "engagement": {"decode_attention": {"calls": 9}}}))
    copied = run.collect(work, out)
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[1])["final_speedup"] == 1.18
    text = (out / "summary.md").read_text()
    assert "| decode_attention | 64x4096 |" in text and "1.180x" in text
    assert text.count("SGLang's pick is already the best") == 2
    assert ("42.0 (6.0%)" in text and "36.0 (6.0%)" in text and "decode_attention" in text.split("engagement")[-1]) \
        == profiles
    assert "summary.md" in copied
