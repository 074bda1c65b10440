"""A stand-in for SGLang's benchmark/kernels/fused_moe_triton/ (its script needs a GPU and is never part of this
project), with the interface of SGLang 0.5.17's that the tuner runner relies on: `benchmark_config(config,
num_tokens, ..., block_shape=None, num_iters=100)` whose inner run reads the module-global `args.model` (a synthetic
time here, fastest at BLOCK_SIZE_M 16 and, unquantized, BLOCK_SIZE_N 64; with use_fp8_w8a8, BLOCK_SIZE_N 128; a
BLOCK_SIZE_K over twice the hidden size raises RuntimeError as a config that does not compile), a Ray-decorated
worker whose `tune(num_tokens, ..., block_shape, search_space)` loops over `tqdm(search_space)` skipping configs
that raise RuntimeError and keeps the fastest, its `main` reading the shape through `common_utils.get_model_config`,
`--dtype` and `--batch-sizes`, dealing the batch sizes round-robin over its workers and writing the config file
named by shape and dtype; `common_utils.get_configs_compute_bound`. Where STANDIN_CALLS names a file, every
benchmark_config call appends a line there: its batch size, config, iterations, TRITON_CACHE_DIR, process id and
the name of the loop's log (ASTRA_RAY_LOG)."""
from __future__ import annotations

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
    if os.environ.get("STANDIN_CALLS"):
        with open(os.environ["STANDIN_CALLS"], "a") as fh:
            fh.write(json.dumps({{"tokens": num_tokens, "config": config, "pid": os.getpid(), "iters": num_iters,
                                 "cache": os.environ.get("TRITON_CACHE_DIR"),
                                 "log": os.path.basename(os.environ.get("ASTRA_RAY_LOG", ""))}}) + "\\n")
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


def standin_us(config: dict, hidden: int, fp8: bool = False) -> float | None:
    """The microseconds the stand-in's benchmark_config returns for `config` (None: it raises)."""
    if config["BLOCK_SIZE_K"] > 2 * hidden:
        return None
    return 10.0 + abs(config["BLOCK_SIZE_M"] - 16) + abs(config["BLOCK_SIZE_N"] - (128 if fp8 else 64)) / 8 + \
        config["BLOCK_SIZE_K"] / 1000
