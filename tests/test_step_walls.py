"""benchmarks/step_walls.py on CPU: per-step host wall split into launch calls and the time between them, module
loads counted, on the committed H100 trace fixture and on a hand-made trace with one slow step; and
benchmarks/make_weights.py's tensor names for a Llama config."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import make_weights  # noqa: E402
import step_walls  # noqa: E402


def test_committed_decode_trace():
    times = step_walls.step_times(ROOT / "tests" / "fixtures" / "profile" / "decode.trace.json.gz")
    decode = [t for t in times if t.phase == "decode"]
    assert len(decode) == 4 and all(t.tokens == 64 and t.module_loads == 0 for t in decode)
    assert all(0 < t.launch_us < t.wall_us for t in decode)
    assert decode[0].wall_us == pytest.approx(1106.05)


def _trace(tmp_path: Path) -> Path:
    events = []
    for k, (wall, load) in enumerate([(4000.0, False), (4100.0, False), (60000.0, True)]):
        ts = k * 100000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": "step[EXTEND bs=4 toks=3584]", "ts": ts,
                       "dur": wall})
        for n in range(10):
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts + 10 + n * 50,
                           "dur": 20.0, "args": {"correlation": k * 100 + n}})
        if load:
            events.append({"ph": "X", "cat": "cuda_driver", "name": "cuModuleLoadData", "ts": ts + 900, "dur": 800.0,
                           "args": {"correlation": k * 100 + 99}})
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return path


def test_one_slow_step_with_a_module_load_shows_in_the_mean_not_the_median(tmp_path):
    times = step_walls.step_times(_trace(tmp_path))
    assert [t.module_loads for t in times] == [0, 0, 1]
    assert [t.launches for t in times] == [10, 10, 10] and times[0].launch_us == pytest.approx(200.0)
    lines = step_walls.summary("patched", times)
    assert lines[0].startswith("patched prefill: 3 steps, wall mean 22.70 ms, median 4.10 ms, longest 60.00 ms")
    assert "module loads in steps 1" in lines[0]
    assert lines[1].split()[:5] == ["3584", "tokens", "wall", "60.00", "ms"]  # the longest step first


def test_make_weights_names_every_llama_tensor():
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "vocab_size": 100,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2}
    shapes = make_weights.tensor_shapes(config)
    assert shapes["model.layers.1.self_attn.k_proj.weight"] == (32, 64)  # 2 kv heads x head dim 16
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (64, 128) and shapes["lm_head.weight"] == (100, 64)
    assert len(shapes) == 3 + 2 * 9
    assert "lm_head.weight" not in make_weights.tensor_shapes({**config, "tie_word_embeddings": True})


def test_make_weights_writes_a_checkpoint(tmp_path):
    pytest.importorskip("safetensors")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "vocab_size": 50,
        "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1}))
    path = make_weights.make(model, tmp_path / "out")
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    assert tensors["model.norm.weight"].dtype.is_floating_point and (tmp_path / "out" / "config.json").is_file()
    assert 0.01 < float(tensors["model.embed_tokens.weight"].float().std()) < 0.03
