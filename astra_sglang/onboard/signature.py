"""An op's spec arguments from its signature and recorded calls: which are tensors and which scalars, which it
reads, overwrites or updates in place, and the tensors it returns (an out-of-place op's results become output
arguments of the harness's C ABI, after its own arguments).

Each guess carries its reason (`Param.why`), which `onboard` prints in its table, so a wrong one is one line to fix.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from astra_sglang.errors import AstraError
from astra_sglang.onboard.static import OTHER_DEFAULT, Signature, SigParam
from astra_sglang.patching.binding import IGNORED_KWARGS
from astra_sglang.specs.calls import CallRecord, TensorCall
from astra_sglang.specs import dtypes as dt

OUT_NAME = re.compile(r"^(out|output|result|dst)(_\w+)?$|_out$")
"""out, output_q, q_out: outputs by name (not `gating_output`, which is an input named after what made it)."""
DOC_OUTPUT = r"^\s*{name}\s*(\([^)]*\))?\s*:\s*(\S.*\n\s*)?(the\s+)?output\b"
SCALAR_TYPES = {bool: "bool", int: "int", float: "float"}
RETURNED_NAMES = ("out", "out1", "out2", "out3")


@dataclass
class Param:
    name: str
    kind: str = "tensor"
    role: str = "in"
    scalar_type: str = "float"
    default: Any = None
    keyword: bool = False
    optional: bool = False
    shape: list = field(default_factory=list)
    dtype: str = "T"
    init: dict = field(default_factory=dict)
    dim: str = ""
    returned: bool = False
    """Not an argument of the op: a tensor it returns, written by the harness's adapter into this output."""
    returns_at: int = -1
    """The position of this argument among what the op returns (-1: not returned)."""
    why: str = ""


def _doc_says_output(doc: str, name: str) -> bool:
    return bool(re.search(DOC_OUTPUT.format(name=re.escape(name)), doc, re.IGNORECASE | re.MULTILINE))


def _annotated(p: SigParam) -> str:
    ann = p.annotation.lower()
    if "tensor" in ann:
        return "tensor"
    for word in ("bool", "int", "float"):
        if re.search(rf"\b{word}\b", ann):
            return word
    return ""


def _scalar(p: SigParam, calls: list[CallRecord]) -> Param:
    recorded = next((c.scalars[p.name] for c in calls if p.name in c.scalars), None)
    value = recorded if recorded is not None else p.default
    if value is None or value is OTHER_DEFAULT:
        raise AstraError(f"no value for the scalar {p.name!r}: the recorded calls give none and its signature has "
                         "no default (add it to the calls' \"scalars\")")
    annotated = _annotated(p)
    stype = annotated if annotated in SCALAR_TYPES.values() else SCALAR_TYPES.get(type(value), "float")
    why = "recorded value" if recorded is not None else "signature default"
    return Param(p.name, "scalar", scalar_type=stype, default=value, keyword=p.keyword, optional=p.has_default,
                 why=why)


def params_of(sig: Signature, calls: list[CallRecord]) -> list[Param]:
    """The spec arguments, in the op's order, then one output per returned tensor it has no argument for.
    Recorded calls decide tensor vs scalar where the signature allows both (`top_k: Union[Tensor, int]`)."""
    recorded_tensors = {n for c in calls for n in c.tensors}
    recorded_scalars = {n for c in calls for n in c.scalars}
    out: list[Param] = []
    for p in sig.params:
        what = _annotated(p)
        if p.name in IGNORED_KWARGS and p.has_default:
            continue  # a launch hint (enable_pdl): a patched call passes any value; the kernel decides itself
        if p.name in recorded_tensors:
            out.append(Param(p.name, keyword=p.keyword, optional=p.has_default, why="recorded tensor"))
        elif p.name in recorded_scalars or (what in SCALAR_TYPES.values() and not p.has_default) \
                or type(p.default) in SCALAR_TYPES:
            out.append(_scalar(p, calls))
        elif not p.has_default and what in ("tensor", ""):
            raise AstraError(f"the recorded calls give no shape for {p.name!r} (a required argument)")
        elif OUT_NAME.search(p.name) and what in ("tensor", ""):
            # an optional output the calls left out (the op allocates it): the harness passes one
            out.append(Param(p.name, role="out", keyword=p.keyword, optional=True,
                             why="optional output the calls leave out (the op allocates it)"))
        # any other defaulted parameter (None, enable_pdl, a dtype, a generator) is bound by name at its default
    _roles(sig, out, calls)
    _returned(sig, out, calls)
    return out


def _roles(sig: Signature, params: list[Param], calls: list[CallRecord]) -> None:
    tensors = [p for p in params if p.kind == "tensor"]
    for p in tensors:
        if OUT_NAME.search(p.name):
            p.role, p.why = "out", f"named {p.name}"
        elif _doc_says_output(sig.doc, p.name):
            p.role, p.why = "out", "its docstring calls it the output"
    if sig.returns.strip() in ("None", "") and not sig.returned and not any(p.role == "out" for p in tensors):
        _inplace(sig, tensors, calls[0])


def _inplace(sig: Signature, tensors: list[Param], call: CallRecord) -> None:
    """An op that returns nothing and names no output writes into what it is given: the float tensors its
    docstring assigns to (`residual[i] += input[i]`), else, for an `*_inplace` function or none said, the float
    tensors shaped like its largest one (a weight or an index tensor is read only)."""
    floats = [p for p in tensors if p.name in call.tensors and call.tensors[p.name].dtype in dt.FLOATS]
    said = [p for p in floats if _doc_assigns(sig.doc, p.name)]
    if said:
        written, why = said, "its docstring assigns to it"
    else:
        largest = max((call.tensors[p.name].shape for p in floats), key=len, default=[])
        written = [p for p in floats if len(call.tensors[p.name].shape) == len(largest) and len(largest) > 1]
        written = written or floats[:1]
        why = "returns nothing: " + ("an in-place function" if "inplace" in sig.name else "updated in place (guessed)")
    for p in written:
        p.role, p.why = "inplace", why


def _doc_assigns(doc: str, name: str) -> bool:
    return bool(re.search(rf"(?<![\w.]){re.escape(name)}\s*(\[[^\]]*\])?\s*[-+*/]?=(?!=)", doc)
                or re.search(rf"\b{re.escape(name)}\b[^\n]*\b(in-?place|updated|overwritten)\b", doc, re.IGNORECASE))


def returned_count(sig: Signature, calls: list[CallRecord]) -> int:
    """How many tensors the op returns: as recorded, else from the annotation or its return statement."""
    if calls and any(c.returns for c in calls):
        return max(len(c.returns) for c in calls)
    ann = sig.returns.replace(" ", "")
    if ann in ("None", ""):
        return len(sig.returned)
    inner = re.match(r"^(typing\.)?(Tuple|tuple)\[(.*)\]$", ann)
    if inner:
        return inner.group(3).lower().count("tensor")
    return 1 if "tensor" in ann.lower() else len(sig.returned)


def _returned(sig: Signature, params: list[Param], calls: list[CallRecord]) -> None:
    """One output argument per returned tensor that is not an argument already (`return out` of `out=None`);
    every output the calls do not give gets its shape and dtype (`recorded_or_like`)."""
    count = returned_count(sig, calls)
    names = {p.name for p in params}
    taken = set(names)
    index: dict[str, int] = {}
    unmatched = [p for p in params if p.role == "out" and p.optional and p.name not in sig.returned]
    for i in range(count):
        said = sig.returned[i] if i < len(sig.returned) else ""
        if not said and unmatched:  # `return f(input, out)` of an op taking `out=None`: that output, returned
            said = unmatched.pop(0).name
        if said in names:  # returns its own argument (the optional out it was given or allocated)
            index[said] = i
            next(p for p in params if p.name == said).returns_at = i
            continue
        name = said if said and said not in taken else next(n for n in RETURNED_NAMES if n not in taken)
        taken.add(name)
        index[name] = i
        like = sig.like.get(said, "")
        recorded = any(i < len(c.returns) for c in calls)
        why = ("returned (recorded)" if recorded else f"returned, allocated like {like}" if like else
               "returned (shape guessed: like the first tensor)")
        params.append(Param(name, role="out", returned=True, returns_at=i, why=why))
        sig.like.setdefault(name, like)
    for p in params:  # an output no call gives: its shape from what the op returned, else guessed
        if p.role == "out" and not any(p.name in c.tensors for c in calls):
            for call in calls:
                call.tensors[p.name] = recorded_or_like(call, index.get(p.name, -1), sig.like.get(p.name, ""), params)
        elif p.role == "out":  # given in some calls: where a call returned it instead, that is its shape
            for call in calls:
                if p.name not in call.tensors and 0 <= index.get(p.name, -1) < len(call.returns):
                    call.tensors[p.name] = call.returns[index[p.name]]


def recorded_or_like(call: CallRecord, index: int, like: str, params: list[Param]) -> TensorCall:
    """An output's shape and dtype in a call that does not give it: the returned tensor recorded at `index`,
    else those of the argument it is allocated like, else of the first tensor argument."""
    if 0 <= index < len(call.returns):
        return call.returns[index]
    source = like if like in call.tensors else next((p.name for p in params if p.kind == "tensor"
                                                     and p.name in call.tensors), "")
    if not source:
        raise AstraError("the op returns a tensor whose shape the calls do not say: record it (launch "
                         "--record-calls records returns) or add \"returns\" to the calls")
    return call.tensors[source].model_copy(update={"range": None})
