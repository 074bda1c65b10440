"""The run's markdown report (harness_templates/reports/optimize.md.j2) and a PNG plot of per-shape speedup
and % of roofline per round (matplotlib, optional: without it the report says so)."""
from __future__ import annotations

from pathlib import Path

import jinja2

from astra_sglang.harness.records import EvalResult
from astra_sglang.optimize.agents.journal import RunLog, test_suite, write_atomic
from astra_sglang.optimize.records import HistoryRow, Usage, Winner
from astra_sglang.paths import templates_dir
from astra_sglang.specs.records import KernelSpec

REPORT = "report.md"
PLOT = "speedup.png"


def _series(log: RunLog) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """metric -> 'shape/dtype' -> [(round, value)] from every timed evaluation."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {"speedup": {}, "pct_roofline": {}}
    for rec in log.of_role("eval"):
        result = EvalResult.model_validate(rec.payload)
        for s in result.shapes:
            key = f"{'x'.join(map(str, s.shape))}/{s.dtype}"
            for metric in out:
                value = getattr(s, metric)
                if value is not None and s.correct is not False:
                    out[metric].setdefault(key, []).append((rec.round, value))
    return out


def plot(log: RunLog, path: Path) -> str:
    """Write the plot; returns '' or why there is none."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    series = _series(log)
    if not any(series.values()):
        return "no timed evaluations"
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    titles = {"speedup": "speedup vs baseline", "pct_roofline": "% of memory roofline"}
    for ax, (metric, lines) in zip(axes, series.items()):
        for key, points in sorted(lines.items()):
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
        ax.set_title(titles[metric])
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].axhline(1.0, color="black", linewidth=0.8)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="center right", fontsize=7)
    fig.tight_layout(rect=(0, 0, 0.82, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return ""


def write_report(run_dir: str | Path, spec: KernelSpec, winner: Winner | None) -> Path:
    log = RunLog(run_dir)
    config = log.load_config(run_dir)
    rows = []
    for rec in log.of_role("round"):
        row = HistoryRow.model_validate(rec.payload)
        used = sum((r.usage for r in log.records if r.round == rec.round), Usage())
        rows.append({**row.model_dump(), "tokens": used.tokens, "cost": used.cost_usd})
    candidates = [HistoryRow.model_validate(rec.payload) for rec in log.of_role("cand")]
    stops = log.of_role("stop")
    note = plot(log, log.dir / PLOT)
    suite, _ = test_suite(spec, config, log)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "reports")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    text = env.get_template("optimize.md.j2").render(
        spec=spec, config=config, run_id=log.dir.name, rows=rows, candidates=candidates, winner=winner,
        usage=log.spent(),
        rounds_done=max((r["round"] for r in rows), default=0), stop=stops[-1].summary if stops else "",
        suite=suite, dtypes=config.dtypes or spec.dtypes, plot="" if note else PLOT, plot_note=note)
    return write_atomic(log.dir / REPORT, text + "\n")

