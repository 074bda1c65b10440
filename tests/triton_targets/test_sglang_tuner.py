"""SGLang's own tuner as the bar, on CPU: the runner against a stand-in tuner folder (tests/sglang_tuner_standin.py:
SGLang's script needs a GPU and is never part of this project)."""
from __future__ import annotations

import statistics

import json
from pathlib import Path

import pytest
from sglang_tuner_standin import SCRIPT, standin_us, tuner_folder

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe import ray_local, sglang_tuner
from astra_sglang.triton.moe.sglang_tuner import TunerScript, subset
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch
from astra_sglang.triton.moe.sglang_tuner_run import run_bounded, run_full
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig

SHAPE = MoeShape(8, 96, 64, 2)
REAL = Path(__file__).resolve().parents[2] / ".bar" / "fused_moe_triton"
"""SGLang's own folder where it was put (git-ignored, never committed): checked when present."""
FP8 = MoeShape(8, 96, 64, 2, quant="fp8_w8a8")


def test_the_folder_is_checked_and_hashed(tmp_path):
    script = TunerScript.open(tuner_folder(tmp_path))
    assert set(script.hashes) == {"tuning_fused_moe_triton.py", "common_utils.py"} and script.batch_sizes_flag


@pytest.mark.parametrize("change, expect", [
    (("def benchmark_config(", "def bench("), "defines no benchmark_config"),
    (("import override_config", "import override_configs"),
     "imports override_configs from sglang.srt.layers.moe.fused_moe_triton"),
])
def test_a_tuner_of_another_release_is_refused(tmp_path, change, expect):
    folder = tuner_folder(tmp_path, script=SCRIPT.replace(*change))
    with pytest.raises(AstraError, match=expect):
        TunerScript.open(folder)


def test_a_folder_without_common_utils_is_refused(tmp_path):
    folder = tuner_folder(tmp_path)
    (folder / "common_utils.py").unlink()
    with pytest.raises(AstraError, match="not SGLang's benchmark/kernels/fused_moe_triton folder: no common_utils.py"):
        TunerScript.open(folder)


def test_the_subset_puts_ranked_configs_of_sglangs_space_first(tmp_path):
    space = [{"BLOCK_SIZE_M": m} for m in range(20)]
    ranked = [{"BLOCK_SIZE_M": 3}, {"BLOCK_SIZE_M": 99}, {"BLOCK_SIZE_M": 3}, {"BLOCK_SIZE_M": 7}]
    configs, first = subset(space, ranked, 5, seed=1)
    assert first == 2 and configs[:2] == [{"BLOCK_SIZE_M": 3}, {"BLOCK_SIZE_M": 7}] and len(configs) == 7
    assert configs == subset(space, ranked, 5, seed=1)[0] and len({c["BLOCK_SIZE_M"] for c in configs}) == 7


def test_bounded_runs_sglangs_loop_over_the_subset_on_every_gpu(tmp_path):
    script = TunerScript.open(tuner_folder(tmp_path, sleep=0.01))
    ranked = {16: [{"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
                    "num_stages": 3}]}
    run = run_bounded(script, SHAPE, [1, 16, 64], ["0", "1"], tmp_path / "work", ranked, sample=6, seed=0,
                      seconds=120)
    assert [b.tokens for b in run.batches] == [1, 16, 64] and run.mode == "bounded"
    one, sixteen = run.batches[0], run.batches[1]
    assert (one.space, one.given, one.ranked, len(one.costs)) == (18, 6, 0, 6)
    assert (sixteen.given, sixteen.ranked) == (7, 1) and sixteen.best == ranked[16][0]  # the optimum, ranked first
    assert all(c >= 0.01 for c in one.costs) and one.seconds >= sum(one.costs) * 0.9
    for batch in (one, sixteen):  # every config its loop started, timed as the stand-in times it
        assert len(batch.landscape) == len(batch.costs) and not batch.failed and not batch.skipped
        assert batch.landscape == pytest.approx({c: standin_us(MoeConfig.from_code(c).sglang(), SHAPE.hidden)
                                                 for c in batch.landscape})
    assert sixteen.landscape[MoeConfig.from_sglang(ranked[16][0]).code()] == pytest.approx(10.064)
    seconds, half = one.estimate()
    assert seconds == pytest.approx(one.costs[0] + sum(one.costs[1:]) / 5 * 17, rel=1e-6) and half >= 0


def test_a_deadline_stops_sglangs_loop_inside(tmp_path):
    script = TunerScript.open(tuner_folder(tmp_path, sleep=0.5))
    run = run_bounded(script, SHAPE, [1], ["0"], tmp_path / "work", {}, sample=16, seed=0, seconds=6.0)
    (batch,) = run.batches
    assert batch.given == 16 and 0 < len(batch.costs) < 16 and batch.best is not None  # the best of those it got to


def test_full_runs_the_script_as_its_users_do(tmp_path):
    script = TunerScript.open(tuner_folder(tmp_path))
    run = run_full(script, SHAPE, [1, 16, 64], ["0", "1"], tmp_path / "work")
    assert [b.tokens for b in run.batches] == [1, 16, 64] and all(len(b.costs) == 18 for b in run.batches)
    assert all(b.best["BLOCK_SIZE_M"] == 16 and b.best["BLOCK_SIZE_N"] == 64 for b in run.batches)
    assert run.batches[0].estimate() == (run.batches[0].seconds, 0.0)
    assert json.loads((tmp_path / "work" / "moe-8x96x64x2" / "config.json").read_text())["num_local_experts"] == 8


def test_a_failing_tuner_names_its_last_line(tmp_path):
    broken = SCRIPT.replace("        best_config = None\n", "        raise ValueError(\"CUDA out of memory\")\n")
    script = TunerScript.open(tuner_folder(tmp_path, script=broken))
    with pytest.raises(AstraError, match="SGLang's tuner loop failed on GPU 0 .*CUDA out of memory"):
        run_bounded(script, SHAPE, [1], ["0"], tmp_path / "work", {}, sample=2, seed=0, seconds=60)


def test_fp8_reaches_the_script_and_the_compared_configs_are_timed_its_way(tmp_path):
    script = TunerScript.open(tuner_folder(tmp_path))
    pick = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 3}
    ours = dict(pick, BLOCK_SIZE_M=16, BLOCK_SIZE_N=128)
    run = run_bounded(script, FP8, [1, 16], ["0", "1"], tmp_path / "work", {16: [ours]}, sample=17, seed=0,
                      seconds=120, compare={1: {"pick": pick}, 16: {"pick": pick, "ours": ours}})
    one, sixteen = run.batches
    assert one.best["BLOCK_SIZE_N"] == 128 and sixteen.best == ours  # the fp8 optimum: use_fp8_w8a8 reached it
    assert set(one.timed) == {"pick", "tuner"} and set(sixteen.timed) == {"pick", "ours", "tuner"}
    assert one.timed["pick"] == pytest.approx(10.0 + 48 + 96 / 8 + 0.064)  # the script's benchmark_config's figure
    assert sixteen.timed["ours"] == sixteen.timed["tuner"] == pytest.approx(10.064) and not sixteen.timed_reason
    full = run_full(script, FP8, [1, 16], ["0"], tmp_path / "full")
    assert [b.best["BLOCK_SIZE_N"] for b in full.batches] == [128, 128]
    assert list((tmp_path / "full" / "full-gpu0").glob("E=8,N=96,device_name=CPU,dtype=fp8_w8a8.json"))


def test_a_compared_config_that_fails_is_named(tmp_path):
    script = TunerScript.open(tuner_folder(tmp_path))
    huge = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 3}
    run = run_bounded(script, SHAPE, [4], ["0"], tmp_path / "work", {}, sample=4, seed=0, seconds=60,
                      compare={4: {"ours": huge}})
    (batch,) = run.batches
    assert "tuner" in batch.timed and "ours" not in batch.timed
    assert batch.timed_reason == "ours: RuntimeError: out of resources"
    # timed after the loop, past the wrapper: the landscape is the loop's alone
    assert "m16n64k256g1w4s3" not in batch.failed and len(batch.landscape) + len(batch.failed) == len(batch.costs)


def test_a_failing_configs_reason_is_one_line_its_first_and_last():
    """A compared config's failure and a skipped one's reason as the screening worker words a failure
    (errors.describe): Triton's compile errors point at the source first and say why last."""
    import types

    from astra_sglang.triton.moe.sglang_tuner_child import Observed, time_configs

    def bench(config, num_tokens):
        if config["BLOCK_SIZE_M"] > 16:
            raise RuntimeError("at 3:8:\n    acc = tl.dot(a, b)\n\nout of resource: shared memory")
        return float(num_tokens)

    ok, big = MoeConfig(16, 32, 64, 1, 4, 3), MoeConfig(64, 32, 64, 1, 4, 3)
    configs = {"ok": ok.sglang(), "big": big.sglang()}
    timed, reason = time_configs(bench, {"num_tokens": 3}, configs, rounds=2)
    assert timed == {"ok": 3.0} and reason == "big: RuntimeError: at 3:8: ... out of resource: shared memory"
    script = types.SimpleNamespace(benchmark_config=bench)
    observed = Observed(script)
    with pytest.raises(RuntimeError):
        script.benchmark_config(configs["big"], 3)
    assert observed.take() == ({}, {big.code(): "RuntimeError: at 3:8: ... out of resource: shared memory"})


@pytest.mark.parametrize("where, change", [
    ("tune", ("block_shape, search_space):", "block_shape, search_space, num_layers):")),
    ("benchmark_config", ("block_shape=None, num_iters=100):", "block_shape=None, num_iters=100, *, moe_runner):")),
])
def test_a_parameter_the_runner_does_not_pass_is_refused_before_any_run(tmp_path, where, change):
    folder = tuner_folder(tmp_path, script=SCRIPT.replace(*change))
    with pytest.raises(AstraError, match=f"{where}\\(\\) takes (num_layers|moe_runner), which this runner does not pass"):
        TunerScript.open(folder)


@pytest.mark.parametrize("dtype, quant", [("bfloat16", ""), ("float16", "fp8_w8a8")])
def test_the_parameters_checked_are_those_a_child_passes(dtype, quant):
    import torch

    from astra_sglang.triton.moe.sglang_tuner_child import ChildRequest, values_of

    request = ChildRequest(folder="f", model="m", shape=(5, 40, 72, 3), dtype=dtype, quant=quant, tokens=[7],
                           deadline=0.0, out="o.jsonl")
    values = values_of(request, 7, [{"BLOCK_SIZE_M": 16}])
    assert sglang_tuner.KNOWN_PARAMS == ("config", *values)
    assert (values["num_tokens"], values["num_experts"], values["shard_intermediate_size"], values["hidden_size"],
            values["topk"], values["dtype"]) == (7, 5, 80, 72, 3, getattr(torch, dtype))
    assert values["use_fp8_w8a8"] == bool(quant) and not any(values[k] for k in ("use_int8_w8a8", "use_int8_w8a16",
                                                                                 "use_int4_w4a16", "per_channel_quant"))
    assert values["block_shape"] is None and values["search_space"] == [{"BLOCK_SIZE_M": 16}]


@pytest.mark.skipif(not (REAL / "tuning_fused_moe_triton.py").is_file(), reason="SGLang's tuner folder not put in .bar")
def test_sglangs_own_tuner_folder_opens_against_the_installed_sglang():
    script = TunerScript.open(REAL)
    assert set(script.hashes) == {"tuning_fused_moe_triton.py", "common_utils.py"} and script.batch_sizes_flag


def test_the_estimate_leaves_ranked_configs_out():
    batch = TunerBatch(tokens=1, mode="bounded", space=1920, given=5, ranked=2, costs=[9.0, 9.0, 1.0, 2.0, 3.0])
    seconds, half = batch.estimate()
    assert seconds == pytest.approx(2.0 * 1920) and half == pytest.approx(4.3027 * 1.0 / 3 ** 0.5 * 1920, rel=1e-4)
    assert TunerBatch(tokens=1, mode="bounded", space=10, costs=[1.0]).estimate() is None


@pytest.mark.parametrize("mode, field", [("exhaustive", "cold_costs"), ("bounded", "costs")])
def test_the_first_configs_one_time_cost_is_counted_once(mode, field):
    """The H200 bar's cold sample at batch 1 (2026-11-27): 5.5 s for a process's first config, then 0.7 and 0.8 s.
    Its users pay the 5.5 s once, not 1,920 times: 5.5 + 0.75 x 1,919 s, not 2.33 x 1,920."""
    batch = TunerBatch(tokens=1, mode=mode, space=1920, **{field: [5.5, 0.7, 0.8]})
    seconds, half = batch.estimate()
    assert seconds == pytest.approx(5.5 + 0.75 * 1919)
    assert half == pytest.approx(12.706 * statistics.stdev([0.7, 0.8]) / 2 ** 0.5 * 1919, rel=1e-4)  # t, 1 df
    assert TunerBatch(tokens=1, mode=mode, space=1920, **{field: [5.5, 0.7]}).estimate() is None  # one drawn alike


def test_local_ray_serves_the_calls_in_process(tmp_path, monkeypatch):
    @ray_local.remote(num_gpus=1)
    class Worker:
        def __init__(self, base):
            self.base = base

        def add(self, x):
            return self.base + x

    handle = Worker.remote(10)
    assert ray_local.get([handle.add.remote(1), handle.add.remote(2)]) == [11, 12]
    assert ray_local.get(ray_local.remote(lambda: 5).remote()) == 5 and Worker.cls.__name__ == "Worker"
    log = tmp_path / "ray.log"
    monkeypatch.setenv("ASTRA_RAY_LOG", str(log))
    assert list(ray_local.tqdm(iter("abc"))) == ["a", "b", "c"]
    monkeypatch.setenv("ASTRA_RAY_DEADLINE", "0")
    assert list(ray_local.tqdm("abc")) == []
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x.get("i") for x in lines] == [0, 1, 2, None, None] and "end" in lines[-1]


def test_the_model_folder_names_the_shape(tmp_path):
    folder = sglang_tuner.model_dir(MoeShape(128, 768, 2048, 8), tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_local_experts"], config["intermediate_size"], config["hidden_size"],
            config["num_experts_per_tok"]) == (128, 768, 2048, 8)


def test_the_folders_own_modules_are_recorded_and_missing_ones_named(tmp_path):
    folder = tuner_folder(tmp_path, script=SCRIPT.replace("import ray\n", "import ray\nimport search_space\n"))
    with pytest.raises(AstraError, match="imports search_space, which is neither in .* nor installed here"):
        TunerScript.open(folder)
    (folder / "search_space.py").write_text("SPACE = []\n")
    assert "search_space.py" in TunerScript.open(folder).hashes
