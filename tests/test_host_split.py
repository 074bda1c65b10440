"""benchmarks/gpu/host_split.sh on CPU with stand-in jobs: each job gets its own settings as environment variables
(the resume folders above all: a resumed call that silently starts over loses a GPU call), its GPUs, its output
folder; the ab job's set-up comes first; every job's folder comes back as an archive even when another job fails."""
from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

STAND_IN = """#!/usr/bin/env bash
# Records what it was given: its arguments and the variables a job of host_split.sh may set.
dir=${{1:-$OUT}}
mkdir -p "$dir"
{{ echo "args=$*"; for v in OUT STAGES DEADLINE PERIODS ROUNDS RUNS GPUS CORES SHAPES BUCKETS CUDA_VISIBLE_DEVICES PORT \\
    HOME_FROM CONFIGS FINAL_S AA PRESET MODE BATCH_SIZES TUNER_FROM WORK BAR_WORK TIERS_S COLD_SAMPLE; do
    echo "$v=${{!v-<unset>}}"; done; }} > "$dir/seen.txt"
{setup}
exit {rc}
"""


def stand_in(tmp_path: Path, name: str, rc: int = 0, setup: str = "") -> Path:
    path = tmp_path / f"{name}.sh"
    path.write_text(STAND_IN.format(rc=rc, setup=setup))
    return path


def seen(archive: Path, name: str) -> dict[str, str]:
    with tarfile.open(archive) as tar:
        text = tar.extractfile(f"{name}/seen.txt").read().decode()
    return dict(line.split("=", 1) for line in text.splitlines())


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    ab = stand_in(tmp_path, "ab", setup='echo "== model ready at 1 s" > "$OUT/console.txt"')
    tiers = stand_in(tmp_path, "tiers", rc=3)  # a failing job loses no other's results
    onboard = stand_in(tmp_path, "onboard")
    abruns = stand_in(tmp_path, "abruns", setup='echo "== model ready at 1 s" > "$OUT/console.txt"')
    bar = stand_in(tmp_path, "bar")
    inherited = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "PORT", "GPUS")}
    full = {**inherited, "AB_SCRIPT": str(ab), "TIERS_SCRIPT": str(tiers), "ONBOARD_SCRIPT": str(onboard),
            "ABRUNS_SCRIPT": str(abruns), "BAR_SCRIPT": str(bar),
            "STAGGER": "0", "WORKDIR": str(tmp_path / "work"), "ASTRA_COMMIT": "abc1234", **env}
    return subprocess.run(["bash", "benchmarks/gpu/host_split.sh", str(tmp_path / "out")], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=120)


def test_each_job_gets_its_settings_and_its_resume_folder(tmp_path):
    done = run(tmp_path, AB_RUNS="/earlier/ab", TIERS_RUNS="/earlier/tiers", PERIODS="3", BUCKETS="16,64",
               HOME_FROM="/earlier/home", ONBOARD_STEPS="optimize engage", FINAL_S="200")
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out"
    ab = seen(out / "ab.tgz", "ab")
    assert ab["RUNS"] == "/earlier/ab" and ab["PERIODS"] == "3" and ab["STAGES"] == "aa wrong"
    assert ab["OUT"] == str(tmp_path / "work" / "ab") and ab["ROUNDS"] == "<unset>"
    tiers = seen(out / "tiers.tgz", "tiers")
    assert tiers["RUNS"] == "/earlier/tiers" and tiers["GPUS"] == "2" and tiers["BUCKETS"] == "16,64"
    assert tiers["args"] == str(tmp_path / "work" / "tiers") and tiers["SHAPES"] == "<unset>"
    onboard = seen(out / "onboard.tgz", "onboard")
    assert onboard["CUDA_VISIBLE_DEVICES"] == "3" and onboard["HOME_FROM"] == "/earlier/home"
    assert onboard["STAGES"] == "<unset>" and onboard["FINAL_S"] == "200"
    assert "tiers exit code 3" in (out / "tiers.console").read_text()
    assert "ab exit code 0" in (out / "ab.console").read_text()


@pytest.mark.parametrize("jobs", ["tiers", "ab onboard"])
def test_only_the_jobs_asked_for_run(tmp_path, jobs):
    done = run(tmp_path, JOBS=jobs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "out").glob("*.tgz")) == sorted(f"{j}.tgz" for j in jobs.split())


def test_the_ab_runs_beside_the_aa_get_gpus_2_3_their_port_and_the_aas_folder(tmp_path):
    done = run(tmp_path, JOBS="ab abruns", AB_STAGES="aa", ABRUNS_RUNS="/earlier/abruns", AA="/earlier/ab/aa",
               PERIODS="3")
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out"
    abruns = seen(out / "abruns.tgz", "abruns")
    assert abruns["GPUS"] == "2,3" and abruns["PORT"] == "30233" and abruns["STAGES"] == "mixtral"
    assert abruns["CUDA_VISIBLE_DEVICES"] == "<unset>"  # ab gives each server its GPU from --gpus
    assert abruns["RUNS"] == "/earlier/abruns" and abruns["AA"] == "/earlier/ab/aa" and abruns["PERIODS"] == "3"
    assert abruns["OUT"] == str(tmp_path / "work" / "abruns")
    ab = seen(out / "ab.tgz", "ab")
    assert ab["PORT"] == "<unset>" and ab["CUDA_VISIBLE_DEVICES"] == "<unset>" and ab["STAGES"] == "aa"


def test_two_ab_runs_at_once_get_their_own_gpus_ports_stages_and_resume_folders(tmp_path):
    done = run(tmp_path, JOBS="abruns01 abruns", ABRUNS01_RUNS="/earlier/abruns01", ABRUNS_RUNS="/earlier/abruns",
               AA="/committed/aa", PERIODS="5")
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = (seen(tmp_path / "out" / f"{n}.tgz", n) for n in ("abruns01", "abruns"))
    assert (first["GPUS"], first["PORT"], first["STAGES"], first["RUNS"]) == ("0,1", "30333", "dense",
                                                                              "/earlier/abruns01")
    assert (second["GPUS"], second["PORT"], second["STAGES"], second["RUNS"]) == ("2,3", "30233", "mixtral",
                                                                               "/earlier/abruns")
    assert first["AA"] == second["AA"] == "/committed/aa" and first["PERIODS"] == second["PERIODS"] == "5"
    assert first["OUT"] == str(tmp_path / "work" / "abruns01") and first["CUDA_VISIBLE_DEVICES"] == "<unset>"
    assert "== abruns01 set up at" in done.stdout


def test_the_bar_beside_the_aa_sees_only_gpus_2_3_and_gets_its_own_settings(tmp_path):
    done = run(tmp_path, JOBS="ab bar", AB_STAGES="aa", PRESET="qwen3-30b-a3b", MODE="exhaustive", BAR_DEADLINE="300")
    assert done.returncode == 0, done.stdout + done.stderr
    bar = seen(tmp_path / "out" / "bar.tgz", "bar")
    assert bar["CUDA_VISIBLE_DEVICES"] == "2,3" and bar["GPUS"] == "<unset>"  # its children get physical ids
    assert bar["DEADLINE"] == "300" and bar["PRESET"] == "qwen3-30b-a3b" and bar["MODE"] == "exhaustive"
    assert bar["args"] == str(tmp_path / "work" / "bar")
    assert seen(tmp_path / "out" / "ab.tgz", "ab")["CUDA_VISIBLE_DEVICES"] == "<unset>"


def test_two_bars_at_once_get_their_own_gpus_presets_and_triton_caches(tmp_path):
    done = run(tmp_path, JOBS="bar01 bar", PRESET="qwen3-30b-a3b", BATCH_SIZES="1,64", TUNER_FROM="/q/a /q/b",
               BAR01_PRESET="deepseek-v2-lite", BAR01_TUNER_FROM="/d/a", BAR_DEADLINE="200")
    assert done.returncode == 0, done.stdout + done.stderr
    bar, bar01 = seen(tmp_path / "out" / "bar.tgz", "bar"), seen(tmp_path / "out" / "bar01.tgz", "bar01")
    assert (bar["CUDA_VISIBLE_DEVICES"], bar01["CUDA_VISIBLE_DEVICES"]) == ("2,3", "0,1")
    assert (bar["PRESET"], bar["TUNER_FROM"]) == ("qwen3-30b-a3b", "/q/a /q/b")
    assert (bar01["PRESET"], bar01["TUNER_FROM"]) == ("deepseek-v2-lite", "/d/a")
    assert bar["BATCH_SIZES"] == bar01["BATCH_SIZES"] == "1,64" and bar["DEADLINE"] == bar01["DEADLINE"] == "200"
    assert (bar["WORK"], bar["BAR_WORK"]) == ("<unset>", "<unset>")  # the scripts' defaults
    assert (bar01["WORK"], bar01["BAR_WORK"]) == ("/tmp/moe-tiers-work01", "/tmp/moe-bar-work01")
    assert bar01["args"] == str(tmp_path / "work" / "bar01")


@pytest.mark.parametrize("pair, gpus", [(("abruns", "tiers"), "2,3"), (("abruns", "onboard"), "2,3"),
                                        (("bar", "abruns"), "2,3"), (("bar", "tiers"), "2,3"),
                                        (("bar", "onboard"), "2,3"), (("ab", "abruns01"), "0,1"),
                                        (("ab", "bar01"), "0,1"), (("abruns01", "bar01"), "0,1")])
def test_two_jobs_on_the_same_gpus_are_refused(tmp_path, pair, gpus):
    done = run(tmp_path, JOBS=f"{pair[0]} {pair[1]}")
    assert done.returncode == 2 and f"both {pair[0]} and {pair[1]}, and both run on GPUs {gpus}" in done.stdout


def test_one_bar_job_runs_sglangs_tuner_while_the_other_runs_ours(tmp_path):
    ours = stand_in(tmp_path, "ours")
    done = run(tmp_path, JOBS="bar01 bar", PRESET="qwen3-30b-a3b", TIERS_S="260", BAR_DEADLINE="110",
               BAR_SCRIPT=str(ours), BAR01_SCRIPT=str(tmp_path / "bar.sh"), BAR01_PRESET="mixtral-8x7b-tp2",
               BAR01_MODE="exhaustive", BAR01_DEADLINE="515", BAR01_COLD_SAMPLE="20")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ours.sh" in done.stdout and "bar.sh" in done.stdout  # each job's command line
    bar, bar01 = seen(tmp_path / "out" / "bar.tgz", "bar"), seen(tmp_path / "out" / "bar01.tgz", "bar01")
    assert (bar["DEADLINE"], bar["TIERS_S"], bar["COLD_SAMPLE"]) == ("110", "260", "<unset>")
    assert (bar01["DEADLINE"], bar01["PRESET"], bar01["MODE"], bar01["COLD_SAMPLE"]) == \
        ("515", "mixtral-8x7b-tp2", "exhaustive", "20")


def test_on_a_two_gpu_host_the_two_bars_take_a_gpu_each(tmp_path):
    done = run(tmp_path, JOBS="bar01 bar", BAR01_GPUS="0", BAR_GPUS="1", PRESET="qwen3-30b-a3b",
               BAR01_PRESET="deepseek-v2-lite")
    assert done.returncode == 0, done.stdout + done.stderr
    bar, bar01 = seen(tmp_path / "out" / "bar.tgz", "bar"), seen(tmp_path / "out" / "bar01.tgz", "bar01")
    assert (bar["CUDA_VISIBLE_DEVICES"], bar01["CUDA_VISIBLE_DEVICES"]) == ("1", "0")


def test_two_bars_sharing_a_gpu_are_refused(tmp_path):
    done = run(tmp_path, JOBS="bar01 bar", BAR01_GPUS="0,1", BAR_GPUS="1")
    assert done.returncode == 2 and "share GPU 1" in done.stdout
