"""The dtypes and input distributions of an onboarded op, from its recorded calls and argument names.

T, the dtype an op runs over, is its main tensor's (the first floating input of the highest rank); an argument
recorded in T in every call is written `T`, one recorded in one other dtype keeps it (a float32 LSE, int32
indices, fp8 outputs). Inputs are drawn by what their names and dtypes say: weights around 1, biases around 0,
quantization scales positive, probabilities as rows that sum to 1, integer tensors in the range the calls
recorded (`launch --record-calls` records it).
"""
from __future__ import annotations

from astra_sglang.errors import AstraError
from astra_sglang.onboard.signature import Param
from astra_sglang.specs.calls import CallRecord
from astra_sglang.specs import dtypes as dt

TOLERANCES = {"bfloat16": (1.6e-2, 1.6e-2), "float16": (2e-3, 2e-3), "float32": (1e-5, 1e-5)}
"""The rounding of one result in each dtype (atol, rtol): a new spec's tolerance, which the first GPU run widens by
the op's own differences (onboard/gpu_check.py)."""
WEIGHTS = ("weight", "gamma", "gemma")
BIASES = ("bias", "beta")
SCALES = ("scale", "scales")
PROBABILITIES = ("probs", "prob", "probabilities")
PROBS_INIT = {"kind": "generator", "function": "astra_sglang.onboard.inits:probabilities"}
ROUTER_LOGITS = ("gating_output", "router_logits")
ROUTER_INIT = {"kind": "generator", "function": "astra_sglang.references.moe_routing:distinct_logits"}
"""Router logits without ties: which experts are the top k is then well defined whatever the summation order."""
DEFAULT_INDEX_HIGH = 16
"""An integer input with no recorded range is drawn in [0, DEFAULT_INDEX_HIGH), said so in the table."""


def _canonical(name: str, what: str) -> str:
    try:
        return dt.canonical(name)
    except ValueError as exc:
        raise AstraError(f"{what}: {exc}") from None


def _main(params: list[Param], call: CallRecord) -> Param:
    tensors = [p for p in params if p.kind == "tensor" and p.name in call.tensors]
    inputs = [p for p in tensors if p.role != "out"] or tensors
    floats = [p for p in inputs if call.tensors[p.name].dtype in dt.FLOATS] or inputs
    return max(floats, key=lambda p: len(call.tensors[p.name].shape))


def assign_dtypes(params: list[Param], calls: list[CallRecord]) -> list[str]:
    """Set each tensor's dtype ("T" or fixed) in place; the op's dtypes, in the order the calls record them."""
    main = _main(params, calls[0])
    seen: list[str] = []
    for p in (p for p in params if p.kind == "tensor"):
        per_call = [(c.tensors[main.name].dtype, c.tensors[p.name].dtype) for c in calls
                    if p.name in c.tensors and main.name in c.tensors]
        if all(t == own for t, own in per_call):
            p.dtype = "T"
            continue
        fixed = {own for _, own in per_call}
        if len(fixed) > 1:
            raise AstraError(f"{p.name} is recorded in {sorted(fixed)}, following no dtype of {main.name}: "
                             "onboard one dtype layout at a time")
        p.dtype = _canonical(fixed.pop(), p.name)
    for call in calls:
        if main.name in call.tensors:
            name = _canonical(call.tensors[main.name].dtype, main.name)
            if name not in dt.OP_DTYPES:
                raise AstraError(f"{main.name} is {name}: not a dtype an op runs over ({', '.join(dt.OP_DTYPES)})")
            if name not in seen:
                seen.append(name)
    return seen


def _range(p: Param, calls: list[CallRecord]) -> tuple[int, int] | None:
    spans = [c.tensors[p.name].range for c in calls if p.name in c.tensors and c.tensors[p.name].range]
    return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None


def assign_inits(params: list[Param], calls: list[CallRecord], t_dtype: str) -> None:
    """Each input's init table (empty: the spec's default, normal(0, 1)) and why, in place."""
    for p in params:
        if p.kind != "tensor" or p.role == "out":
            continue
        dtype = t_dtype if p.dtype == "T" else p.dtype
        name = p.name.lower()
        if dtype in dt.INTEGERS and dtype != "bool":
            span = _range(p, calls)
            low, high = (span[0], span[1] + 1) if span else (0, DEFAULT_INDEX_HIGH)
            p.init = {"kind": "randint", "low": low, "high": high}
            note = "recorded range" if span else "no range recorded: guessed"
        elif name in ROUTER_LOGITS:
            p.init, note = dict(ROUTER_INIT), "router logits: distinct in each row"
        elif any(w in name for w in PROBABILITIES):
            p.init, note = dict(PROBS_INIT), "probabilities: rows summing to 1"
        elif any(w in name for w in WEIGHTS):
            p.init, note = {"mean": 1.0, "std": 0.2}, "a weight"
        elif any(w in name for w in BIASES):
            p.init, note = {"mean": 0.0, "std": 0.2}, "a bias"
        elif any(name == w or name.endswith("_" + w) for w in SCALES):
            p.init, note = {"kind": "uniform", "low": 0.5, "high": 1.5}, "a scale: positive"
        else:
            continue
        p.why = f"{p.why}; {note}" if p.why else note


def describe_init(p: Param) -> str:
    """The table's words for an argument's init."""
    if p.kind == "scalar":
        return f"= {p.default!r}"
    if p.role == "out":
        return "(written by the op)"
    init = p.init or {"mean": 0.0, "std": 1.0}
    kind = init.get("kind", "normal")
    if kind == "normal":
        return f"normal({init.get('mean', 0.0)}, {init.get('std', 1.0)})"
    if kind in ("uniform", "randint"):
        return f"{kind}[{init['low']}, {init['high']})"
    return init.get("function", kind)
