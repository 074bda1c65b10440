"""The bar's results: one summary per batch size (SGLang's pick, SGLang tuner's best and its ratio to the pick, the
split-K knob's and ours against the tuner's best, where the pick and ours lie in its loop's landscape and our
shared-memory model against its compiles), SGLang's tuner's cost, and bar.md (jinja2)."""
from __future__ import annotations

from pathlib import Path

import jinja2
from pydantic import BaseModel

from astra_sglang.paths import templates_dir
from astra_sglang.triton.moe.bar import BarRow
from astra_sglang.triton.moe.configs import nearest
from astra_sglang.triton.moe.sglang_tuner_landscape import Landscape, SmemCheck, landscape_of, smem_check
from astra_sglang.triton.moe.sglang_tuner_records import TunerRun
from astra_sglang.triton.moe.space import MoeConfig


class BatchSummary(BaseModel):
    tokens: int
    pick: str
    pick_source: str
    tuner_best: str | None
    tuner_vs_pick: float | None = None
    splitk: str | None = None
    """The split variant of the tuner's best config that won, confirmed (final) or the first round's best."""
    splitk_vs_tuner: float | None = None
    splitk_confirmed: bool = False
    splitk_note: str = ""
    ours_vs_tuner: float | None = None
    tuner_mode: str = ""
    tuner_given: int = 0
    tuner_ranked: int = 0
    tuner_tried: int = 0
    tuner_space: int = 0
    tuner_seconds: float = 0.0
    mean_config_s: float | None = None
    estimate_s: float | None = None
    estimate_half_s: float | None = None
    script_us: dict[str, float] = {}
    """Label ("pick", "tuner", "ours") -> microseconds by SGLang's script's own benchmark_config, in its process."""
    script_note: str = ""
    tuner_skipped: int = 0
    """exhaustive: configs its loop skipped (compile or resource errors)."""
    tuner_warmed: int = 0
    """exhaustive: configs the warm phase started at this batch size."""
    tuner_warm_s: float = 0.0
    """exhaustive: the warm phase's wall at this batch size."""
    landscape: Landscape | None = None
    """Its loop's time of every config it timed, summed up, with the places of SGLang's pick and ours."""
    smem: SmemCheck | None = None
    """Our shared-memory model against the compiler's verdicts in its loop."""


def _row(rows: list[BarRow], tokens: int, comparison: str) -> BarRow | None:
    return next((r for r in rows if r.tokens == tokens and r.comparison == comparison), None)


def summarize(picks: dict, tuner: TunerRun, rows: list[BarRow], ours: dict[int, MoeConfig] | None = None,
              element: int = 2) -> list[BatchSummary]:
    """`picks`: tokens -> moe_configs.Pick; `ours`: our config file's table (its key nearest each batch size read,
    as SGLang reads a file); `element`: bytes an operand element takes (1: fp8_w8a8), for the shared-memory model."""
    out = []
    for batch in tuner.batches:
        t = batch.tokens
        s = BatchSummary(tokens=t, pick=picks[t].config.code(), pick_source=picks[t].describe(),
                         tuner_best=None, tuner_mode=batch.mode, tuner_given=batch.given, tuner_ranked=batch.ranked,
                         tuner_tried=len(batch.costs), tuner_space=batch.space, tuner_seconds=batch.seconds,
                         mean_config_s=sum(batch.costs) / len(batch.costs) if batch.costs else None,
                         tuner_skipped=batch.skipped, tuner_warmed=batch.warmed, tuner_warm_s=batch.warm_s)
        s.script_us, s.script_note = dict(batch.timed), batch.timed_reason
        codes = {"pick": s.pick, **({"ours": ours[nearest(ours, t)].code()} if ours else {})}
        s.landscape, s.smem = landscape_of(batch, codes), smem_check(batch, element)
        if batch.best:
            s.tuner_best = MoeConfig.from_sglang(batch.best).code()
        estimate = batch.estimate()
        if estimate:
            s.estimate_s, s.estimate_half_s = estimate
        vs_pick, vs_tuner = _row(rows, t, "tuner-vs-pick"), _row(rows, t, "ours-vs-tuner")
        s.tuner_vs_pick = vs_pick.speedup if vs_pick else None
        s.ours_vs_tuner = vs_tuner.speedup if vs_tuner else None
        final = _row(rows, t, "splitk-final")
        tried = [r for r in rows if r.tokens == t and r.comparison.startswith("splitk-") and r.comparison != "splitk-final"]
        if final is not None:
            s.splitk, s.splitk_vs_tuner, s.splitk_confirmed = final.candidate, final.speedup, True
        elif tried:
            good = [r for r in tried if r.speedup]
            best = max(good, key=lambda r: r.speedup) if good else None
            s.splitk, s.splitk_vs_tuner = (best.candidate, best.speedup) if best else (None, None)
            s.splitk_note = (f"best of {len(tried)} splits, not confirmed" if best and best.speedup > 1.0 else
                             f"{len(tried)} splits, none faster" if best else f"{len(tried)} splits, none passed")
        else:
            s.splitk_note = "no split worth trying (enough output blocks)"
        out.append(s)
    return out


def write_report(path: Path, header: dict, summaries: list[BatchSummary], tuner: TunerRun, note: str = "") -> Path:
    """`note`: a line on where the figures come from or what the report lacks (earlier runs' tuner figures, the fp8
    spec that judged a quantized shape)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "reports")), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    # ours judged strictly but never timed by the script's process (its figures taken from earlier runs)
    unscripted = any(r.ours_vs_tuner for r in summaries) and not any("ours" in r.script_us for r in summaries)
    path.write_text(env.get_template("moe_bar.md.j2").render(h=header, rows=summaries, tuner=tuner,
                                                             total_s=tuner.users_wall(), note=note,
                                                             ours_unscripted=unscripted))
    return path
