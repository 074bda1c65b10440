"""Which ops one `optimize` job runs: named ones, every op with a spec (--all), or the ops a profile of a
live server ranked (--from-profile PROFILE.json).

The profile's JSON is read by a small typed reader that accepts what a ranked kernel table naturally is:
a list of rows, or an object holding one under "ops", "rows" or "kernels"; a row is an op name or an
object naming it under "op" (or "spec", "name"). Rows are kept in the profile's order (its ranking); rows
naming no op with a spec here (GEMMs, attention kernels of other libraries) are skipped and reported.
"""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from astra_sglang.errors import AstraError
from astra_sglang.specs.registry import all_specs, get_spec

LIST_KEYS = ("ops", "rows", "kernels")
NAME_KEYS = ("op", "spec", "name")


class ProfileRow(BaseModel):
    model_config = ConfigDict(extra="ignore")
    op: str

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data):
        if isinstance(data, str):
            return {"op": data}
        if isinstance(data, dict):
            name = next((data[k] for k in NAME_KEYS if isinstance(data.get(k), str) and data[k]), None)
            return {**data, "op": name} if name else data
        return data


class ProfileOps(BaseModel):
    rows: list[ProfileRow]

    @model_validator(mode="before")
    @classmethod
    def _rows(cls, data):
        if isinstance(data, list):
            return {"rows": data}
        if isinstance(data, dict):
            found = next((data[k] for k in LIST_KEYS if isinstance(data.get(k), list)), None)
            if found is not None:
                return {"rows": found}
        return data


def ops_from_profile(path: str | Path) -> tuple[list[str], list[str]]:
    """(ops with a spec, in the profile's order; names skipped because no spec has them)."""
    try:
        profile = ProfileOps.model_validate(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise AstraError(f"{path}: no such profile file") from None
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0][:200]
        raise AstraError(f"{path}: not a profile's JSON (a list of rows naming ops: {first})") from None
    known = {s.name for s in all_specs()}
    ops, skipped = [], []
    for row in profile.rows:
        target = ops if row.op in known else skipped
        if row.op not in target:
            target.append(row.op)
    if not ops:
        raise AstraError(f"{path}: names no op that has a spec here ({', '.join(skipped[:6]) or 'no rows'}); "
                         f"known: {', '.join(sorted(known))}")
    return ops, skipped


def resolve_ops(names: tuple[str, ...], every: bool, profile: str | None) -> tuple[list[str], list[str]]:
    """The job's ops (and the profile rows skipped); exactly one way of naming them."""
    given = sum([bool(names), every, profile is not None])
    if given != 1:
        raise AstraError("name the ops to optimize one way: KERNEL..., --all, or --from-profile PROFILE.json")
    if every:
        return [s.name for s in all_specs()], []
    if profile is not None:
        return ops_from_profile(profile)
    for name in names:
        get_spec(name)  # an unknown op is a clear error before anything runs
    return list(dict.fromkeys(names)), []
