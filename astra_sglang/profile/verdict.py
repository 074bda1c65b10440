"""The in-place verdict per patch: from a patched profile compared with an unpatched one of the same load
(profile/compare.py), each patched op's kernel time per step at the server's own shapes, and what the patch set
does about a patch that is slower there than SGLang's op.

A kernel-only benchmark runs with L2 cold and inputs of its own; in the server an op's input can come hot from
the GEMM before it. silu_and_mul measured 1.02x SGLang's at 64x14336 kernel-only (H100) and 18.9 -> 22.4 us a
decode step in place (+18%, H100, 2026-11-24): the in-place figure is the one that counts. The rule, per patch:
- a phase where the patch's kernel did not run (every call deferred to SGLang's) gives no verdict;
- slower by more than SLOWER_PCT in no phase: kept, its figures recorded in the manifest (`inplace`);
- slower in every phase it served: disabled, with the figure (`off_reason`), which `launch` prints;
- slower only below the token counts where it is faster: its `defer` moved there (below_rows = the fewest
  tokens it was faster at), and likewise above (min_bytes = the smallest slower call);
- slower and faster at interleaved sizes: disabled.
Only token-linear ops compare exactly across the two runs' batches, and every op with a spec is one.
"""
from __future__ import annotations

from pydantic import BaseModel

from astra_sglang.patchset.manifest import Defer, InPlace
from astra_sglang.patchset.store import PatchEntry, PatchStore
from astra_sglang.profile.compare import PhaseDelta
from astra_sglang.profile.records import Profile

SLOWER_PCT = 2.0
"""Kernel time per step more than this much above SGLang's op counts as slower (the profiles' scaled per-step
times of unpatched ops moved by up to 1.5% between two runs: profile/compare's table in docs/profile.md)."""


class PhaseVerdict(BaseModel):
    phase: str
    ran: bool
    """Whether the patch's kernel served calls in the phase (its kernel names among the patched run's)."""
    rows: list[int]
    calls: list[tuple[tuple[int, ...], str]]
    """(shape, dtype) of the calls the patch served."""
    before_us: float
    after_us: float
    change_pct: float

    @property
    def slower(self) -> bool:
        return self.ran and self.change_pct > SLOWER_PCT


class OpVerdict(BaseModel):
    op: str
    decision: str
    """keep | defer | disable | none (no phase where the patch ran)."""
    reason: str
    phases: list[PhaseVerdict]


def _served(entry: PatchEntry, after: Profile, phase: str) -> list[tuple[tuple[int, ...], str]]:
    found = after.phase(phase)
    calls = [(tuple(shape), o.dtype) for o in (found.ops if found else []) if o.op == entry.op for shape in o.shapes]
    defer, gate = entry.manifest.defer, entry.manifest.gate_max_bytes
    return [(s, d) for s, d in calls if not (defer and defer.defers(entry.spec, s, d))
            and not (gate and entry.spec.call_bytes(s, d) > gate)]


def phase_verdicts(entry: PatchEntry, deltas: list[PhaseDelta], after: Profile) -> list[PhaseVerdict]:
    out = []
    for d in deltas:
        row = next((o for o in d.ops if o.op == entry.op and o.kind == "spec"), None)
        if row is None or not row.before_us:
            continue
        ran = bool(set(row.after_kernels) - set(row.before_kernels))
        calls = _served(entry, after, d.phase)
        out.append(PhaseVerdict(phase=d.phase, ran=ran and bool(calls), rows=sorted({s[0] for s, _ in calls}),
                                calls=calls, before_us=row.before_us, after_us=row.after_us,
                                change_pct=row.change_pct))
    return out


def _figure(p: PhaseVerdict) -> str:
    tokens = ", ".join(map(str, p.rows))
    return f"{p.phase} ({tokens} tokens) {p.before_us:.1f} -> {p.after_us:.1f} us a step ({p.change_pct:+.1f}%)"


def decide(entry: PatchEntry, phases: list[PhaseVerdict]) -> OpVerdict:
    ran = [p for p in phases if p.ran]
    slower, faster = [p for p in ran if p.slower], [p for p in ran if not p.slower]
    if not ran:
        return OpVerdict(op=entry.op, decision="none", reason="its kernel served no call in the profiled phases",
                         phases=phases)
    if not slower:
        return OpVerdict(op=entry.op, decision="keep", reason="; ".join(map(_figure, ran)), phases=phases)
    figures = "; ".join(map(_figure, slower))
    if not faster:
        return OpVerdict(op=entry.op, decision="disable", reason=f"slower in place than SGLang's op: {figures}",
                         phases=phases)
    slow_rows = [r for p in slower for r in p.rows]
    fast_rows = [r for p in faster for r in p.rows]
    if max(slow_rows) < min(fast_rows):
        return OpVerdict(op=entry.op, decision="defer", reason=f"below {min(fast_rows)} tokens: {figures}",
                         phases=phases)
    if min(slow_rows) > max(fast_rows):
        return OpVerdict(op=entry.op, decision="defer", reason=f"above {max(fast_rows)} tokens: {figures}",
                         phases=phases)
    return OpVerdict(op=entry.op, decision="disable", reason=f"slower in place at sizes between faster ones: {figures}",
                     phases=phases)


def _moved_defer(entry: PatchEntry, verdict: OpVerdict, evidence: str) -> Defer:
    slower = [p for p in verdict.phases if p.slower]
    faster = [p for p in verdict.phases if p.ran and not p.slower]
    old = entry.manifest.defer
    update: dict = {"evidence": f"{verdict.reason} ({evidence})" + (f"; before: {old.evidence}" if old else "")}
    if max(r for p in slower for r in p.rows) < min(r for p in faster for r in p.rows):
        update["below_rows"] = min(r for p in faster for r in p.rows)
    else:
        smallest = min(entry.spec.call_bytes(s, d) for p in slower for s, d in p.calls)
        update["min_bytes"] = min(smallest, old.min_bytes) if old and old.min_bytes else smallest
    if old is not None:
        return old.model_copy(update=update)
    return Defer(dtypes=sorted({d for p in slower for _, d in p.calls}), **update)


def verdicts(store: PatchStore, deltas: list[PhaseDelta], after: Profile) -> list[OpVerdict]:
    """One verdict per enabled CUDA patch that the patched profile shows."""
    return [decide(e, phase_verdicts(e, deltas, after)) for e in store.enabled() if e.manifest.kind == "cuda"]


def apply(store: PatchStore, found: list[OpVerdict], evidence: str) -> list[str]:
    """Write each verdict into its patch's manifest (figures always; disabled or defer moved where slower);
    returns one line per change."""
    lines = []
    for v in found:
        if v.decision == "none":
            continue
        entry = store.get(v.op)
        figures = [InPlace(phase=p.phase, rows=p.rows, before_us=p.before_us, after_us=p.after_us,
                           change_pct=p.change_pct, evidence=evidence) for p in v.phases if p.ran]
        update: dict = {"inplace": figures}
        if v.decision == "disable":
            update.update(enabled=False, off_reason=f"{v.reason} ({evidence})")
        elif v.decision == "defer":
            update["defer"] = _moved_defer(entry, v, evidence)
        entry.manifest.model_copy(update=update).save(entry.folder)
        lines.append(f"{v.op}: {v.decision} ({v.reason}) -> {entry.folder}")
    return lines
