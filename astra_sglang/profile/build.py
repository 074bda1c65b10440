"""From traces to a `Profile`: each workload's trace read, its target phase ranked (a decode-heavy load's
decode steps, a prefill-heavy load's prefill steps), the patch layer's engagement added for patched runs."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from astra_sglang.profile.ceilings import Ceilings
from astra_sglang.profile.rank import ModelDims, phase_rows
from astra_sglang.profile.records import Phase, Profile, Workload
from astra_sglang.profile.trace import load


def rank_trace(path: Path, phase: str, dims: ModelDims | None, ceilings: Ceilings | None) -> Phase:
    """The phase `phase` of one trace; a trace without SGLang's step spans gives one phase, "mixed"."""
    trace = load(path)
    present = {s.phase for s in trace.steps}
    if trace.steps and phase not in present:
        phase = max(present, key=lambda p: sum(1 for s in trace.steps if s.phase == p))
    return phase_rows(trace, phase, dims, ceilings.roofline_gbps if ceilings else None,
                      ceilings.empty_us if ceilings else None)


def first_rank(paths: list[Path]) -> Path:
    """TP rank 0's trace where the server wrote one per rank."""
    return next((p for p in paths if "TP-0" in p.name), sorted(paths)[0])


def phase_steps(paths: list[Path], phase: str) -> int:
    """How many of `phase`'s scheduler steps the traces hold (rank 0's): a load whose recorded steps were mostly
    of the other phase (arrivals and finishes interleave prefills with decodes) ranks too few to read."""
    return sum(1 for s in load(first_rank(paths)).steps if s.phase == phase) if paths else 0


def build_profile(traces: dict[str, list[Path]], dims: ModelDims | None, ceilings: Ceilings | None, *,
                  model: str = "", server: list[str] | None = None, patched: bool = False,
                  workloads: dict[str, Workload] | None = None,
                  engagement: dict[str, dict[str, int]] | None = None) -> Profile:
    phases = [rank_trace(first_rank(paths), name, dims, ceilings) for name, paths in traces.items() if paths]
    workload = next(iter((workloads or {}).values()), None) if len(traces) == 1 else None
    return Profile(date=dt.date.today().isoformat(), gpu=ceilings.gpu if ceilings else "", model=model,
                   server=list(server or []), patched=patched, workload=workload,
                   roofline_gbps=ceilings.roofline_gbps if ceilings else None,
                   empty_us=ceilings.empty_us if ceilings else None, phases=phases, engagement=engagement or {},
                   traces=[str(p) for paths in traces.values() for p in paths])
