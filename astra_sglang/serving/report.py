"""The A/B reports. Crossover and restarts runs: serving/summary.py's record rendered by ab_design.md.j2
(write_design_report). The paired design: per-arm medians and spreads, per-round changes with a t-interval over
rounds marked uncontrolled (serving/design_stats.py), greedy parity and the patched server's per-op engagement
(ab.md.j2), plus an optional matplotlib PNG."""
from __future__ import annotations

import statistics
from pathlib import Path

import jinja2

from astra_sglang.paths import templates_dir
from astra_sglang.patching.stats import load_stats
from astra_sglang.serving import design_stats, noise, paired_stats, settings, window

REPORT = "ab.md"
PLOT = "ab.png"
CLIENT = "client.json"
"""The paired design's pinned client settings (serving/client.py), shown in its report."""
METRICS = design_stats.METRICS


def _values(rows: list[dict], arm: str, key: str) -> list[float]:
    return [r["metrics"][key] for r in rows if r["arm"] == arm and key in r.get("metrics", {})]


def compare(rows: list[dict]) -> list[dict]:
    """Per metric: each arm's median/min/max, the delta of B's median vs A's in %, overlap, and a verdict."""
    out = []
    for key, label, unit, higher in METRICS:
        a, b = _values(rows, "A", key), _values(rows, "B", key)
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        delta = (mb - ma) / ma * 100 if ma else float("nan")
        overlap = min(b) <= max(a) and min(a) <= max(b)
        better = (mb > ma) == higher
        if min(len(a), len(b)) < 2:
            verdict = "one run per arm: no noise estimate, the delta may be noise"
        elif overlap:
            verdict = "the spreads of A and B overlap: the effect is smaller than the run-to-run noise"
        else:
            verdict = f"B is {'better' if better else 'worse'}, outside the run-to-run noise"
        out.append(dict(key=key, label=label, unit=unit, a_median=ma, a_min=min(a), a_max=max(a), b_median=mb,
                        b_min=min(b), b_max=max(b), delta_pct=delta, overlap=overlap, verdict=verdict,
                        n_a=len(a), n_b=len(b)))
    return out


def parity(rows: list[dict]) -> dict:
    """Greedy outputs: A runs against the first A run (baseline determinism), B runs against the first A run."""
    a_runs = [r["outputs"] for r in rows if r["arm"] == "A" and r.get("outputs") is not None]
    b_runs = [r["outputs"] for r in rows if r["arm"] == "B" and r.get("outputs") is not None]
    if not a_runs or not b_runs:
        return dict(available=False, prompts=0, a_differ=0, b_differ=0, identical=False)
    ref = a_runs[0]

    def differ(runs):  # prompts whose output differs from the reference in any of the runs
        return sum(1 for i, want in enumerate(ref) if any(i >= len(o) or o[i] != want for o in runs))
    a_diff, b_diff = differ(a_runs[1:]), differ(b_runs)
    return dict(available=True, prompts=len(ref), a_differ=a_diff, b_differ=b_diff, identical=b_diff == 0)


def engagement(stats_dirs: list[str | Path]) -> list[dict]:
    """Per op, summed over every stats file of the patched runs: calls, kernel calls, fallbacks, calls deferred
    to the original (manifest `defer`), disabled."""
    ops: dict[str, dict] = {}
    files = 0
    for folder in stats_dirs:
        for proc in load_stats(folder):
            files += 1
            for rec in proc.ops.values():
                o = ops.setdefault(rec.op, dict(op=rec.op, calls=0, kernel_calls=0, fallbacks=0, deferred=0,
                                                      disabled=""))
                o["calls"] += rec.calls
                o["kernel_calls"] += rec.kernel_calls
                o["fallbacks"] += rec.fallbacks
                o["deferred"] += rec.deferred
                o["disabled"] = o["disabled"] or rec.disabled_reason
    for o in ops.values():
        o["status"] = ("engaged" if o["kernel_calls"] else "called, all deferred" if o["deferred"] else
                       "called, all fallbacks" if o["calls"] else "not engaged")
        o["files"] = files
    return sorted(ops.values(), key=lambda o: o["op"])


def plot(rows: list[dict], path: Path) -> str:
    """Each run's value per metric and arm (paired rounds: a line from A's value to B's); '' on success, else why
    there is no plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, axes = plt.subplots(1, len(METRICS), figsize=(4 * len(METRICS), 3.2))
    for ax, (key, label, unit, _) in zip(axes, METRICS):
        for _, _, a, b in paired_stats.round_values(rows, key):
            ax.plot([0, 1], [a, b], color="lightgray", linewidth=0.8, zorder=0)
        for x, arm, color in ((0, "A", "tab:gray"), (1, "B", "tab:blue")):
            vals = _values(rows, arm, key)
            ax.scatter([x] * len(vals), vals, color=color)
            if vals:
                ax.hlines(statistics.median(vals), x - 0.2, x + 0.2, color=color)
        ax.set_xticks([0, 1], ["A unpatched", "B patched"])
        ax.set_xlim(-0.5, 1.5)
        ax.set_title(f"{label} ({unit})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return ""


def render(rows: list[dict], stats_dirs: list[str | Path], plot_file: str = "", plot_note: str = "",
           setting_diffs: dict | None = None, licensed: bool = False, client: str = "",
           min_window_s: float = window.MIN_WINDOW_S) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "reports")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    runs = max((r["run"] for r in rows), default=0)
    repeats = max((r.get("repeat", 1) for r in rows), default=1)
    changes = [c for key, label, unit, higher in METRICS
               if (c := design_stats.change(rows, key, label, unit, higher, licensed))]
    found = window.windows(rows)
    return env.get_template("ab.md.j2").render(
        windows={(w.round, w.arm): w for w in found}, short_windows=window.short_reason(found, min_window_s),
        runs=runs, repeats=repeats, comparisons=compare(rows), parity=parity(rows), ops=engagement(stats_dirs),
        plot=plot_file, plot_note=plot_note, paired=any(r.get("paired") for r in rows), changes=changes,
        round_table=paired_stats.round_table(rows, [m for m in METRICS if any(c.key == m[0] for c in changes)]),
        kv=paired_stats.kv_pools(rows),
        first=paired_stats.started_first(rows), control=any(r.get("control") for r in rows),
        clocks=noise.clock_summary(rows), settings=setting_diffs, client=client)


def write_design_report(out: str | Path, aa_dir: Path | None = None,
                        min_window_s: float = window.MIN_WINDOW_S) -> Path:
    """OUT/ab.md and OUT/summary.json of a crossover or restarts run, from its folder (serving/summary.py); rounds
    whose timed window is under `min_window_s` seconds are flagged (serving/window.py)."""
    from astra_sglang.serving import runner, summary

    out = Path(out)
    s = summary.summarize(out, aa_dir, min_window_s)
    summary.write(out, s)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "reports")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    rows = runner.read_jsonl(out / runner.ROWS)
    text = env.get_template("ab_design.md.j2").render(s=s, ops=engagement(s.stats_dirs),
                                                       clocks=noise.clock_summary(rows))
    path = out / REPORT
    path.write_text(text + "\n")
    return path


def write_report(out: str | Path, rows: list[dict], stats_dirs: list[str | Path], licensed: bool = False,
                 min_window_s: float = window.MIN_WINDOW_S) -> Path:
    out = Path(out)
    note = plot(rows, out / PLOT) if rows else "no runs"
    path = out / REPORT
    client = ""
    if (out / CLIENT).is_file():
        from astra_sglang.serving.client import ClientSettings

        client = ClientSettings.model_validate_json((out / CLIENT).read_text()).describe()
    path.write_text(render(rows, stats_dirs, "" if note else PLOT, note, settings.read(out), licensed, client,
                           min_window_s) + "\n")
    return path
