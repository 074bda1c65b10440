"""The bar for fused MoE tuning: which kernels the strict evaluator compares, and the rows and table it gives.

Per shape and batch size: SGLang's shipped pick, the best config SGLang's own tuner found (sglang_tuner_run), the
split-K knob on that config, and ours (a config file given). Every figure is a ratio of two kernels timed
interleaved in one isolated evaluation, by the evaluator's rules: the tuner's best against SGLang's pick; each
split-K variant of the tuner's best config against it (one evaluation per rank j: every batch size's j-th
variant); ours against the tuner's best. Picking the best of several split ratios favours noise, so the splits
that won are timed again in a final evaluation of their own (`final_request`), and that is the knob's figure.
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from astra_sglang.harness.records import EvalRequest, EvalResult, KernelSource
from astra_sglang.triton.moe import knobs
from astra_sglang.triton.moe.configs import nearest
from astra_sglang.triton.moe.op import table_name
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.source_op import candidate_path
from astra_sglang.triton.moe.space import MoeConfig

PRESETS = {
    "mixtral-8x7b-tp2": MoeShape(8, 7168, 4096, 2),
    "qwen3-30b-a3b": MoeShape(128, 768, 2048, 8),
    "deepseek-v2-lite": MoeShape(64, 1408, 2048, 6),
    "mixtral-8x7b-tp2-fp8": MoeShape(8, 7168, 4096, 2, quant="fp8_w8a8"),
}
"""Expert shapes people serve (per tensor-parallel rank; bf16 activations). The fp8 one is Mixtral-8x7B-Instruct
FP8 at TP2 (per-tensor scales), for which SGLang ships H100 and H200 configs (triton_3_1_0)."""


@dataclass(frozen=True)
class Comparison:
    name: str
    """"tuner-vs-pick", "splitk-<j>", "splitk-final" or "ours-vs-tuner"."""
    request: EvalRequest
    variants: dict[int, str]
    """Batch size -> the candidate's code there."""


def _request(shape: MoeShape, tokens: list[int], candidate: KernelSource, baseline: KernelSource,
             timeout_s: float) -> EvalRequest:
    return EvalRequest(kernel=shape.spec, candidate=candidate, baseline=baseline,
                       shapes=[shape.shape(t) for t in sorted(tokens)], dtypes=[shape.dtype], edge_cases=False,
                       timeout_s=timeout_s)


def _tuner(shape: MoeShape, tuner: dict[int, MoeConfig], tokens) -> KernelSource:
    table = {t: tuner[t] for t in tokens}
    return KernelSource(path=shape.op(table_name(table)), label="sglang-tuner")


def requests(shape: MoeShape, tuner: dict[int, MoeConfig], ours: dict[int, MoeConfig] | None = None,
             timeout_s: float = 300.0, sms: int = knobs.SMS, most_splits: int = 4) -> list[Comparison]:
    """The first round: the tuner's best against SGLang's pick, its split-K variants against it (unquantized
    shapes: the split-K kernel has no fp8 path), ours against it."""
    tokens = sorted(tuner)
    pick = KernelSource(path=shape.op("sglang_pick"), label="sglang-pick")
    out = [Comparison("tuner-vs-pick", _request(shape, tokens, _tuner(shape, tuner, tokens), pick, timeout_s),
                      {t: tuner[t].code() for t in tokens})]
    splits = {t: [] if shape.quantized else
              knobs.extend(tuner[t], t, shape.experts, shape.inter, shape.hidden, shape.topk, sms)[1:]
              for t in tokens}
    for j in range(min(most_splits, max((len(v) for v in splits.values()), default=0))):
        table = {t: v[j] for t, v in splits.items() if j < len(v)}
        candidate = KernelSource(path=candidate_path(table), label=f"splitk-{j + 1}")
        out.append(Comparison(f"splitk-{j + 1}", _request(shape, list(table), candidate,
                                                          _tuner(shape, tuner, table), timeout_s),
                              {t: v.code() for t, v in table.items()}))
    if ours:
        table = {t: ours[nearest(ours, t)] for t in tokens}
        candidate = KernelSource(path=shape.op(table_name(table)), label="ours")
        out.append(Comparison("ours-vs-tuner", _request(shape, tokens, candidate, _tuner(shape, tuner, tokens),
                                                        timeout_s), {t: c.code() for t, c in table.items()}))
    return out


class BarRow(BaseModel):
    """One batch size of one comparison."""

    shape: str
    tokens: int
    comparison: str
    candidate: str
    baseline: str
    correct: bool | None = None
    speedup: float | None = None
    """Baseline time over candidate time, interleaved in one process (> 1: the candidate is faster)."""
    candidate_us: float | None = None
    baseline_us: float | None = None
    reason: str = ""


def rows(shape: MoeShape, tuner: dict[int, MoeConfig], comparisons: list[Comparison],
         results: list[EvalResult]) -> list[BarRow]:
    out = []
    for comparison, result in zip(comparisons, results):
        found = {r.shape[0]: r for r in result.shapes}
        for t, code in sorted(comparison.variants.items()):
            r = found.get(t)
            baseline = "sglang-pick" if comparison.name == "tuner-vs-pick" else tuner[t].code()
            out.append(BarRow(
                shape=shape.describe(), tokens=t, comparison=comparison.name, candidate=code, baseline=baseline,
                correct=r.correct if r else None, speedup=r.speedup if r and r.correct else None,
                candidate_us=r.candidate.median_us if r and r.candidate else None,
                baseline_us=r.baseline.median_us if r and r.baseline else None,
                reason=(r.reason if r else result.reason or "not evaluated")[:300]))
    return out


def final_request(shape: MoeShape, tuner: dict[int, MoeConfig], first: list[BarRow],
                  timeout_s: float = 300.0) -> Comparison | None:
    """The split that won at each batch size in the first round (faster than the tuner's best there), timed again
    in an evaluation of its own; None where no split won."""
    best: dict[int, BarRow] = {}
    for row in first:
        if row.comparison.startswith("splitk-") and row.speedup and row.speedup > 1.0:
            if row.tokens not in best or row.speedup > best[row.tokens].speedup:
                best[row.tokens] = row
    if not best:
        return None
    table = {t: knobs.Variant.from_code(r.candidate) for t, r in best.items()}
    candidate = KernelSource(path=candidate_path(table), label="splitk-final")
    return Comparison("splitk-final", _request(shape, list(table), candidate, _tuner(shape, tuner, table), timeout_s),
                      {t: v.code() for t, v in table.items()})
