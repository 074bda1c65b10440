"""A spec file changed in place line by line (the first GPU run's figures written into a file the user may have
edited, comments kept), and the original of a flashinfer function found in the package's headers."""
from __future__ import annotations

import pytest
from onboard_support import STANDINS

from astra_sglang.errors import AstraError
from astra_sglang.onboard.sources import flashinfer_source
from astra_sglang.onboard.specfile import drop_table, rewrite, set_key

TEXT = '''# my notes
name = "x"
dtypes = ["bfloat16"]  # edited by hand

[tolerance]
bfloat16 = { atol = 0.016, rtol = 0.016 }

[[arguments]]
name = "a"

[onboard]
gpu_check = ""  # to be checked
'''


@pytest.mark.parametrize("table, key, value, line", [
    ("", "dtypes", ["bfloat16", "float16"], 'dtypes = ["bfloat16", "float16"]'),
    ("tolerance", "float16", {"atol": 0.002, "rtol": 0.002}, "float16 = { atol = 0.002, rtol = 0.002 }"),
    ("onboard", "gpu_check", "H100, 2026-12-01: ok", 'gpu_check = "H100, 2026-12-01: ok"'),
    ("onboard", "measured", {"bfloat16": "run-to-run 0"}, 'measured = { bfloat16 = "run-to-run 0" }'),
    ("new", "flag", True, "flag = true"),
])
def test_set_key_replaces_or_adds_one_line_and_keeps_the_rest(table, key, value, line):
    out = set_key(TEXT, table, key, value)
    assert line in out.splitlines() and "# my notes" in out and 'name = "a"' in out
    assert len(out.splitlines()) - len(TEXT.splitlines()) == (0 if key in ("dtypes", "gpu_check") else
                                                              1 if table != "new" else 3)


def test_drop_table_leaves_the_others():
    out = drop_table(TEXT, "tolerance")
    assert "[tolerance]" not in out and "bfloat16 = {" not in out and "[onboard]" in out and "[[arguments]]" in out
    assert drop_table(TEXT, "nope") == TEXT


def test_rewrite_refuses_a_result_that_is_not_a_spec(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(TEXT)
    with pytest.raises(AstraError, match="updating the spec x"):
        rewrite(path, [("", "dtypes", ["bfloat16"])])  # TEXT is no complete spec: nothing is written
    assert path.read_text() == TEXT and not list(tmp_path.glob(".*"))


@pytest.mark.parametrize("module, attr, found", [
    ("flashinfer.norm", "rmsnorm", {"path": "data/include/flashinfer/norm.cuh", "kernel": "RMSNormKernel",
                                    "host_entry": "flashinfer::norm::RMSNorm"}),
    ("flashinfer.norm", "layernorm", None),  # no such host function in the stand-in's header
    ("sgl_kernel", "rmsnorm", None),  # not flashinfer: its sources ship in no wheel
])
def test_flashinfer_sources_by_the_host_function_named_like_the_op(module, attr, found):
    result = flashinfer_source(module, attr, STANDINS / "flashinfer")
    assert result == ({"flashinfer": found} if found else {})
