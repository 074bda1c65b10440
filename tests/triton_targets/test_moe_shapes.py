"""Where fused MoE's shapes come from: a model's config.json, a batch-size list, a profile's traces; and the
tune command's own errors (tuning itself needs a GPU)."""
from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.errors import AstraError
from astra_sglang.profile.buckets import profile_buckets
from astra_sglang.triton.moe.shapes import MoeShape, from_config, parse_buckets

QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "moe_intermediate_size": 768,
             "intermediate_size": 6144, "num_experts": 128, "num_experts_per_tok": 8, "torch_dtype": "bfloat16"}
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
           "num_local_experts": 8, "num_experts_per_tok": 2, "torch_dtype": "float16"}


def _config(tmp_path, cfg, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def test_expert_shapes_of_real_architectures(tmp_path):
    assert from_config(_config(tmp_path, QWEN3_MOE)) == MoeShape(128, 768, 2048, 8, "bfloat16")
    assert from_config(tmp_path) == MoeShape(128, 768, 2048, 8, "bfloat16")  # the folder
    assert from_config(_config(tmp_path, MIXTRAL, "m.json"), tp=2) == MoeShape(8, 7168, 4096, 2, "float16")
    deepseek = {"hidden_size": 7168, "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8}
    assert from_config(_config(tmp_path, deepseek, "d.json")).experts == 256


def test_dense_models_and_bad_tp_are_clear_errors(tmp_path):
    dense = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336}
    with pytest.raises(AstraError, match="not a MoE model config"):
        from_config(_config(tmp_path, dense))
    with pytest.raises(AstraError, match="not divisible by tensor-parallel size 5"):
        from_config(_config(tmp_path, QWEN3_MOE, "q.json"), tp=5)
    with pytest.raises(AstraError, match="bad batch sizes"):
        parse_buckets("1,x")
    assert parse_buckets("64, 1,64") == [64, 1]


def _trace(path, steps):
    """A chrome trace as SGLang's profiler writes it: step spans, launch calls, kernels."""
    events, ts = [], 0.0
    for i, (mode, tokens, kernels) in enumerate(steps):
        toks = f" toks={tokens}" if mode == "EXTEND" else ""
        events.append({"ph": "X", "cat": "user_annotation", "name": f"step[{mode} bs={tokens if mode == 'DECODE' else 2}"
                       f"{toks}]", "ts": ts, "dur": 100.0})
        for j, name in enumerate(kernels):
            corr = i * 100 + j
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts + 1 + j,
                           "dur": 0.5, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts + 2 + j, "dur": 3.0,
                           "args": {"correlation": corr}})
        ts += 200.0
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return path


def test_profile_buckets_count_the_kernels_launches(tmp_path):
    traces = tmp_path / "traces" / "decode"
    traces.mkdir(parents=True)
    moe = ["fused_moe_kernel", "nvjet_gemm", "fused_moe_kernel"]
    trace = _trace(traces / "t.trace.json.gz", [("DECODE", 60, moe), ("DECODE", 63, moe), ("EXTEND", 4779, moe),
                                                ("DECODE", 3, ["nvjet_gemm"])])
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"date": "2026-11-25", "phases": [], "traces": [str(trace)]}))
    assert profile_buckets(profile) == [(64, 4), (4096, 2)]
    moved = tmp_path / "elsewhere.json"  # a profile folder copied elsewhere: its traces/ beside the JSON
    moved.write_text(json.dumps({"date": "2026-11-25", "phases": [], "traces": ["/gone/decode/t.trace.json.gz"]}))
    assert profile_buckets(moved) == [(64, 4), (4096, 2)]


def test_profile_without_the_kernel(tmp_path):
    trace = _trace(tmp_path / "t.trace.json.gz", [("DECODE", 8, ["nvjet_gemm"])])
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"date": "2026-11-25", "phases": [], "traces": [str(trace)]}))
    with pytest.raises(AstraError, match="no fused_moe_kernel launch"):
        profile_buckets(profile)


@pytest.mark.parametrize("args, message", [
    (["tune", "silu_and_mul", "--shape", "8x64x64x2"], "astra-sglang optimize"),
    (["tune", "fused_moe"], "give the expert shape one way"),
    (["tune", "fused_moe", "--shape", "8x64"], "bad --shape"),
    (["tune", "fused_moe", "--shape", "8x64x64x2", "--rounds", "0"], "at least 1"),
])
def test_tune_command_errors(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and message in result.output


def test_tune_needs_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the run would tune")
    result = CliRunner().invoke(main, ["tune", "fused_moe", "--model", str(_config(tmp_path, QWEN3_MOE)),
                                       "--buckets", "1,64", "--out", str(tmp_path / "run")])
    assert result.exit_code == 1 and "tuning needs a CUDA GPU" in result.output


@pytest.mark.parametrize("dtype, quant, element, weight, rate, script, precision", [
    ("bfloat16", "", 2, 2, 1.0, "auto", "bfloat16"),
    ("float16", "", 2, 2, 1.0, "auto", "float16"),
    ("bfloat16", "fp8_w8a8", 2, 1, 2.0, "fp8_w8a8", "fp8_w8a8"),
    ("float16", "fp8_w8a8", 2, 1, 2.0, "fp8_w8a8", "fp8_w8a8"),
])
def test_a_shape_says_what_its_quantization_changes(dtype, quant, element, weight, rate, script, precision):
    shape = MoeShape(5, 40, 72, 3, dtype, quant)
    assert (shape.element_bytes, shape.weight_bytes, shape.gemm_rate) == (element, weight, rate)
    assert (shape.script_dtype, shape.precision, shape.config_dtype) == (script, precision, quant or None)
    assert shape.quantized == bool(quant) and shape.describe().endswith(precision)
    flags = shape.quant_flags()
    assert list(flags) == ["use_fp8_w8a8", "use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16"]
    assert flags == {"use_fp8_w8a8": quant == "fp8_w8a8", "use_int8_w8a8": False, "use_int8_w8a16": False,
                     "use_int4_w4a16": False}
