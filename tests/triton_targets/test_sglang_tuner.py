"""SGLang's own tuner as the bar, on CPU: the runner against a stand-in tuner folder written here (SGLang's script
needs a GPU and is never part of this project). The stand-in has the interface of SGLang 0.5.17's
benchmark/kernels/fused_moe_triton/ that the runner relies on: `benchmark_config(config, num_tokens, ...,
block_shape=None, num_iters=100)` whose inner run reads the module-global `args.model` (a synthetic time here,
fastest at BLOCK_SIZE_M 16 and, unquantized, BLOCK_SIZE_N 64; with use_fp8_w8a8, BLOCK_SIZE_N 128), a Ray-decorated
worker whose `tune(num_tokens, ..., block_shape, search_space)` loops over `tqdm(search_space)` skipping configs
that raise RuntimeError and keeps the fastest, its `main` reading the shape through `common_utils.get_model_config`,
`--dtype` and `--batch-sizes`, dealing the batch sizes round-robin over its workers and writing the config file
named by shape and dtype; `common_utils.get_configs_compute_bound`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe import ray_local, sglang_tuner
from astra_sglang.triton.moe.sglang_tuner import TunerScript, subset
from astra_sglang.triton.moe.sglang_tuner_records import TunerBatch
from astra_sglang.triton.moe.sglang_tuner_run import run_bounded, run_full
from astra_sglang.triton.moe.shapes import MoeShape

SHAPE = MoeShape(8, 96, 64, 2)
REAL = Path(__file__).resolve().parents[2] / ".bar" / "fused_moe_triton"
"""SGLang's own folder where it was put (git-ignored, never committed): checked when present."""
FP8 = MoeShape(8, 96, 64, 2, quant="fp8_w8a8")
COMMON = '''
import json
import os


def get_model_config(model_name, tp_size, ep_size=1, disable_shared_experts_fusion=False, topk_ids_dir=None):
    with open(os.path.join(model_name, "config.json")) as fh:
        config = json.load(fh)
    return {"num_experts": config["num_local_experts"] // ep_size, "topk": config["num_experts_per_tok"],
            "hidden_size": config["hidden_size"], "shard_intermediate_size": 2 * config["intermediate_size"] // tp_size,
            "dtype": config["torch_dtype"], "block_shape": None}


def get_configs_compute_bound():
    return [{"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 1, "num_warps": 4,
             "num_stages": 3} for m in (16, 32, 64) for n in (32, 64, 128) for k in (64, 128)]


def get_default_batch_sizes():
    return [1, 2, 4]
'''
SCRIPT = '''
import argparse
import json
import os
import time

import ray
from common_utils import get_configs_compute_bound, get_default_batch_sizes, get_model_config
from ray.experimental.tqdm_ray import tqdm


class ServerArgs:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


def benchmark_config(config, num_tokens, num_experts, shard_intermediate_size, hidden_size, topk, dtype,
                     use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, per_channel_quant,
                     block_shape=None, num_iters=100):
    """Synthetic; {SLEEP} s per config. Its run reads the module-global `args`, as SGLang's does."""
    assert os.path.isfile(os.path.join(args.model, "config.json"))
    if config["BLOCK_SIZE_K"] > 2 * hidden_size:
        raise RuntimeError("out of resources")  # SGLang's loop skips such a config
    time.sleep({SLEEP})
    best_n = 128 if use_fp8_w8a8 else 64
    return 10.0 + abs(config["BLOCK_SIZE_M"] - 16) + abs(config["BLOCK_SIZE_N"] - best_n) / 8 + \\
        config["BLOCK_SIZE_K"] / 1000


@ray.remote(num_gpus=1)
class BenchmarkWorker:
    def __init__(self, seed, server_args):
        self.device_id = int(ray.get_gpu_ids()[0])

    def tune(self, num_tokens, num_experts, shard_intermediate_size, hidden_size, topk, dtype, use_fp8_w8a8,
             use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, per_channel_quant, block_shape, search_space):
        best_config = None
        best_time = float("inf")
        for config in tqdm(search_space):
            try:
                kernel_time = benchmark_config(config, num_tokens, num_experts, shard_intermediate_size, hidden_size,
                                               topk, dtype, use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16,
                                               use_int4_w4a16, per_channel_quant, block_shape, num_iters=10)
            except RuntimeError:
                continue
            if kernel_time < best_time:
                best_time, best_config = kernel_time, config
        assert best_config is not None
        return best_config


def override():
    """Never called here: SGLang's real script imports this at the top (the runner's static check reads it)."""
    from sglang.srt.layers.moe.fused_moe_triton import override_config

    return override_config


def main(args):
    shape = get_model_config(args.model, args.tp_size, args.ep_size, args.disable_shared_experts_fusion)
    batch_sizes = args.batch_sizes or ([args.batch_size] if args.batch_size else get_default_batch_sizes())
    ray.init()
    workers = [BenchmarkWorker.remote(args.seed, ServerArgs()) for _ in range(int(ray.available_resources()["GPU"]))]
    fp8 = args.dtype == "fp8_w8a8"
    configs = ray.get([workers[i % len(workers)].tune.remote(
        b, shape["num_experts"], shape["shard_intermediate_size"], shape["hidden_size"], shape["topk"], shape["dtype"],
        fp8, False, False, False, args.per_channel_quant, shape["block_shape"], get_configs_compute_bound())
        for i, b in enumerate(batch_sizes)])
    name = "E={{}},N={{}},device_name=CPU{{}}.json".format(shape["num_experts"], shape["shard_intermediate_size"] // 2,
                                                     ",dtype=fp8_w8a8" if fp8 else "")
    with open(name, "w") as fh:
        json.dump({{str(b): c for b, c in zip(batch_sizes, configs)}}, fh)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--tp-size", "--tp", type=int, default=2)
    parser.add_argument("--ep-size", "--ep", type=int, default=1)
    parser.add_argument("--dtype", choices=["auto", "fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16"], default="auto")
    parser.add_argument("--per-channel-quant", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, required=False)
    parser.add_argument("--batch-sizes", type=int, nargs="+")
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--search-space-file", type=str)
    parser.add_argument("--disable-shared-experts-fusion", action="store_true")
    args = parser.parse_args()
    main(args)
'''


def tuner_folder(root, sleep=0.0, script=SCRIPT):
    folder = root / "fused_moe_triton"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "common_utils.py").write_text(COMMON)
    (folder / "tuning_fused_moe_triton.py").write_text(script.replace("{SLEEP}", repr(sleep)).replace("{{", "{")
                                                       .replace("}}", "}"))
    return folder


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
    seconds, half = one.estimate()
    assert seconds == pytest.approx(sum(one.costs) / 6 * 18, rel=1e-6) and half >= 0


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


@pytest.mark.parametrize("where, change", [
    ("tune", ("block_shape, search_space):", "block_shape, search_space, num_layers):")),
    ("benchmark_config", ("block_shape=None, num_iters=100):", "block_shape=None, num_iters=100, *, moe_runner):")),
])
def test_a_parameter_the_runner_does_not_pass_is_refused_before_any_run(tmp_path, where, change):
    folder = tuner_folder(tmp_path, script=SCRIPT.replace(*change))
    with pytest.raises(AstraError, match=f"{where}\\(\\) takes (num_layers|moe_runner), which this runner does not pass"):
        TunerScript.open(folder)


@pytest.mark.skipif(not (REAL / "tuning_fused_moe_triton.py").is_file(), reason="SGLang's tuner folder not put in .bar")
def test_sglangs_own_tuner_folder_opens_against_the_installed_sglang():
    script = TunerScript.open(REAL)
    assert set(script.hashes) == {"tuning_fused_moe_triton.py", "common_utils.py"} and script.batch_sizes_flag


def test_the_estimate_leaves_ranked_configs_out():
    batch = TunerBatch(tokens=1, mode="bounded", space=1920, given=5, ranked=2, costs=[9.0, 9.0, 1.0, 2.0, 3.0])
    seconds, half = batch.estimate()
    assert seconds == pytest.approx(2.0 * 1920) and half == pytest.approx(1.96 * 1.0 / 3 ** 0.5 * 1920)
    assert TunerBatch(tokens=1, mode="bounded", space=10, costs=[1.0]).estimate() is None


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
