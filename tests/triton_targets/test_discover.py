"""Discovery with `ast`: SGLang's real Triton kernels (the pinned sglang's sources) and a small synthetic file
with every kind of launch argument."""
from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.errors import AstraError
from astra_sglang.extraction.triton.discover import env_reads, find_kernel, kernels_in, launches_of, source_hash
from astra_sglang.triton.moe.configs import CONFIG_MODULE, package_dir

SYNTHETIC = '''
import triton
import triton.language as tl
from triton import jit

@triton.jit
def helper(x):
    return x

@triton.autotune(configs=[], key=["n"])
@triton.jit
def tuned(x_ptr, n, BLOCK: tl.constexpr, SPLIT_K: tl.constexpr, EVEN: tl.constexpr, MODE: tl.constexpr = 0):
    pass

@jit
def plain(x_ptr, n, BLOCK: tl.constexpr):
    pass

def launch(x, n, config, fast):
    BLOCK = 64
    if fast:
        BLOCK = 128
    even = True if n % 2 == 0 else False
    EVEN = True
    if n % 2:
        EVEN = False
    width = x.shape[-1]
    tuned[(n,)](x, n, BLOCK=BLOCK, SPLIT_K=width, EVEN=EVEN, num_warps=4, **config)
    plain[lambda meta: (n,)](x, n, BLOCK, num_stages=fast)
'''


@pytest.fixture
def synthetic(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(textwrap.dedent(SYNTHETIC))
    return path


def test_kernels_and_their_decorators(synthetic):
    found = {k.name: k for k in kernels_in(synthetic)}
    assert sorted(found) == ["helper", "plain", "tuned"]
    assert found["tuned"].autotuned and not found["plain"].autotuned
    assert found["tuned"].constexprs == ["BLOCK", "SPLIT_K", "EVEN", "MODE"] and found["tuned"].split_k
    assert found["helper"].launches == []


def test_launch_arguments_are_traced(synthetic):
    tuned = find_kernel(synthetic, "tuned")
    (launch,) = tuned.launches
    args = {a.name: a for a in launch.args}
    assert launch.function == "launch" and launch.grid == "(n,)" and launch.splats == ["config"]
    assert (args["BLOCK"].source, args["BLOCK"].values) == ("local", [64, 128])
    assert args["SPLIT_K"].source == "expression" and args["n"].source == "expression"  # a parameter
    assert (args["num_warps"].source, args["num_warps"].values) == ("constant", [4])
    # literals of the launcher and the config splat; EVEN is a derived switch, MODE has a default
    assert tuned.knobs() == {"BLOCK": "launcher", "num_warps": "launcher", "num_stages": "config"}
    (plain_launch,) = launches_of(find_kernel(synthetic, "plain"), synthetic)
    assert [a.name for a in plain_launch.args] == ["x_ptr", "n", "BLOCK", "num_stages"]  # positional by order


def test_a_missing_kernel_names_the_ones_there(synthetic):
    with pytest.raises(AstraError, match="no @triton.jit kernel 'nope' in .*kernels there: helper, tuned, plain"):
        find_kernel(synthetic, "nope")


def test_sglang_fused_moe_kernel():
    root = package_dir()
    kernel = find_kernel(root / "kernels/ops/moe/fused_moe_triton_kernels.py", "fused_moe_kernel")
    assert {launch.function for launch in kernel.launches} == {"invoke_fused_moe_kernel"}
    assert kernel.launches[0].splats == ["config"]
    assert kernel.knobs() == {k: "config" for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M",
                                                    "num_warps", "num_stages")}
    assert not kernel.split_k
    assert env_reads(root / CONFIG_MODULE) == ["SGLANG_MOE_CONFIG_DIR"]


def test_sglang_decode_attention_hard_codes_its_blocks():
    kernel = find_kernel(package_dir() / "kernels/ops/attention/decode_attention.py", "_fwd_grouped_kernel_stage1")
    args = {a.name: a for a in kernel.launches[0].args}
    assert args["BLOCK_N"].source == "local" and set(args["BLOCK_N"].values) <= {16, 32, 64}
    assert kernel.knobs()["num_warps"] == "launcher"


def test_source_hash_changes_with_the_source(synthetic, tmp_path):
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    first = source_hash([synthetic, other])
    assert first == source_hash([synthetic, other, synthetic])  # each file once
    other.write_text("x = 2\n")
    assert source_hash([synthetic, other]) != first


def test_extract_fused_moe_cli(tmp_path):
    out = tmp_path / "moe"
    result = CliRunner().invoke(main, ["extract", "fused_moe", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "fused_moe_kernel" in result.output and "invoke_fused_moe_kernel" in result.output
    assert "SGLANG_MOE_CONFIG_DIR" in result.output and "split-K: no" in result.output
    discovery = json.loads((out / "discovery.json").read_text())
    assert discovery["version"] == "0.5.17" and len(discovery["source_hash"]) == 64
    configs = discovery["configs"]
    assert configs["files"]["triton_3_6_0"] > 0 and "get_moe_configs" in configs["functions"]
    assert {"BLOCK_SIZE_M", "num_warps", "num_stages"} <= set(configs["keys"])
    assert 4096 in configs["batch_sizes"]
    assert (out / "kernel.py").is_file() and (out / "spec.toml").is_file()


def test_extract_any_triton_kernel_from_a_file(tmp_path, synthetic):
    result = CliRunner().invoke(main, ["extract", "tuned", "--from", str(synthetic), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "BLOCK (launcher)" in result.output and "split-K: yes" in result.output
    bad = CliRunner().invoke(main, ["extract", "nope", "--from", str(synthetic)])
    assert bad.exit_code == 1 and "no @triton.jit kernel 'nope'" in bad.output
