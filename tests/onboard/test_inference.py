"""What `onboard` infers for ops the project does not ship, from their signatures (imported, or read from
source where the module does not import on CPU) and recorded calls: weights and biases, returned tensors as
outputs, several outputs, index tensors and int scalars, in-place arguments, fixed dtypes, dims across calls;
and the table it prints, one row per argument."""
from __future__ import annotations

import tomllib

import pytest
from click.testing import CliRunner
from onboard_support import calls_file

from astra_sglang.cli import main

F32, I32, E4M3 = "float32", "int32", "float8_e4m3fn"
CASES = {
    # entry, calls, extra args -> spec name, dims, {argument: (role, shape, dtype)}, reference
    "layernorm": ("flashinfer.norm:layernorm", "layernorm", [], "layernorm", ["tokens", "d"], {
        "input": ("in", ["tokens", "d"], "T"), "gemma": ("in", ["d"], F32), "beta": ("in", ["d"], F32),
        "out": ("out", ["tokens", "d"], "T")}, "oracle"),
    "rmsnorm": ("flashinfer.norm:rmsnorm", "rmsnorm", ["--name", "fi_rmsnorm"], "fi_rmsnorm", ["tokens", "d"], {
        "input": ("in", ["tokens", "d"], "T"), "weight": ("in", ["d"], "T"), "out": ("out", ["tokens", "d"], "T")},
        "astra_sglang.references.small_ops:rmsnorm"),
    "gelu_and_mul": ("flashinfer.activation:gelu_and_mul", "gelu_and_mul", [], "flashinfer_gelu_and_mul",
                     ["tokens", "d"], {"input": ("in", ["tokens", "2*d"], "T"), "out": ("out", ["tokens", "d"], "T")},
                     "astra_sglang.references.small_ops:gelu_and_mul"),
    "top_k": ("flashinfer.sampling:top_k_renorm_probs", "top_k_renorm_probs", [], "top_k_renorm_probs",
              ["tokens", "vocab"], {"probs": ("in", ["tokens", "vocab"], "T"), "top_k": ("in", ["tokens"], I32),
                                    "out": ("out", ["tokens", "vocab"], "T")}, "oracle"),
    "quant": ("sgl_kernel:sgl_per_token_quant_fp8", "sgl_per_token_quant_fp8", [], "sgl_per_token_quant_fp8",
              ["tokens", "d"], {"input": ("in", ["tokens", "d"], "T"), "output_q": ("out", ["tokens", "d"], E4M3),
                                "output_s": ("out", ["tokens", 1], F32)}, "oracle"),
    "rope": ("flashinfer.rope:apply_rope_pos_ids_inplace", "apply_rope_pos_ids_inplace", ["--model", "llama-3-8b"],
             "apply_rope_pos_ids_inplace", ["tokens", "kv_heads", "heads", "head_dim"], {
                 "q": ("inplace", ["tokens", "heads", "head_dim"], "T"),
                 "k": ("inplace", ["tokens", "kv_heads", "head_dim"], "T"), "pos_ids": ("in", ["tokens"], I32)},
             "oracle"),
    "topk_sigmoid": ("sgl_kernel:topk_sigmoid", "topk_sigmoid", [], "topk_sigmoid", ["tokens", "topk", "experts"], {
        "topk_weights": ("out", ["tokens", "topk"], F32), "topk_ids": ("out", ["tokens", "topk"], I32),
        "gating_output": ("in", ["tokens", "experts"], "T")}, "oracle"),
}


def onboard(*args):
    return CliRunner().invoke(main, ["onboard", *args])


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_op_becomes_a_spec_that_names_every_argument(standins, home, case):
    entry, calls, extra, name, dims, tensors, reference = CASES[case]
    out = onboard(entry, "--shapes", calls_file(calls), *extra)
    assert out.exit_code == 0, out.output
    spec = tomllib.loads((home / "specs" / f"{name}.toml").read_text())
    args = {a["name"]: a for a in spec["arguments"]}
    assert spec["dims"] == dims
    for arg, (role, shape, dtype) in tensors.items():
        assert (args[arg]["role"], args[arg]["shape"], args[arg].get("dtype", "T")) == (role, shape, dtype), arg
    assert all(a.get("shape") != [] for a in spec["arguments"] if a.get("kind") != "scalar")
    assert "enable_pdl" not in args  # a launch hint: the patched op ignores it
    if reference == "oracle":
        assert spec["reference_dtype"] == "op" and spec["reference"] == f"astra_user_{name}:op"
        assert "the op itself on the GPU" in out.output
    else:
        assert spec["reference_dtype"] == "float64" and spec["reference"] == reference
        assert spec["onboard"]["proposed"] == reference and "ok: reference runs" in out.output
    assert spec["onboard"]["gpu_check"] == "" and "to be checked at the first GPU run" in out.output
    recorded = spec["dtypes"][0]
    assert recorded == ("float32" if case in ("top_k",) else "bfloat16")
    if standins == "static":  # read from source: the module's import failure is named, the recorded dtypes kept
        assert "(statically): RuntimeError" in out.output and len(spec["dtypes"]) == 1
    else:  # the op runs on CPU here: every float dtype it runs in is checked too
        assert "the op runs at" in out.output
    table = out.output.split("wrote ")[0]
    assert all(f"│ {a} " in table for a in args), table  # one row per argument


def test_weights_biases_indices_and_scalars_get_their_inits(standins, home):
    assert onboard("flashinfer.norm:layernorm", "--shapes", calls_file("layernorm")).exit_code == 0
    args = {a["name"]: a for a in tomllib.loads((home / "specs" / "layernorm.toml").read_text())["arguments"]}
    assert args["gemma"]["init"] == {"mean": 1.0, "std": 0.2} and args["beta"]["init"] == {"mean": 0.0, "std": 0.2}
    assert args["eps"] == {"name": "eps", "kind": "scalar", "scalar_type": "float", "default": 1e-5, "optional": True}
    out = onboard("flashinfer.rope:apply_rope_pos_ids_inplace", "--shapes", calls_file("apply_rope_pos_ids_inplace"))
    assert out.exit_code == 0, out.output
    spec = tomllib.loads((home / "specs" / "apply_rope_pos_ids_inplace.toml").read_text())
    args = {a["name"]: a for a in spec["arguments"]}
    assert args["pos_ids"]["init"] == {"kind": "randint", "low": 0, "high": 4096}  # the recorded range
    assert (args["interleave"]["scalar_type"], args["interleave"]["default"]) == ("bool", False)
    assert (args["rope_theta"]["scalar_type"], args["rope_theta"]["default"]) == ("float", 500000.0)
    assert "rotary_dim" not in args  # None by default and not recorded: left at its default
    out = onboard("flashinfer.sampling:top_k_renorm_probs", "--shapes", calls_file("top_k_renorm_probs"))
    args = {a["name"]: a for a in tomllib.loads((home / "specs" / "top_k_renorm_probs.toml").read_text())["arguments"]}
    assert args["top_k"]["init"] == {"kind": "randint", "low": 1, "high": 65}
    assert args["probs"]["init"]["function"] == "astra_sglang.onboard.inits:probabilities"


@pytest.mark.parametrize("top_k", [50, 1])
def test_an_int_given_as_a_value_is_a_scalar_and_as_a_tensor_an_index(standins, home, tmp_path, top_k):
    calls = tmp_path / "scalar.json"
    calls.write_text('[{"tensors": {"probs": {"shape": [4, 1000], "dtype": "float32"}}, "scalars": {"top_k": %d}}]'
                     % top_k)
    out = onboard("flashinfer.sampling:top_k_renorm_probs", "--shapes", str(calls), "--name", "by_value")
    assert out.exit_code == 0, out.output
    args = {a["name"]: a for a in tomllib.loads((home / "specs" / "by_value.toml").read_text())["arguments"]}
    assert (args["top_k"]["kind"], args["top_k"]["scalar_type"], args["top_k"]["default"]) == ("scalar", "int", top_k)
    # the output it returns, shaped like probs where nothing recorded it
    assert args["out"]["shape"] == ["tokens", "vocab"] and "returned" in out.output


@pytest.mark.parametrize("tokens", [[1, 16], [4096, 8], [5]])
def test_token_and_hidden_dims_stay_apart_even_where_they_are_equal(standins, home, tmp_path, tokens):
    """A weight of the hidden size is per column, a token count that happens to equal it is still tokens."""
    calls = tmp_path / "c.json"
    rows = [f'{{"tensors": {{"input": {{"shape": [{t}, 4096], "dtype": "bfloat16"}}, "weight": {{"shape": [4096], '
            f'"dtype": "bfloat16"}}}}}}' for t in tokens]
    calls.write_text("[" + ",".join(rows) + "]")
    out = onboard("flashinfer.norm:rmsnorm", "--shapes", str(calls), "--name", "eq")
    assert out.exit_code == 0, out.output
    spec = tomllib.loads((home / "specs" / "eq.toml").read_text())
    args = {a["name"]: a for a in spec["arguments"]}
    assert args["input"]["shape"] == ["tokens", "d"] and args["weight"]["shape"] == ["d"]
    assert spec["shapes"]["quick"] == [[t, 4096] for t in tokens]


def test_model_fields_name_the_dims_and_a_double_width_is_an_expression(standins, home):
    out = onboard("flashinfer.activation:gelu_and_mul", "--shapes", calls_file("gelu_and_mul"), "--model", "llama-3-8b")
    assert out.exit_code == 0, out.output
    spec = tomllib.loads((home / "specs" / "flashinfer_gelu_and_mul.toml").read_text())
    assert spec["dims"] == ["tokens", "intermediate"]
    assert spec["shapes"]["model_dims"] == {"intermediate": "intermediate"}
    assert {a["name"]: a["shape"] for a in spec["arguments"]} == {"input": ["tokens", "2*intermediate"],
                                                                  "out": ["tokens", "intermediate"]}


def test_a_shipped_name_gets_the_package_prefix(standins, home):
    """flashinfer's rmsnorm is not the shipped rmsnorm spec: a user spec of that name would replace it."""
    out = onboard("flashinfer.norm:rmsnorm", "--shapes", calls_file("rmsnorm"))
    assert out.exit_code == 0, out.output
    assert (home / "specs" / "flashinfer_rmsnorm.toml").is_file() and not (home / "specs" / "rmsnorm.toml").exists()


@pytest.mark.parametrize("body, message", [
    ('[{"tensors": {"input": {"shape": [2, 8], "dtype": "bfloat16"}}}]', "no shape for 'weight'"),
    ('[{"tensors": {"input": {"shape": [2, 8], "dtype": "bfloat16"}, "weight": {"shape": [8], "dtype": "bfloat16"}}},'
     ' {"tensors": {"input": {"shape": [2, 8, 3], "dtype": "bfloat16"},'
     ' "weight": {"shape": [8], "dtype": "bfloat16"}}}]',
     "input has 2 dims in one recorded call and 3"),
    ('[{"tensors": {"input": {"shape": [2, 8], "dtype": "float64"}, "weight": {"shape": [8], "dtype": "float64"}}}]',
     "input is float64: not a dtype an op runs over"),
    ('[{"tensors": {"input": {"shape": [2, 8], "dtype": "bfloat16"}, "weight": {"shape": [8], "dtype": "bfloat16"}}},'
     ' {"tensors": {"input": {"shape": [4, 8], "dtype": "float16"}, "weight": {"shape": [8], "dtype": "float32"}}}]',
     "weight is recorded in ['bfloat16', 'float32'], following no dtype of input"),
    ('[{"tensors": {"input": {"shape": [2, 8], "dtype": "complex64"}, "weight": {"shape": [8], "dtype": "bfloat16"}}}]',
     "unknown dtype"),
])
def test_calls_that_do_not_fit_are_one_line_and_leave_nothing(standins, home, tmp_path, body, message):
    calls = tmp_path / "bad.json"
    calls.write_text(body)
    out = onboard("flashinfer.norm:rmsnorm", "--shapes", str(calls), "--name", "bad")
    assert out.exit_code == 1 and message in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1
    assert not list(home.rglob("*.toml")) and not list(home.rglob("*.py"))
