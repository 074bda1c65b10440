"""benchmarks/summarize.py: the README's results table and benchmarks/RESULTS.md come from the committed rows
(checked here against the committed files), and the figures it computes from hand-made rows."""
from __future__ import annotations

import json
import math

import pytest


def _timed(op, shape, speedup, mb=1, roof=50.0, correct=True, dtype="bfloat16", baseline="py:sgl_kernel:rmsnorm"):
    timing = {"median_us": 2.0, "p10_us": 1.9, "p90_us": 2.1}
    return {"type": "shape", "kernel": op, "shape": list(shape), "dtype": dtype, "speedup": speedup, "min_bytes": mb,
            "pct_roofline": roof, "gbps": 100.0, "correct": correct, "covered": True, "candidate": timing,
            "baseline": timing, "candidate_label": f"patches/{op}", "baseline_label": baseline}


def _source(file, kind, ops, sets=(), commit="abc1234"):
    return {"file": file, "kind": kind, "ops": ops, "sets": list(sets), "date": "2026-11-21", "gpu": "GPU X",
            "commit": commit, "command": f"make {file}", "software": "torch 0"}


def _write(folder, name, rows):
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def summarize(bench_script):
    return bench_script("summarize")


def test_the_committed_readme_table_and_results_page_match_the_committed_rows(summarize):
    assert summarize.main(["--check"]) == 0


def test_figures_per_set_with_partial_counts_per_call_range_and_checks(summarize, tmp_path):
    paper = [(128, 4096), (256, 4096)]  # two of rmsnorm's 8 paper shapes
    _write(tmp_path, "kernels.jsonl", [_timed("rmsnorm", paper[0], 1.2, mb=10), _timed("rmsnorm", paper[1], 1.5, mb=30),
                                       _timed("rmsnorm", paper[1], 9.9, dtype="float16"),  # not the table's dtype
                                       {"type": "summary", "kernel": "rmsnorm"}])
    # the models file times a paper shape again: the paper figure keeps the paper run's row
    _write(tmp_path, "models.jsonl", [_timed("rmsnorm", (1, 4096), 0.9, mb=5, roof=7.0),
                                      _timed("rmsnorm", paper[0], 2.0, mb=10)])
    _write(tmp_path, "per_call.jsonl", [
        {"op": "rmsnorm", "shape": [1, 4096], "ratio": 0.6, "original_us": 9, "patched_us": 5.4,
         "original_gpu_us": 1, "patched_gpu_us": 1, "path": "c++"},
        {"op": "rmsnorm", "shape": [64, 4096], "ratio": 0.7, "original_us": 9, "patched_us": 6.3,
         "original_gpu_us": 1, "patched_gpu_us": 1, "path": "c++"},
        {"op": "rmsnorm", "shape": [8192, 4096], "ratio": 1.0, "original_us": 9, "patched_us": 9,  # not decode
         "original_gpu_us": 1, "patched_gpu_us": 1, "path": "c++"}])
    checks = [_timed("rmsnorm", (3, 11), None, correct=True, dtype=d) for d in ("bfloat16", "float32")]
    checks += [{**_timed("rmsnorm", (2, 1), None), "covered": False, "correct": None},
               _timed("rmsnorm", (5, 4100), None, correct=False)]
    _write(tmp_path, "checks.jsonl", checks)
    _write(tmp_path, "sources.jsonl", [
        _source("kernels.jsonl", "timed", ["rmsnorm"], ["paper", "quick"]),
        _source("models.jsonl", "timed", ["rmsnorm"], ["models"], commit="def5678"),
        _source("per_call.jsonl", "per_call", ["rmsnorm"]),
        _source("checks.jsonl", "checks", ["rmsnorm"], ["edge", "held_out"])])
    (ops, sources) = summarize.load(tmp_path)
    (op,) = ops
    assert op.paper[0] == pytest.approx(math.sqrt(1.2 * 1.5)) and op.paper[1:] == (2, 8)
    assert op.quick[0] == pytest.approx(math.sqrt(1.2 * 1.5)) and op.quick[1:] == (2, 12)  # 1x4096: a models row
    assert op.models[0] == pytest.approx(math.sqrt(0.9 * 2.0)) and op.models[1] == 2
    assert [tuple(r["shape"]) for r in op.timed] == [*paper, (1, 4096)]  # each shape once, first source first
    # slowest and largest: of the paper and quick rows (the 1x4096 row came from the models run, 0.9x)
    assert op.slowest["speedup"] == 1.2 and tuple(op.largest["shape"]) == paper[1]
    assert op.decode_ratio == (0.6, 0.7)
    assert op.checks == {"pass": 2, "fail": 1, "not covered": 1} and op.check_dtypes == ["bfloat16", "float32"]
    assert op.baseline == "py:sgl_kernel:rmsnorm"
    table = summarize.render("results_table.md.j2", tmp_path, ops, sources, readme=True)
    assert "| rmsnorm | `sgl_kernel.rmsnorm` | 1.342x (2 of 8) | 1.342x (2 of 12) | 128x4096 1.200x |" in table
    assert "0.60-0.70x SGLang's time | 2 of 4 |" in table and "commits abc1234, def5678" in table
    page = summarize.render("results.md.j2", tmp_path, ops, sources)
    assert "| 1.342x (2 of 8) | 1.342x (2 of 12) | 1.342x (2 of 32) | 128x4096 1.200x |" in page  # + model shapes
    assert "| 1x4096 | quick+models | 2.00 (1.90-2.10) | 2.00 | 0.900x |" in page
    assert "`def5678` | `make models.jsonl` |" in page


def test_an_op_without_rows_shows_dashes_and_the_readme_needs_its_markers(summarize, tmp_path):
    _write(tmp_path, "sources.jsonl", [_source("kernels.jsonl", "timed", ["silu_and_mul"], ["paper"])])
    ops, sources = summarize.load(tmp_path)
    table = summarize.render("results_table.md.j2", tmp_path, ops, sources)
    assert "| silu_and_mul | - | - | - | - | - | - | 0 of 0 |" in table and "model shapes" not in table
    assert summarize.with_block(f"a\n{summarize.BEGIN}\nold\n{summarize.END}\nb", "new\n") == \
        f"a\n{summarize.BEGIN}\nnew\n{summarize.END}\nb"
    with pytest.raises(SystemExit, match="no .* block"):
        summarize.with_block("a README without markers", "new\n")
    with pytest.raises(SystemExit, match="sources.jsonl"):
        summarize.load(tmp_path / "missing")


def test_serving_rows_carry_design_rounds_interval_and_check(summarize, tmp_path, monkeypatch):
    """A results folder's serving.jsonl names a run's summary.json; the README's serving block shows each run's
    design, timed rounds, change and interval (as the run labelled it) and its A/A rule or parity verdict."""
    from astra_sglang.serving.client import ClientSettings
    from astra_sglang.serving.summary import MetricSummary, ParitySummary, RunSummary

    def run(control, typical, lo, hi, parity_ok=None):
        metric = MetricSummary(key="output_throughput", label="output throughput", unit="tok/s", higher_is_better=True,
                               typical_pct=typical, estimate=typical, lo=lo, hi=hi, df=6, units=8, rounds=16,
                               interval="95% crossover t-interval (GPU term fitted), 8 periods (16 rounds), 6 df",
                               verdict="v")
        parity = None if parity_ok is None else ParitySummary(ok=parity_ok, lines=[], max_abs=0.012, bias_t=1.0,
                                                              reference="r")
        return RunSummary(design="crossover", control=control, periods_done=8, periods_planned=8, rounds_per_period=2,
                          gpus=["0", "1"], client=ClientSettings(), client_text="c", model_path="m", server_args=[],
                          metrics=[metric], aa_ok=True if control else None, parity=parity)
    folder = tmp_path / "results" / "2026-12-01-h100"
    for name, summary in (("aa", run(True, 0.4, -1.1, 1.9)), ("dense", run(False, 1.2, -0.8, 3.3, parity_ok=True))):
        (folder / name).mkdir(parents=True)
        (folder / name / "summary.json").write_text(summary.model_dump_json())
    _write(folder, "serving.jsonl", [
        {"summary": f"{name}/summary.json", "what": what, "against": against, "date": "2026-12-01", "gpu": "H100 x2",
         "commit": "abc1234", "command": "bash benchmarks/gpu/ab_design.sh"}
        for name, what, against in (("aa", "A/A control, dense", "identical server"),
                                    ("dense", "shipped patches, dense", "unpatched server"))])
    rows = summarize.serving_rows.load(tmp_path / "results")
    assert [r.what for r in rows] == ["A/A control, dense", "shipped patches, dense"]
    monkeypatch.setattr(summarize.serving_rows, "load", lambda results: rows)
    ops, sources = summarize.load(summarize.newest_folder())
    block = summarize.render("serving_table.md.j2", tmp_path, ops, sources, readme=True)
    assert ("| A/A control, dense | identical server | crossover (2 GPUs), 8 periods | 16 | +0.40% | [-1.10, +1.90]% "
            "(95% crossover t-interval (GPU term fitted), 8 periods (16 rounds), 6 df) | A/A rule: pass |") in block
    assert "| shipped patches, dense | unpatched server |" in block and "parity: ok (largest logprob difference 0.012)" in block
    monkeypatch.setattr(summarize.serving_rows, "load", lambda results: [])
    assert summarize.render("serving_table.md.j2", tmp_path, ops, sources, readme=True).strip() == ""
    assert "No run of the designs" in summarize.render("serving_table.md.j2", tmp_path, ops, sources)
