"""One memory budget for every evaluation on a GPU: a ledger file per GPU in the cache folder.

Each evaluation sizes its argument sets (the checks' and the timed launches' rotation, the sandwich's GEMM
operands) from a grant, not from the free memory alone: several evaluations started together all see the
same free memory, and each taking a fraction of it ran nine of them on one GPU out of memory. The ledger
(`cache_dir()/memory/<GPU uuid>.json`, guarded by an flock on a sibling lock file) lists the evaluation
processes that joined on that GPU and the bytes each one holds now. A grant is at most

  - the caller's want, and `TIMING_MEMORY_CAP`;
  - an equal share of `GPU_MEMORY_SHARE` x the GPU's memory among the processes joined there;
  - what that share leaves after the other processes' claims;
  - `TIMING_MEMORY_FRACTION` x the free memory (another program on the GPU, SGLang itself).

A process that died without leaving is dropped at the next look (its pid is gone). Pids are only meaningful on
one host (one PID namespace): evaluations in containers that share a GPU but not a PID namespace each see
only their own.
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from astra_sglang.harness.limits import GPU_MEMORY_SHARE, TIMING_MEMORY_CAP, TIMING_MEMORY_FRACTION


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@dataclass
class MemoryLedger:
    key: str
    """The GPU's identity (its UUID: CUDA_VISIBLE_DEVICES renumbers devices per process)."""
    total: int
    """The GPU's memory in bytes."""
    folder: Path
    pid: int = field(default_factory=os.getpid)

    @property
    def path(self) -> Path:
        return self.folder / f"{self.key}.json"

    @contextmanager
    def _locked(self) -> Iterator[dict]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"{self.key}.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = json.loads(self.path.read_text()) if self.path.is_file() else {}
            except ValueError:  # a torn write of a killed process: start over
                state = {}
            sessions = {int(p): 1 for p in state.get("sessions", {}) if _alive(int(p))}
            claims = {int(p): int(b) for p, b in state.get("claims", {}).items() if int(p) in sessions}
            state = {"sessions": sessions, "claims": claims}
            yield state
            staged = self.path.with_suffix(f".{self.pid}.tmp")
            staged.write_text(json.dumps({"sessions": {str(p): 1 for p in state["sessions"]},
                                          "claims": {str(p): b for p, b in state["claims"].items()}}))
            os.replace(staged, self.path)

    def join(self) -> None:
        with self._locked() as state:
            state["sessions"][self.pid] = 1

    def leave(self) -> None:
        with self._locked() as state:
            state["sessions"].pop(self.pid, None)
            state["claims"].pop(self.pid, None)

    def sessions(self) -> int:
        with self._locked() as state:
            return len(state["sessions"])

    def grant(self, want: int, free: int, least: int = 0) -> int:
        """Claim up to `want` bytes (replacing this process's earlier claim) and return the grant: the module
        docstring's bounds, but never less than `least` (what the caller cannot do without)."""
        with self._locked() as state:
            state["sessions"][self.pid] = 1
            share = GPU_MEMORY_SHARE * self.total
            others = sum(b for p, b in state["claims"].items() if p != self.pid)
            fair = share / max(1, len(state["sessions"]))
            granted = int(max(least, min(want, TIMING_MEMORY_CAP, fair, share - others,
                                         TIMING_MEMORY_FRACTION * free)))
            state["claims"][self.pid] = granted
            return granted

    def release(self) -> None:
        with self._locked() as state:
            state["claims"].pop(self.pid, None)

    @contextmanager
    def claim(self, want: int, free: int, least: int = 0) -> Iterator[int]:
        """`grant` for the duration of a with-block (one shape's argument sets)."""
        granted = self.grant(want, free, least)
        try:
            yield granted
        finally:
            self.release()


def device_ledger(device) -> MemoryLedger:
    """The ledger of a CUDA device, in the build cache's folder."""
    import torch

    from astra_sglang.paths import cache_dir

    props = torch.cuda.get_device_properties(device)
    key = str(getattr(props, "uuid", "")) or f"{props.name}-{getattr(props, 'pci_bus_id', 0)}".replace(" ", "_")
    return MemoryLedger(key=key.replace("/", "_"), total=int(props.total_memory), folder=cache_dir() / "memory")
