"""The summary of a fused MoE tiers run (moe_tiers.py), from its output folder's records: per shape and batch
size, the configs screened of SGLang's space, the screened best against SGLang's pick, the strict tier's verdict
(tuned, with the final evaluation's speedup and its p10/p90 interval, or SGLang's pick kept), and for a batch size
left untuned, why (deferred by the budget, cut by the deadline, its strict tier not run yet); and its floor
(moe_roofline: the bytes the call must move at the GPU's peak bandwidth, or its FLOPs at the peak tensor rate)
with SGLang's screened pick's share of the floor's speed: near 100% no config can gain much."""
from __future__ import annotations

from pydantic import BaseModel

from astra_sglang.optimize.tuner.moe_roofline import floor
from astra_sglang.optimize.tuner.moe_tiers_plan import ShapePlan
from astra_sglang.optimize.tuner.moe_tiers_records import Records, VerdictRow, unit_name
from astra_sglang.optimize.tuner.two_tier import JUDGE_CUT_SHARE, judgeable


class BucketLine(BaseModel):
    shape: str
    tokens: int
    space: int
    screened: int
    knob_screened: int = 0
    pick: str
    pick_us: float | None = None
    best: str | None = None
    best_us: float | None = None
    verdict: str
    """tuned, sglang-best (the strict tier's), or left (not judged: `why` says why)."""
    chosen: str | None = None
    speedup: float | None = None
    interval: tuple[float, float] | None = None
    why: str = ""
    floor_us: float | None = None
    bound: str = ""
    """What sets the floor: memory or compute."""

    @property
    def share(self) -> float | None:
        """SGLang's screened pick's speed as a share of the floor's."""
        return self.floor_us / self.pick_us if self.floor_us and self.pick_us else None


def bucket_lines(plans: dict[str, ShapePlan], records: Records, buckets: list[int], deferred: set[str], gpu: str
                 ) -> list[BucketLine]:
    """One line per shape and batch size of `buckets`: the verdict where judged, else what is left and why; the
    floor on `gpu` beside each."""
    lines = _lines(plans, records, buckets, deferred)
    for x in lines:
        f = floor(plans[x.shape].shape, x.tokens, gpu)
        x.floor_us, x.bound = f.us, f.bound
    return lines


def _lines(plans: dict[str, ShapePlan], records: Records, buckets: list[int], deferred: set[str]
           ) -> list[BucketLine]:
    verdicts = records.verdicts()
    out = []
    for name, sp in plans.items():
        for t in buckets:
            v = verdicts.get((name, t))
            if v is not None:
                kept = v.verdict != "tuned"
                out.append(BucketLine(shape=name, tokens=t, space=v.space, screened=v.screened,
                                      knob_screened=v.knob_screened, pick=v.pick, pick_us=v.screen_pick_us,
                                      best=v.screen_best, best_us=v.screen_best_us, verdict=v.verdict,
                                      chosen=v.chosen, speedup=v.final_speedup, interval=v.interval,
                                      why=_cut(v) + ((v.note or "SGLang's pick measured best") if kept else "")))
                continue
            if t not in sp.orders:
                continue
            known = records.known(unit_name(name, t))
            order = sp.orders[t]
            pick = sp.picks[t].config.code()
            ranked = sorted((r for c, r in known.items() if r.ok and c in order.codes), key=lambda r: r.us)
            screened = sum(c in known for c in order.codes)
            if unit_name(name, t) in deferred:
                why = "deferred: the budget model did not fit its screening before the deadline"
            elif not screened:
                why = "not screened: the deadline came first"
            elif not judgeable(known, order.codes):
                why = f"screening cut by the deadline ({screened} of {len(order.codes)} buildable configs; the " \
                      f"strict tier judges a cut screen from {JUDGE_CUT_SHARE:.0%} of them)"
            else:
                whole = "whole" if screened == len(order.codes) else \
                    f"{screened} of {len(order.codes)} buildable configs (cut by the deadline)"
                why = f"screened {whole}; its strict tier did not fit before the deadline"
            out.append(BucketLine(shape=name, tokens=t, space=len(order.codes) + len(order.pruned),
                                  screened=screened, knob_screened=len(records.known(unit_name(name, t, True))),
                                  pick=pick, pick_us=known[pick].us if pick in known and known[pick].ok else None,
                                  best=ranked[0].config if ranked else None, best_us=ranked[0].us if ranked else None,
                                  verdict="left", why=why + " (a resumed run continues it)"))
    return out


def _cut(v: VerdictRow) -> str:
    return f"judged on a screen cut by the deadline ({v.cut} buildable configs not reached); " if v.cut else ""


FARTHEST = 3
"""Batch sizes named per shape where the screened pick runs farthest from its floor."""


def _f(value, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def render(lines: list[BucketLine], header: str) -> str:
    out = ["# Fused MoE: the two tiers against SGLang's shipped pick", "", header, "",
           "| shape | batch size | screened / space (+ knob) | us: SGLang's pick -> screened best | floor us (bound): "
           "pick's share | strict verdict | final speedup [p10/p90 interval] | why left or kept |",
           "|---|---|---|---|---|---|---|---|"]
    for x in lines:
        ratio = f" ({x.pick_us / x.best_us:.3f}x)" if x.pick_us and x.best_us else ""
        verdict = {"tuned": f"tuned `{x.chosen}`", "left": "left untuned"}.get(x.verdict,
                                                                                f"SGLang's pick kept ({x.verdict})")
        interval = f" [{x.interval[0]:.3f}, {x.interval[1]:.3f}]" if x.interval else ""
        knob = f" (+ {x.knob_screened})" if x.knob_screened else ""
        share = f": {100 * x.share:.0f}%" if x.share else ""
        out.append(f"| {x.shape} | {x.tokens} | {x.screened} / {x.space}{knob} | {_f(x.pick_us)} -> "
                   f"{_f(x.best_us)}{ratio} | {_f(x.floor_us)} ({x.bound or '-'}){share} | {verdict} | "
                   f"{_f(x.speedup, '{:.3f}x')}{interval} | {x.why or '-'} |")
    for shape in dict.fromkeys(x.shape for x in lines):
        mine = [x for x in lines if x.shape == shape]
        tuned = [x for x in mine if x.verdict == "tuned"]
        left = [str(x.tokens) for x in mine if x.verdict == "left"]
        out.append(f"\n{shape}: tuned at {len(tuned)} of {len(mine)} batch sizes"
                   + (f" ({', '.join(f'{x.tokens}: {x.speedup:.3f}x' for x in tuned if x.speedup)})" if tuned else "")
                   + f"; SGLang's pick kept at {len(mine) - len(tuned) - len(left)}"
                   + (f"; left untuned: {', '.join(left)}" if left else "") + ".")
        far = sorted((x for x in mine if x.share), key=lambda x: x.share)[:FARTHEST]
        if far:
            out.append(f"{shape}: SGLang's pick farthest from its floor at batch " + ", ".join(
                f"{x.tokens} ({100 * x.share:.0f}% of its speed)" for x in far)
                + "; the tiers gain most there (a resumed run screens the farthest first).")
    return "\n".join(out) + "\n"
