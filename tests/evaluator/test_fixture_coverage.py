"""Every cheat fixture is run by a GPU test and named in docs/evaluator.md, with its channel's status."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
CHEATS = ROOT / "tests" / "fixtures" / "cheats"
DOC = (ROOT / "docs" / "evaluator.md").read_text()


def _gpu_cases() -> set[str]:
    tree = ast.parse((ROOT / "tests" / "evaluator" / "test_gpu_fixtures.py").read_text())
    names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return {n for n in names if n.endswith(".cu")} | {n.split(":")[-1] for n in names if n.startswith("silu_")}


def test_every_cheat_kernel_has_a_gpu_test_and_a_line_in_the_doc():
    cases = _gpu_cases()
    for fixture in sorted(CHEATS.glob("*.cu")):
        assert fixture.name in cases, f"{fixture.name} has no GPU test"
        assert f"`{fixture.name}`" in DOC, f"{fixture.name} is not in docs/evaluator.md"


def test_every_python_cheat_has_a_gpu_case_and_a_line_in_the_doc():
    tree = ast.parse((CHEATS / "py_cheats.py").read_text())
    cheats = [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")]
    cases = (ROOT / "tests" / "evaluator" / "test_gpu_fixtures.py").read_text()
    for name in cheats:
        assert f'PY + "{name}"' in cases and name in DOC, name


def test_the_channel_table_gives_every_channel_a_status():
    table = DOC.split("## Between check and timing", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| channel")]
    assert len(rows) >= 12
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 5 and re.match(r"(closed|open|a batch)", cells[-1]), row
