"""The typed summary of a design run's folder (crossover or restarts): what the report renders, what
OUT/summary.json holds and what benchmarks/summarize.py reads for the README's serving rows."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from pydantic import BaseModel, Field

from astra_sglang.serving import design_stats, license, parity, runner, window
from astra_sglang.serving.client import ClientSettings

SUMMARY = "summary.json"
METRICS = design_stats.METRICS


class MetricSummary(BaseModel):
    key: str
    label: str
    unit: str
    higher_is_better: bool
    typical_pct: float
    estimate: float | None = None
    lo: float | None = None
    hi: float | None = None
    df: float | None = None
    units: int
    rounds: int
    interval: str = ""
    """The interval's label (level, method, units, rounds, df), '' where there is none."""
    verdict: str


class PeriodSummary(BaseModel):
    period: int
    gpus: dict[str, str]
    """arm -> the GPU its server ran on."""
    pcts: list[float]
    """Output throughput, B vs A in % per timed round (crossover), or this start's mean vs A's mean (restarts)."""


class WindowSummary(BaseModel):
    """One arm's timed round: its window (the benchmark's duration) and how much of it the first tokens took."""
    period: int | None
    round: int
    arm: str
    window_s: float | None
    ttft_ms: float | None
    ttft_share: float | None
    request_share: float | None = None
    """Mean TTFT over the mean request latency (serving/window.py)."""
    short: bool


class ParitySummary(BaseModel):
    ok: bool
    lines: list[str]
    max_abs: float
    bias_t: float
    reference: str
    """What B was judged against: another run's A/A, this run's A across its starts, or the tolerance alone."""


class RunSummary(BaseModel):
    design: str
    control: bool
    periods_done: int
    periods_planned: int
    rounds_per_period: int
    gpus: list[str]
    client: ClientSettings
    client_text: str
    model_path: str
    server_args: list[str]
    metrics: list[MetricSummary]
    aa_ok: bool | None = None
    aa_reasons: list[str] = Field(default_factory=list)
    parity: ParitySummary | None = None
    periods: list[PeriodSummary] = Field(default_factory=list)
    starts: list[dict] = Field(default_factory=list)
    stats_dirs: list[str] = Field(default_factory=list)
    min_window_s: float = window.MIN_WINDOW_S
    windows: list[WindowSummary] = Field(default_factory=list)
    short_windows: str = ""
    """serving/window.py's reason when a timed round is shorter than min_window_s, else ''."""


def window_summaries(rows: list[dict], min_window_s: float) -> tuple[list[WindowSummary], str]:
    """Each timed round's window and the one-line reason when any is too short ('' when none is)."""
    found = window.windows(rows)
    return ([WindowSummary(period=w.period, round=w.round, arm=w.arm, window_s=w.window_s, ttft_ms=w.ttft_ms,
                           ttft_share=w.ttft_share, request_share=w.request_share,
                           short=w.short(min_window_s)) for w in found],
            window.short_reason(found, min_window_s))


def _metric(c: design_stats.Change) -> MetricSummary:
    i = c.interval
    return MetricSummary(key=c.key, label=c.label, unit=c.unit, higher_is_better=c.higher_is_better,
                         typical_pct=c.typical_pct, estimate=i.estimate if i else None, lo=i.lo if i else None,
                         hi=i.hi if i else None, df=i.df if i else None, units=c.units, rounds=c.rounds,
                         interval=i.label() if i else "", verdict=c.verdict)


def _periods(rows: list[dict]) -> list[PeriodSummary]:
    by_period: dict[int, list[dict]] = {}
    for row in rows:
        by_period.setdefault(row["period"], []).append(row)
    a_values = [r["metrics"]["output_throughput"] for r in rows if r["arm"] == "A"]
    a_mean = statistics.fmean(a_values) if a_values else None
    out = []
    for period, prow in sorted(by_period.items()):
        gpus = {r["arm"]: str(r.get("gpu_id") if r.get("gpu_id") is not None else r.get("gpu_index", 0)) for r in prow}
        rounds: dict[int, dict[str, float]] = {}
        for r in prow:
            rounds.setdefault(r["round"], {})[r["arm"]] = r["metrics"]["output_throughput"]
        if len(gpus) == 2:
            pcts = [100 * (v["B"] - v["A"]) / v["A"] for _, v in sorted(rounds.items()) if "A" in v and "B" in v]
        else:
            mean = statistics.fmean(x for v in rounds.values() for x in v.values())
            pcts = [100 * (mean - a_mean) / a_mean] if a_mean else []
        out.append(PeriodSummary(period=period, gpus=gpus, pcts=pcts))
    return out


def parity_summary(out: Path, control: bool, aa_dir: Path | None) -> ParitySummary | None:
    """B's logprobs against A's, judged against another run's A/A (aa_dir) of the same model, else this run's A
    across its starts, else the tolerance alone (a control: B against A is itself the A/A). An A/A of another model
    (or load format) says nothing of this one's logprobs: it is passed over, and the reference says so."""
    ab, own = parity.pairs_of(parity.read_probes(out / runner.PROBES))
    if not ab:
        return None
    reference, aa, other_model = "the tolerance alone", None, ""
    if aa_dir is not None:
        other_model = _other_model(out, aa_dir)
        other, _ = parity.pairs_of(parity.read_probes(aa_dir / runner.PROBES)) if not other_model else ([], [])
        if other:
            reference, aa = f"the A/A of {aa_dir}", parity.compare(other)
    if aa is None and own and not control:
        reference, aa = "A against itself across its starts", parity.compare(own)
    if other_model:
        reference += f" (the A/A of {aa_dir} is of {other_model}: not this model's reference)"
    diff = parity.compare(ab)
    verdict = parity.judge(diff, aa)
    return ParitySummary(ok=verdict.ok, lines=verdict.lines, max_abs=diff.max_abs, bias_t=min(diff.bias_t, 1e9),
                         reference=reference)


def _other_model(out: Path, aa_dir: Path) -> str:
    """'' where the A/A in aa_dir served this run's model (path and load format), else what it served."""
    try:
        mine = runner.RunPlan.model_validate_json((out / runner.PLAN).read_text())
        theirs = runner.RunPlan.model_validate_json((aa_dir / runner.PLAN).read_text())
    except (OSError, ValueError):
        return ""  # a plan missing: nothing to tell them apart by
    if (mine.model_path, mine.load_format) == (theirs.model_path, theirs.load_format):
        return ""
    return f"{theirs.model_path}" + (f" ({theirs.load_format})" if theirs.load_format else "")


def summarize(out: Path, aa_dir: Path | None = None, min_window_s: float = window.MIN_WINDOW_S) -> RunSummary:
    plan = runner.RunPlan.model_validate_json((out / runner.PLAN).read_text())
    rows = runner.read_jsonl(out / runner.ROWS)
    licensed = plan.design in license.NEEDS_AA and license.licensed_by(aa_dir, plan.design, min_window_s)
    changes = [c for key, label, unit, higher in METRICS
               if (c := design_stats.change(rows, key, label, unit, higher, licensed, plan.control))]
    windows, short = window_summaries(rows, min_window_s)
    check = design_stats.aa_check(next((c for c in changes if c.key == "output_throughput"), None),
                                  short_windows=short)
    starts = runner.read_jsonl(out / runner.STARTS)
    return RunSummary(
        design=plan.design, control=plan.control, periods_done=len({s["period"] for s in starts}),
        periods_planned=len(plan.periods), rounds_per_period=plan.periods[0].rounds if plan.periods else 0,
        gpus=plan.gpus, client=plan.client, client_text=plan.client.describe(), model_path=plan.model_path,
        server_args=plan.server_args, metrics=[_metric(c) for c in changes],
        aa_ok=check.ok if plan.control else None, aa_reasons=check.reasons if plan.control else [],
        parity=parity_summary(out, plan.control, aa_dir), periods=_periods(rows), starts=starts,
        stats_dirs=sorted({r["stats_dir"] for r in rows if r.get("stats_dir")}), min_window_s=min_window_s,
        windows=windows, short_windows=short)


def write(out: Path, summary: RunSummary) -> Path:
    path = out / SUMMARY
    path.write_text(json.dumps(summary.model_dump(mode="json"), indent=1) + "\n")
    return path
