"""Recorded calls as a shape source: the JSON file `launch --record-calls` writes (one list of calls per SGLang
function, patching/recorder.py) and `onboard --shapes` reads. Each call gives its tensor arguments' shapes and
dtypes by name, and its scalars by value.

Writing records whatever a live server passes; reading checks every call, so a hand-edited file with a dtype
typo, a negative size or a missing key is one line naming the call and the field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError, ValidationInfo, field_validator

from astra_sglang.errors import AstraError
from astra_sglang.specs import dtypes as dt

CHECKED = {"checked": True}
"""The validation context under which a call read from a file is checked (not when a server records one)."""


class TensorCall(BaseModel):
    shape: list[int]
    dtype: str
    range: tuple[int, int] | None = None
    """An integer tensor's smallest and largest value (positions, top-k counts, expert ids): `onboard` draws
    its values in that range. Recorded outside CUDA-graph capture only (reading values synchronizes)."""

    @field_validator("shape")
    @classmethod
    def _sizes(cls, value: list[int]) -> list[int]:
        bad = [(i, n) for i, n in enumerate(value) if n < 0]
        if bad:
            raise ValueError(f"size {bad[0][1]} at dim {bad[0][0]} is negative")
        return value

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str, info: ValidationInfo) -> str:
        # A server may pass dtypes no spec knows (e8m0 scales): recorded as they are, refused only on reading.
        return dt.canonical(value) if info.context and info.context.get("checked") else value

    @field_validator("range")
    @classmethod
    def _range(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and value[0] > value[1]:
            raise ValueError(f"range [{value[0]}, {value[1]}]: the smallest value is above the largest")
        return value


class CallRecord(BaseModel):
    """One recorded call: tensor arguments by name (shape, dtype); scalars by value; the tensors it returned,
    in order (an out-of-place op's results, which `onboard` makes output arguments)."""

    tensors: dict[str, TensorCall]
    scalars: dict[str, Any] = {}
    returns: list[TensorCall] = []

    def dump(self) -> dict:
        """The JSON form: tensors and scalars always, returns and ranges where there are some."""
        out = self.model_dump(exclude_none=True)
        if not self.returns:
            out.pop("returns")
        return out


CALLS = TypeAdapter(list[CallRecord])


def call_error(path: Path, exc: ValidationError) -> str:
    """pydantic's first error as one line: the file, the call's index and the field ("calls[2]: tensors.x.dtype")."""
    first = exc.errors()[0]
    loc = list(first["loc"])
    where = f"calls[{loc.pop(0)}]" if loc and isinstance(loc[0], int) else "the calls"
    field = ".".join(str(p) for p in loc)
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path} is not a list of recorded calls: {where}{': ' + field if field else ''}: {msg}{more}".replace(
        "\n", " ")


def load_calls(path: Path) -> list[CallRecord]:
    """The calls in `path`: a JSON list of calls, or {"calls": [...]}; AstraError naming the call and field."""
    path = Path(path)
    if not path.is_file():
        raise AstraError(f"shape source not found: {path}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise AstraError(f"{path} is not a list of recorded calls: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict) and isinstance(data.get("calls"), list):
        data = data["calls"]
    if not isinstance(data, list):
        raise AstraError(f'{path} is not a list of recorded calls: write a JSON list of calls (or {{"calls": [...]}}), '
                         'each {"tensors": {"x": {"shape": [16, 8192], "dtype": "bfloat16"}}}')
    try:
        calls = CALLS.validate_python(data, context=CHECKED)
    except ValidationError as exc:
        raise AstraError(call_error(path, exc)) from None
    if not calls:
        raise AstraError(f"{path} records no call")
    return calls
