"""benchmarks/knobs_table.py (after benchmarks/gpu/knobs.sh) on CPU: rows from a final evaluation, and an op
whose run stopped early said as such; the optimize flags knobs.sh passes exist."""
import re
from pathlib import Path

import pytest

from astra_sglang.harness.records import EvalResult, ShapeResult, Timing

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "knobs.sh"


def _row(shape, dtype, base, cand, correct=True):
    return ShapeResult(shape=shape, dtype=dtype, correct=correct, speedup=base / cand if correct else None,
                       candidate=Timing(median_us=cand, p10_us=cand, p90_us=cand),
                       baseline=Timing(median_us=base, p10_us=base, p90_us=base))


@pytest.mark.parametrize("shapes", [[(1, 4096)], [(7, 11008), (512, 4096), (3, 5)]])
def test_table_rows_and_geomean(bench_script, tmp_path, shapes):
    table = bench_script("knobs_table")
    op = tmp_path / "gelu_and_mul"
    (op / "extracted").mkdir(parents=True)
    (op / "extracted" / "knobbed.cu").write_text("// BLOCK (block, original 256): x\n// astra:knob BLOCK 64 128 256\n")
    rows = [_row(s, "bfloat16", 2.0, 1.6) for s in shapes] + [_row(shapes[0], "float32", 4.0, 4.0)]
    (op / "final.json").write_text(EvalResult(kernel="gelu_and_mul", candidate="final.cu", baseline="py:m:f", ok=True,
                                              stage="done", shapes=rows).model_dump_json())
    text = table.main([str(tmp_path), "2026-01-02", "NVIDIA H100", "abc1234", "bash knobs.sh OUT", "gelu_and_mul",
                       "rmsnorm"])
    assert "derived knobs: BLOCK 64/128/256 (original 256)" in text
    assert f"bfloat16 geomean 1.250x over {len(shapes)} shapes" in text
    assert text.count("| 2.00 | 1.60 | 1.250x | yes |") == len(shapes)  # the tuned dtype's rows only
    assert "## rmsnorm" in text and "no final evaluation" in text
    assert (tmp_path / "knobs.md").read_text() == text


def test_knobs_sh_passes_flags_optimize_has():
    from astra_sglang.cli.optimize import optimize

    flags = {opt for p in optimize.params for opt in p.opts}
    line = next(ln for ln in SCRIPT.read_text().splitlines() if "astra-sglang optimize" in ln)
    used = set(re.findall(r"(--[a-z-]+)", line)) | {"--from-extracted", "--from"}
    assert used <= flags, used - flags
