"""Per phase: every kernel's time, calls and share of GPU time, the shapes each spec op ran, and the
headroom ranking: what the phase would gain if a kernel moved its bytes at the copy roofline (Amdahl).

Shapes come from the step a kernel was launched in: a prefill step's token count or a decode step's batch,
crossed with the model's dimensions (config.json, divided by the tensor-parallel size where sharded) the
way the op's spec names them (`model_dims`). A decode batch replayed from a CUDA graph may be padded up to
the graph's batch bucket: the shapes then count the real requests, not the padding.
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.profile.attribute import owner, short_name
from astra_sglang.profile.records import KernelRow, Phase
from astra_sglang.profile.trace import Trace
from astra_sglang.specs.profiled import OpShapes
from astra_sglang.specs.registry import get_spec

SHARDED = ("intermediate", "heads", "kv_heads")
DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "half": "float16"}


@dataclass(frozen=True)
class ModelDims:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"
    tp: int = 1

    @classmethod
    def from_config(cls, path: str | Path, tp: int = 1) -> "ModelDims":
        cfg = json.loads(Path(path).read_text())
        cfg = cfg.get("text_config", cfg)
        heads = int(cfg["num_attention_heads"])
        return cls(hidden=int(cfg["hidden_size"]), intermediate=int(cfg.get("intermediate_size", 0)),
                   heads=heads, kv_heads=int(cfg.get("num_key_value_heads", heads)),
                   head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
                   dtype=DTYPES.get(str(cfg.get("torch_dtype", "bfloat16")), "bfloat16"), tp=tp)

    def field(self, name: str) -> int:
        value = getattr(self, name)
        return value // self.tp if name in SHARDED else value


def spec_shape(op: str, tokens: int, dims: ModelDims) -> tuple[int, ...] | None:
    """The spec's shape of `op` at `tokens` for this model, or None where a dim is not a model dim."""
    spec = get_spec(op)
    known = {"tokens": tokens, **{d: dims.field(f) for d, f in spec.shapes.model_dims.items()}}
    if any(d not in known for d in spec.dims):
        return None
    shape = tuple(known[d] for d in spec.dims)
    return shape if spec.supports(shape) else None


def phase_rows(trace: Trace, phase: str, dims: ModelDims | None, roofline_gbps: float | None,
               empty_us: float | None) -> Phase:
    """The phase's kernels, ranked by time, with their headroom where the bytes are known."""
    steps = [s for s in trace.steps if s.phase == phase] if trace.steps else []
    kernels = [k for k in trace.kernels if (trace.phase_of(k) == phase if trace.steps else True)]
    total = sum(k.dur for k in kernels) or 1.0
    n_steps = max(len(steps), 1)
    groups: dict[str, list] = defaultdict(list)
    for k in kernels:
        groups[short_name(k.name)].append(k)
    shape_calls: dict[tuple[str, tuple], int] = defaultdict(int)
    rows = []
    for name, calls in groups.items():
        who = owner(calls[0].name)
        busy = sum(k.dur for k in calls)
        row = KernelRow(name=name, kind=who.kind, op=who.op, action=who.action, calls=len(calls), total_us=busy,
                        per_step_us=busy / n_steps, share=busy / total)
        if who.kind == "spec" and dims is not None:
            _headroom(row, calls, trace, dims, roofline_gbps, empty_us, total, n_steps, shape_calls)
        rows.append(row)
    rows.sort(key=lambda r: -r.total_us)
    ops = defaultdict(lambda: ([], []))
    for (op, shape), count in sorted(shape_calls.items(), key=lambda kv: -kv[1]):
        ops[op][0].append(shape)
        ops[op][1].append(count)
    return Phase(name=phase if trace.steps else "mixed", steps=len(steps),
                 step_wall_us=sum(s.dur for s in steps) / n_steps if steps else 0.0,
                 step_wall_median_us=statistics.median(s.dur for s in steps) if steps else 0.0,
                 step_wall_max_us=max((s.dur for s in steps), default=0.0),
                 gpu_us_per_step=total / n_steps if steps else total,
                 tokens_per_step=sum(s.tokens for s in steps) / n_steps if steps else 0.0, rows=rows,
                 ops=[OpShapes(op=op, dtype=dims.dtype if dims else "", shapes=s, calls=c) for op, (s, c) in ops.items()])


def _headroom(row: KernelRow, calls, trace: Trace, dims: ModelDims, roofline_gbps, empty_us, total, n_steps,
              shape_calls) -> None:
    spec = get_spec(row.op)
    moved = floor = 0.0
    for k in calls:
        step = trace.step_of(k)
        shape = spec_shape(row.op, step.tokens, dims) if step else None
        if shape is None or dims.dtype not in spec.dtypes:
            return  # one call of unknown size: no honest byte count for the row
        shape_calls[(row.op, shape)] += 1
        nbytes = spec.min_bytes(shape, dims.dtype)
        moved += nbytes
        if roofline_gbps:
            floor += max(nbytes / roofline_gbps / 1e3, empty_us or 0.0)
    row.bytes_per_step = int(moved / n_steps)
    row.gbps = moved / row.total_us / 1e3 if row.total_us else None
    if roofline_gbps and row.gbps is not None:
        row.pct_roofline = 100.0 * row.gbps / roofline_gbps
        row.gain_pct = 100.0 * max(row.total_us - floor, 0.0) / total
