"""A profile's outputs: a rich table in the terminal, profile.json (the typed record, also a shape source),
profile.md (jinja2) and profile.png (time-share bars per phase; before/after when given a base profile)."""
from __future__ import annotations

from pathlib import Path

import jinja2
from rich.console import Console
from rich.table import Table

from astra_sglang.paths import templates_dir
from astra_sglang.profile.compare import PhaseDelta
from astra_sglang.profile.records import Profile

TOP = 15


def _f(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _wall(ph) -> str:
    """Mean step wall, with the median and the longest step where the profile has them."""
    text = f"{ph.step_wall_us / 1e3:.2f} ms"
    if ph.step_wall_median_us:
        text += f" (median {ph.step_wall_median_us / 1e3:.2f}, longest {ph.step_wall_max_us / 1e3:.2f})"
    return text


def _median(d) -> str:
    if not (d.wall_median_before_us and d.wall_median_after_us):
        return ""
    return f" (median {d.wall_median_before_us / 1e3:.2f} -> {d.wall_median_after_us / 1e3:.2f})"


def print_profile(profile: Profile, console: Console | None = None, top: int = TOP) -> None:
    console = console or Console(width=max(Console().width, 170))
    for ph in profile.phases:
        title = (f"{ph.name}: {ph.steps} steps, {ph.tokens_per_step:.0f} tokens a step | GPU "
                 f"{ph.gpu_us_per_step / 1e3:.2f} ms a step, step wall {_wall(ph)} | "
                 f"{profile.gpu}" + (" | patched" if profile.patched else ""))
        t = Table(title=title, title_justify="left")
        for col in ("kernel", "op", "kind", "share", "us/step", "calls/step", "GB/s", "% roof", "gain"):
            t.add_column(col, justify="left" if col in ("kernel", "op", "kind") else "right")
        for r in ph.rows[:top]:
            t.add_row(r.name[:48], r.op or "-", r.kind, f"{100 * r.share:.1f}%", f"{r.per_step_us:.1f}",
                      f"{r.calls / (ph.steps or 1):.1f}", _f(r.gbps, "{:.0f}"), _f(r.pct_roofline, "{:.0f}%"),
                      _f(r.gain_pct, "{:.2f}%"))
        console.print(t)


def print_deltas(deltas: list[PhaseDelta], console: Console | None = None) -> None:
    console = console or Console(width=max(Console().width, 170))
    for d in deltas:
        scaled = f", after scaled x{d.scale:.3f} to {d.tokens_before:.0f} tokens a step" if d.scale != 1.0 else ""
        t = Table(title=f"{d.phase}, in place: GPU {d.gpu_before_us / 1e3:.2f} -> {d.gpu_after_us / 1e3:.2f} ms a "
                        f"step, wall {d.wall_before_us / 1e3:.2f} -> {d.wall_after_us / 1e3:.2f} ms"
                        f"{_median(d)}{scaled}",
                  title_justify="left")
        for col in ("op", "kind", "before us/step", "after us/step", "change", "kernels after"):
            t.add_column(col)
        for o in d.ops:
            t.add_row(o.op, o.kind, f"{o.before_us:.1f}", f"{o.after_us:.1f}", f"{o.change_pct:+.1f}%",
                      ", ".join(o.after_kernels)[:60])
        console.print(t)
        if not d.same_batch:
            console.print(f"[yellow]{d.phase}: the runs recorded different batches ({d.tokens_before:.0f} vs "
                          f"{d.tokens_after:.0f} tokens a step): only the token-linear ops compare here[/yellow]")


def plot(profile: Profile, path: Path, base: Profile | None = None, top: int = 10) -> Path | None:
    """Horizontal bars of the largest kernels' share per phase (base beside it when given); None without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    phases = profile.phases
    fig, axes = plt.subplots(len(phases), 1, figsize=(10, 3.2 * len(phases)), squeeze=False)
    for ax, ph in zip(axes[:, 0], phases):
        rows = ph.rows[:top][::-1]
        labels = [f"{r.name[:40]} ({r.op})" if r.op else r.name[:40] for r in rows]
        ys = range(len(rows))
        ax.barh([y + (0.2 if base else 0) for y in ys], [r.per_step_us / 1e3 for r in rows],
                height=0.4 if base else 0.8, label="this profile")
        if base is not None and (old := base.phase(ph.name)) is not None:
            by_name = {r.name: r.per_step_us for r in old.rows}
            ax.barh([y - 0.2 for y in ys], [by_name.get(r.name, 0.0) / 1e3 for r in rows], height=0.4, label="base")
            ax.legend(loc="lower right")
        ax.set_yticks(list(ys), labels, fontsize=7)
        ax.set_xlabel("GPU ms per step")
        ax.set_title(f"{ph.name}: {ph.gpu_us_per_step / 1e3:.2f} ms of kernels a step", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(profile: Profile, out: Path, deltas: list[PhaseDelta] | None = None, base: Profile | None = None,
          base_name: str = "") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.json").write_text(profile.model_dump_json(indent=1))
    image = plot(profile, out / "profile.png", base)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "reports")), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    text = env.get_template("profile.md.j2").render(p=profile, top=TOP, deltas=deltas or [], base_name=base_name,
                                                    plot=image.name if image else "")
    (out / "profile.md").write_text(text)
    return out / "profile.md"
