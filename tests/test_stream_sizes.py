"""benchmarks/gpu/stream_sizes.py on the CPU: the size grid, and its rows as bounds_table's reference."""
import json
from dataclasses import asdict


def test_sizes_are_whole_vectors_for_both_kinds_and_log_spaced(bench_script):
    ss = bench_script("gpu/stream_sizes")
    sizes = ss.sizes(1 << 15, 1 << 28)
    assert all(s % 32 == 0 and s % 48 == 0 for s in sizes)  # READS 1: 32 bytes per vector, READS 2: 48
    assert sizes == sorted(set(sizes)) and sizes[0] <= 1 << 15 <= sizes[1] and sizes[-1] >= 0.99 * (1 << 28)
    ratios = [b / a for a, b in zip(sizes, sizes[1:])]
    assert all(1.15 < r < 1.24 for r in ratios)  # four steps per octave


def test_rows_feed_the_bounds_table_reference(tmp_path, bench_script):
    ss, bt = bench_script("gpu/stream_sizes"), bench_script("bounds_table")
    rows = [ss.StreamRow(96_000, r, t, 1, 1, 1.0, pct, 4000.0) for r, t, pct in ((1, 128, 30.0), (2, 256, 35.0))]
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows))
    assert [p for _, p in bt.streaming_points([], "bfloat16", [str(path)])] == [35.0]


def test_table_shows_the_fastest_configuration_per_kind_and_pdl(tmp_path, bench_script, capsys):
    ss = bench_script("gpu/stream_sizes")
    rows = [ss.StreamRow(96_000, r, t, 1, p, us, 1.0, 4000.0) for r, t, p, us in
            ((1, 128, 0, 2.0), (1, 256, 0, 1.9), (1, 128, 1, 1.4), (2, 128, 0, 2.1), (2, 512, 1, 1.5),
             (2, 256, 1, 1.45))]
    assert {k: (b.threads, b.median_us) for k, b in ss.best(rows).items()} == {
        (1, 0): (256, 1.9), (1, 1): (128, 1.4), (2, 0): (128, 2.1), (2, 1): (256, 1.45)}
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows))
    ss.table(path)
    assert capsys.readouterr().out == ss.line(96_000, rows) + "\n"
    old = tmp_path / "old.jsonl"  # rows written before the pdl field: read as without PDL
    old.write_text(json.dumps({k: v for k, v in asdict(rows[0]).items() if k != "pdl"}) + "\n")
    ss.table(old)
    assert " pdl " not in capsys.readouterr().out
