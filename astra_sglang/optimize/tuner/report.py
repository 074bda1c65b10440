"""A tuning run's outputs: tune.md (jinja2) and the terminal table."""
from __future__ import annotations

from pathlib import Path

import jinja2
from rich.console import Console
from rich.table import Table

from astra_sglang.optimize.tuner.bucket import WIN_MARGIN
from astra_sglang.paths import templates_dir
from astra_sglang.triton.results import TuneResult

VERDICTS = {"tuned": "tuned config", "sglang-best": "SGLang's pick (already the best)",
            "no-valid-config": "SGLang's pick (no config passed)", "not-measured": "SGLang's pick (not measured)"}


def write_report(result: TuneResult, path: Path) -> Path:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "reports")), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    name = "tune.md.j2" if result.kernel.startswith("fused_moe") else "tune_attention.md.j2"
    path.write_text(env.get_template(name).render(r=result, verdicts=VERDICTS, margin=f"{WIN_MARGIN:g}x"))
    return path


def print_result(result: TuneResult, console: Console | None = None) -> None:
    console = console or Console(width=max(Console().width, 150))
    shape = result.shape
    if result.kernel.startswith("fused_moe"):
        title = (f"fused_moe E={shape['experts']} N={shape['inter']} hidden={shape['hidden']} top-{shape['topk']} "
                 f"{shape.get('quant') or shape['dtype']}")
    else:
        title = f"{result.kernel} {shape['heads']}/{shape['kv_heads']} heads x {shape['head_dim']} {shape['dtype']}"
    t = Table(title=f"{title} | {result.gpu} | Triton {result.triton}", title_justify="left")
    first = "M" if result.kernel.startswith("fused_moe") else "bucket"
    for col in (first, "SGLang's pick", "best found", "search", "final", "written"):
        t.add_column(col, justify="right" if col in (first, "search", "final") else "left")
    for b in result.buckets:
        t.add_row("x".join(map(str, b.bucket)) if b.bucket else str(b.tokens), b.pick, b.best or "-", f"{b.best_speedup:.3f}x" if b.best_speedup else "-",
                  f"{b.final_speedup:.3f}x" if b.final_speedup else "-", VERDICTS[b.verdict])
    console.print(t)
    geo = result.geomean()
    console.print(f"SGLang picks: {result.buckets[0].pick_source}" if result.buckets else "")
    console.print(f"{result.evaluations} evaluations, {result.cached} cached measurements, {result.seconds:.0f} s"
                  + (f"; final geomean {geo:.3f}x over {len(result.buckets)} batch sizes" if geo else ""))
