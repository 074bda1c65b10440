"""The MoE GPU run's CPU-side parts: the model folder, the stages' commands, ending a stage's process tree,
collecting the outputs and the summary table (on results shaped as the GPU run writes them)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astra_sglang.profile.records import KernelRow, Phase, Profile
from astra_sglang.triton.moe.shapes import MoeShape, from_config
from astra_sglang.triton.results import BucketResult, TuneResult


def _tokenizer_folder(tmp_path):
    folder = tmp_path / "kit-model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {f"t{i}": i for i in range(100)}},
                                                       "added_tokens": [{"id": 0}, {"id": 1}]}))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return folder


def test_model_folder(bench_script, tmp_path):
    make = bench_script("make_moe_model")
    out = make.main([str(tmp_path / "moe"), "--layers", "2", "--tokenizer-from", str(_tokenizer_folder(tmp_path))])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["num_hidden_layers"] == 2
    assert cfg["vocab_size"] == 102 and (out / "tokenizer.json").is_file()
    assert from_config(out) == MoeShape(128, 768, 2048, 8, "bfloat16")
    kit = tmp_path / "kit-model"
    mixtral = make.main([str(tmp_path / "mx"), "--preset", "mixtral-8x7b", "--tokenizer-from", str(kit)])
    assert from_config(mixtral) == MoeShape(8, 14336, 4096, 2, "bfloat16")
    deepseek = make.main([str(tmp_path / "ds"), "--preset", "deepseek-v2-lite-experts", "--tokenizer-from", str(kit)])
    assert from_config(deepseek) == MoeShape(64, 1408, 2048, 6, "bfloat16")  # the bar's deepseek-v2-lite preset


def test_stage_commands(bench_script, tmp_path):
    run = bench_script("moe_run")
    stages = {s.name: s for s in run.stages(tmp_path, 20, 30999, 180)}
    assert list(stages) == ["model", "base", "tune", "patched"]
    base, tune, patched = stages["base"].argv, stages["tune"].argv, stages["patched"].argv
    assert base[base.index("--") + 1:] == run.SERVER and "--moe-runner-backend" in run.SERVER
    assert tune[tune.index("--profile") + 1] == str(tmp_path / "base/profile.json")
    assert tune[tune.index("--budget") + 1] == "180" and stages["tune"].needs == [str(tmp_path / "base/profile.json")]
    assert "--patched" in patched and patched[patched.index("--compare") + 1] == str(tmp_path / "base/profile.json")
    assert stages["patched"].needs == [str(tmp_path / "patches/fused_moe/manifest.json")]
    assert patched[patched.index("--port") + 1] == "30999"


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for an init that may not reap it)."""
    stat = Path(f"/proc/{pid}/stat")
    return stat.is_file() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("sigint", ["ignored", "fatal"])
def test_a_stage_past_its_time_leaves_no_process(bench_script, tmp_path, sigint):
    run = bench_script("moe_run")
    run.GRACE_S = 1.0
    # a stage whose child starts a grandchild in a session of its own (as a server or an evaluation does), then
    # outlives SIGINT or dies of it (orphaning the grandchild); the pid is written whole, and the limit leaves a
    # loaded machine's interpreter time to get there: the check below needs the grandchild started
    script = ("import os, signal, subprocess, sys, time\n"
              + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if sigint == "ignored" else "")
              + "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
              "open(sys.argv[1] + '.tmp', 'w').write(str(p.pid))\n"
              "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
              "time.sleep(60)\n")
    pid_file = tmp_path / "grandchild"
    stage = run.Stage("slow", [sys.executable, "-c", script, str(pid_file)], limit_s=8)
    start = time.monotonic()
    rc = run.run_stage(stage, tmp_path, deadline=time.monotonic() + 60)
    assert rc == 124 and time.monotonic() - start < 30
    assert pid_file.is_file(), "the stage's child did not start its grandchild within the limit"
    assert not _running(int(pid_file.read_text()))
    skipped = run.run_stage(run.Stage("late", ["true"], 5, needs=[str(tmp_path / "nothing")]), tmp_path, 0)
    assert skipped == -1


def _profile(fused_us, tokens, patched=False):
    rows = [KernelRow(name="fused_moe_kernel", kind="spec", op="fused_moe", calls=80, total_us=fused_us * 20,
                      per_step_us=fused_us, share=0.4),
            KernelRow(name="nvjet_x", kind="library", op="GEMM", calls=20, total_us=3000.0, per_step_us=150.0,
                      share=0.3)]
    phases = [Phase(name="decode", steps=20, step_wall_us=900.0, gpu_us_per_step=fused_us / 0.4,
                    tokens_per_step=tokens, rows=rows)]
    return Profile(date="2026-11-25", gpu="NVIDIA H100 80GB HBM3", phases=phases, patched=patched,
                   engagement={"fused_moe": {"calls": 12, "kernel_calls": 12, "fallbacks": 0, "deferred": 0}}
                   if patched else {})


def test_summary_tables(bench_script, tmp_path):
    summary = bench_script("moe_summary")
    tune = TuneResult(date="2026-11-25", gpu="NVIDIA H100 80GB HBM3", triton="3.6.0", sglang="0.5.17",
                      source_hash="ab" * 32, evaluations=4, seconds=200.0, final_ok=True, config_file="x.json",
                      shape={"experts": 128, "inter": 768, "hidden": 2048, "topk": 8, "dtype": "bfloat16"},
                      buckets=[BucketResult(tokens=64, pick="m16n64k128g1w4s2", pick_source="triton_3_2_0/E=.json (key 64)",
                                            best="m16n128k128g1w4s3", best_speedup=1.12, chosen="m16n128k128g1w4s3",
                                            verdict="tuned", final_speedup=1.1, final_us=100.0, pick_us=110.0),
                               BucketResult(tokens=4096, pick="m64n64k32g8wdsd", pick_source="SGLang's default config",
                                            chosen="m64n64k32g8wdsd", verdict="sglang-best", best_speedup=0.98)])
    (tmp_path / "tune.json").write_text(tune.model_dump_json())
    (tmp_path / "base.json").write_text(_profile(400.0, 64).model_dump_json())
    (tmp_path / "patched.json").write_text(_profile(330.0, 64, patched=True).model_dump_json())
    out = subprocess.run([sys.executable, "benchmarks/moe_summary.py", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "| 64 | `m16n64k128g1w4s2` | triton_3_2_0/E=.json (key 64) | tuned config | 1.120x | 1.100x | 110.0 -> 100.0 |" in text
    assert "| 4096 | `m64n64k32g8wdsd` | SGLang's default config | SGLang's pick (already the best) |" in text
    assert "| decode | 64 | 400.0 | 330.0 | -17.5% | 40.0% |" in text
    assert "12 of 12 answered by the tuned file" in text


def test_collect_keeps_to_eight_flat_files(bench_script, tmp_path):
    run = bench_script("moe_run")
    work, out = tmp_path / "work", tmp_path / "out"
    for src in run.OUTPUTS:
        (work / src).parent.mkdir(parents=True, exist_ok=True)
        (work / src).write_text("{}")
    tuned = work / "patches/fused_moe/configs/triton_3_6_0/E=128,N=768,device_name=X.json"
    tuned.parent.mkdir(parents=True)
    tuned.write_text("{}")
    out.mkdir()
    copied = run.collect(work, out)
    assert len(copied) + 1 <= 8 and "tuned-config.json" in copied  # + summary.md
    assert all(p.is_file() and p.parent == out for p in out.iterdir())


def test_summary_of_a_run_with_an_earlier_tunes_patches(bench_script, tmp_path):
    """PATCHES: no tune.json, the in-place table still comes, and the run counts as done; a run with neither
    a tuning result nor a patched profile does not."""
    (tmp_path / "base.json").write_text(_profile(400.0, 64).model_dump_json())
    (tmp_path / "patched.json").write_text(_profile(330.0, 64, patched=True).model_dump_json())
    out = subprocess.run([sys.executable, "benchmarks/moe_summary.py", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "tuning skipped" in out.stdout and "| decode | 64 | 400.0 | 330.0 | -17.5% | 40.0% |" in out.stdout
    (tmp_path / "patched.json").unlink()
    out = subprocess.run([sys.executable, "benchmarks/moe_summary.py", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 1 and "no tuning result" in out.stdout


def test_stage_commands_with_patches_skip_the_tune(bench_script, tmp_path, monkeypatch, capsys):
    run = bench_script("moe_run")
    monkeypatch.setenv("PATCHES", str(tmp_path))
    monkeypatch.setenv("PRESET", "mixtral-8x7b")
    assert run.main([str(tmp_path / "out"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "tune:" not in printed and "patched:" in printed and "--preset mixtral-8x7b" in printed
