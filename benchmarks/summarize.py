"""Turn a results folder into benchmarks/RESULTS.md and the README's results table. CPU only.

A results folder (benchmarks/results/<date>-<gpu>/, or the OUT of benchmarks/gpu/run_all.sh) holds harness
rows (`astra-sglang bench --out`), per-call rows (benchmarks/per_call.py) and sources.jsonl: one line per
(file, ops) naming the kind of rows (timed | checks | per_call), the shape sets they cover, and the date, GPU,
commit and command they came from. Every figure written names its source.

The README's serving rows come from every results folder's serving.jsonl (benchmarks/serving_rows.py).

Usage:
    python3 benchmarks/summarize.py [FOLDER]          # write benchmarks/RESULTS.md and the README's tables
    python3 benchmarks/summarize.py FOLDER --out DIR  # write DIR/RESULTS.md only (e.g. a GPU run's OUT)
    python3 benchmarks/summarize.py --check           # exit 1 where RESULTS.md or the README's table differ
FOLDER defaults to the newest folder under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from astra_sglang.paths import templates_dir
from astra_sglang.specs.registry import get_spec, resolve_shapes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPS = ["silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse"]
DTYPE = "bfloat16"  # the table's dtype; the checks cover every dtype a patch serves
DECODE_TOKENS = 64  # per-call figures in the table: 1-64 tokens, where the host's work per call matters
NAMES = {f"py:astra_sglang.{package}.adapters:sglang_silu_and_mul": "sglang.srt.layers.activation.silu_and_mul"
         for package in ("baselines", "ops")}
"""Baselines by the name a user knows (the adapter calls exactly that function); rows recorded before the
adapters moved to astra_sglang.baselines name them by their old module."""
BEGIN, END = "<!-- results: written by benchmarks/summarize.py -->", "<!-- /results -->"


@dataclass(frozen=True)
class Source:
    file: str
    kind: str
    ops: list[str]
    date: str
    gpu: str
    commit: str
    command: str
    sets: list[str] = field(default_factory=list)
    software: str = ""
    origin: str = ""
    note: str = ""


@dataclass
class OpSummary:
    op: str
    baseline: str = ""
    paper: tuple[float, int, int] | None = None  # geomean, shapes timed, shapes in the set
    quick: tuple[float, int, int] | None = None  # paper + quick: decode to large prefill
    models: tuple[float, int, int] | None = None
    timed: list[dict] = field(default_factory=list)  # one row per shape, in the order the sources list them
    main_rows: list[dict] = field(default_factory=list)
    """The rows measured for the paper and quick sets: the table's slowest and largest shapes come from these."""
    per_call: list[dict] = field(default_factory=list)
    checks: dict[str, int] = field(default_factory=dict)
    check_dtypes: list[str] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)

    @property
    def slowest(self) -> dict | None:
        return min(self.main_rows, key=lambda r: r["speedup"]) if self.main_rows else None

    @property
    def largest(self) -> dict | None:
        return max(self.main_rows, key=lambda r: r["min_bytes"]) if self.main_rows else None

    @property
    def decode_ratio(self) -> tuple[float, float] | None:
        values = [r["ratio"] for r in self.per_call if r["shape"][0] <= DECODE_TOKENS]
        return (min(values), max(values)) if values else None


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def summarize_op(op: str, folder: Path, sources: list[Source]) -> OpSummary:
    spec, out = get_spec(op), OpSummary(op)
    mine = [s for s in sources if op in s.ops]
    out.sources = mine
    seen, by_set = set(), {"paper": {}, "quick": {}, "models": {}}
    members = {name: {tuple(x) for x in resolve_shapes(spec, name)} for name in ("paper", "quick", "models")}
    for src in (s for s in mine if s.kind == "timed"):
        for row in read_rows(folder / src.file):
            if row.get("type") != "shape" or row["kernel"] != op or row["dtype"] != DTYPE or not row.get("speedup"):
                continue
            shape = tuple(row["shape"])
            out.baseline = out.baseline or row.get("baseline_label", "")
            for name in by_set:  # a set's figure comes from the rows measured for that set
                if name in src.sets and shape not in by_set[name]:
                    by_set[name][shape] = row
            if shape not in seen:
                seen.add(shape)
                out.timed.append({**row, "source": src, "sets": [n for n, m in members.items() if shape in m]})
    for name, rows in by_set.items():
        want = {tuple(s) for s in resolve_shapes(spec, name)}
        if name == "quick":  # the column is paper + quick
            rows = {**rows, **{k: v for k, v in by_set["paper"].items() if k not in rows}}
            want |= {tuple(s) for s in resolve_shapes(spec, "paper")}
        got = [r for shape, r in rows.items() if shape in want]
        setattr(out, name, (geomean([r["speedup"] for r in got]), len(got), len(want)) if got else None)
        if name == "quick":
            out.main_rows = got
    for src in (s for s in mine if s.kind == "per_call"):
        out.per_call += [{**r, "source": src} for r in read_rows(folder / src.file) if r["op"] == op]
    counts = {"pass": 0, "fail": 0, "not covered": 0}
    for src in (s for s in mine if s.kind == "checks"):
        for row in read_rows(folder / src.file):
            if row.get("type") == "shape" and row["kernel"] == op:
                verdict = "not covered" if not row["covered"] else {True: "pass", False: "fail"}.get(row["correct"])
                if verdict:
                    counts[verdict] += 1
                    if row["dtype"] not in out.check_dtypes:
                        out.check_dtypes.append(row["dtype"])
    out.checks = counts
    return out


@dataclass
class Page:
    """A result that is not a per-shape kernel row (Triton tuning, in-place profiles, serving A/Bs, new families):
    its own markdown page, listed with its provenance in a results folder's pages.jsonl and embedded here."""
    page: str
    title: str
    date: str
    gpu: str
    commit: str
    command: str
    text: str = ""


def load_pages(results: Path) -> list[Page]:
    """Every dated folder's pages, newest folder first; headings one level down, relative links made
    relative to benchmarks/."""
    pages = []
    for folder in sorted((p for p in results.iterdir() if (p / "pages.jsonl").is_file()), reverse=True):
        for row in read_rows(folder / "pages.jsonl"):
            page = Page(**row)
            path = folder / page.page
            base = path.parent.relative_to(results.parent)
            lines = path.read_text().splitlines()
            if lines and lines[0].startswith("# "):
                lines = lines[1:]  # the page's own title: the pages.jsonl title stands for it
            text = "\n".join("#" + line if line.startswith("#") else line for line in lines).strip()
            page.text = re.sub(r"\]\((?!https?:|/)([^)]+)\)", lambda m: f"]({base}/{m[1]})", text)
            pages.append(page)
    return pages


def newest_folder() -> Path:
    folders = sorted(p for p in (ROOT / "benchmarks" / "results").iterdir() if (p / "sources.jsonl").is_file())
    if not folders:
        raise SystemExit("summarize: no results folder with a sources.jsonl under benchmarks/results/")
    return folders[-1]


def load(folder: Path) -> tuple[list[OpSummary], list[Source]]:
    sources = [Source(**s) for s in read_rows(folder / "sources.jsonl")]
    if not sources:
        raise SystemExit(f"summarize: {folder}/sources.jsonl is missing or empty")
    ops = [op for op in OPS if any(op in s.ops for s in sources)]
    return [summarize_op(op, folder, sources) for op in ops], sources


def render(template: str, folder: Path, ops: list[OpSummary], sources: list[Source], readme: bool = False) -> str:
    """A template over the summaries; the README's table (readme=True) leaves out the model-shape column, which
    only a longer run (benchmarks/gpu/run_all.sh with SETS=models) measures."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir() / "reports"), trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["shape"] = lambda s: "x".join(map(str, s))
    env.filters["op_name"] = lambda label: NAMES.get(label, label.removeprefix("py:").replace(":", "."))
    try:
        folder_name = str(folder.resolve().relative_to(ROOT))
    except ValueError:
        folder_name = str(folder)
    dates = sorted({s.date[:10] for s in sources})
    gpus = sorted({s.gpu for s in sources})
    commits = list(dict.fromkeys(s.commit for s in sources))
    return env.get_template(template).render(ops=ops, sources=sources, folder=folder_name, dtype=DTYPE,
                                             dates=dates, gpus=gpus, commits=commits, tokens=DECODE_TOKENS,
                                             pages=[] if readme else load_pages(ROOT / "benchmarks" / "results"),
                                             with_models=not readme and any(o.models for o in ops),
                                             rows=serving_rows.load(ROOT / "benchmarks" / "results"), readme=readme)


def with_block(readme: str, block: str, begin: str = BEGIN, end_marker: str = END) -> str:
    start, end = readme.find(begin), readme.find(end_marker)
    if start < 0 or end < start:
        raise SystemExit(f"summarize: README.md has no {begin} ... {end_marker} block")
    return readme[:start] + begin + "\n" + block + readme[end:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", type=Path)
    ap.add_argument("--out", type=Path, help="write OUT/RESULTS.md only")
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args(argv)
    folder = args.folder or newest_folder()
    ops, sources = load(folder)
    results = render("results.md.j2", folder, ops, sources)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "RESULTS.md").write_text(results)
        print(render("results_table.md.j2", folder, ops, sources, readme=True))
        return 0
    readme_path, results_path = ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md"
    readme = with_block(readme_path.read_text(), render("results_table.md.j2", folder, ops, sources, readme=True))
    readme = with_block(readme, render("serving_table.md.j2", folder, ops, sources, readme=True), serving_rows.BEGIN,
                        serving_rows.END)
    if args.check:
        stale = [p.name for p, text in ((results_path, results), (readme_path, readme))
                 if not p.is_file() or p.read_text() != text]
        if stale:
            print(f"summarize: {', '.join(stale)} differ from {folder}: run python3 benchmarks/summarize.py")
        return 1 if stale else 0
    results_path.write_text(results)
    readme_path.write_text(readme)
    print(f"wrote {results_path.relative_to(ROOT)} and the README's table from {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
