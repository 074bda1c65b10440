"""`astra-sglang extract` through click: one-line errors for the failure paths, a success line otherwise."""
from __future__ import annotations


from click.testing import CliRunner

from astra_sglang.cli.extract import extract


def run(*args):
    result = CliRunner().invoke(extract, list(args))
    lines = result.output.strip().splitlines()
    return result.exit_code, lines


def test_unknown_kernel():
    code, lines = run("no_such_op")
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith("Error: unknown kernel 'no_such_op'; known:") and "silu_and_mul" in lines[0]


def test_source_path_missing(tmp_path):
    code, lines = run("rmsnorm", "--from", str(tmp_path / "nowhere"))
    assert code == 1 and lines == [f"Error: source not found: {tmp_path / 'nowhere'} does not exist"]


def test_source_path_without_sources(tmp_path):
    code, lines = run("merge_attn_states_lse", "--from", str(tmp_path))
    assert code == 1 and len(lines) == 1
    assert "source not found" in lines[0] and "sgl-kernel" in lines[0]


def test_checkout_only_source_says_where_it_looked():
    code, lines = run("merge_attn_states_lse")
    assert code == 1 and len(lines) == 1 and "only in a git checkout: pass --from PATH" in lines[0]


def test_source_kind_not_in_spec():
    code, lines = run("merge_state", "--from", "sglang")
    assert code == 1 and lines == ["Error: this kernel has no 'sglang' source; it has: flashinfer"]


def _checkout(tmp_path, fixtures_dir, fixture):
    target = tmp_path / "co" / "sgl-kernel" / "csrc" / "attention" / "merge_attn_states.cu"
    target.parent.mkdir(parents=True)
    text = (fixtures_dir / "aot_merge_attn_states.cu").read_text()
    target.write_text(fixture(text))
    return tmp_path / "co"


def test_kernel_name_not_found_lists_globals(tmp_path, fixtures_dir):
    co = _checkout(tmp_path, fixtures_dir, lambda t: t.replace("merge_attn_states_kernel", "renamed_kernel"))
    code, lines = run("merge_attn_states_lse", "--from", str(co), "--out", str(tmp_path / "out"))
    assert code == 1 and lines == ["Error: kernel 'merge_attn_states_kernel' not found in merge_attn_states.cu; "
                                   "__global__ functions there: renamed_kernel"]


def test_parse_error_shows_first_diagnostics(tmp_path, fixtures_dir):
    co = _checkout(tmp_path, fixtures_dir, lambda t: t.replace("const float m = fmaxf(a, b);",
                                                               "const float m = fmaxf(a, b) +;"))
    code, lines = run("merge_attn_states_lse", "--from", str(co), "--out", str(tmp_path / "out"))
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith("Error: parse errors in the kernel's code: merge_attn_states.cu:")
    assert "expected expression" in lines[0]


def test_success_line(tmp_path, fixtures_dir):
    co = _checkout(tmp_path, fixtures_dir, lambda t: t)
    code, lines = run("merge_attn_states_lse", "--from", str(co), "--out", str(tmp_path / "out"))
    assert code == 0, lines
    assert lines[-1].startswith("extracted merge_attn_states_lse from sgl-kernel") and "kernel.cu" in lines[-1]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["kernel.cu", "provenance.json", "spec.toml"]
