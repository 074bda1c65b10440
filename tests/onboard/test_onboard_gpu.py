"""On a GPU with SGLang's kit: the real flashinfer, sgl_kernel and SGLang ops onboarded from the committed calls files
(onboard runs the first GPU run there and writes what it found into the spec), then each one's `bench`, check only."""
from __future__ import annotations

import importlib.util
import tomllib

import pytest
from click.testing import CliRunner
from onboard_support import calls_file

from astra_sglang.cli import main

pytestmark = pytest.mark.gpu

OPS = [("flashinfer.norm:layernorm", "layernorm", "layernorm", "op"),
       ("flashinfer.norm:rmsnorm", "rmsnorm", "flashinfer_rmsnorm", "float64"),
       ("flashinfer.sampling:top_k_renorm_probs", "top_k_renorm_probs", "top_k_renorm_probs", "op"),
       ("sgl_kernel:sgl_per_token_quant_fp8", "sgl_per_token_quant_fp8", "sgl_per_token_quant_fp8", "op"),
       ("sglang.srt.layers.activation:relu2", "relu2", "relu2", "op")]


@pytest.mark.parametrize("entry, calls, name, reference_dtype", OPS, ids=[o[2] for o in OPS])
def test_a_real_op_is_onboarded_and_checked_on_the_gpu(home, entry, calls, name, reference_dtype):
    if importlib.util.find_spec(entry.split(".")[0].split(":")[0]) is None:
        pytest.skip(f"{entry.split('.')[0]} is not installed here")
    out = CliRunner().invoke(main, ["onboard", entry, "--shapes", calls_file(calls)])
    assert out.exit_code == 0, out.output
    assert "ok: first GPU run: " in out.output and "to be checked at the first GPU run" not in out.output
    bench = CliRunner().invoke(main, ["bench", name, "--no-time", "--out", str(home / f"{name}.jsonl")])
    assert bench.exit_code == 0, bench.output
    spec = tomllib.loads((home / "specs" / f"{name}.toml").read_text())
    assert spec["onboard"]["gpu_check"] and spec["reference_dtype"] == reference_dtype
    assert set(spec["onboard"]["measured"]) == set(spec["dtypes"])
