"""Recording the calls of SGLang functions in a live server (`launch --record-calls`), as `onboard --shapes` input.

Each named function is wrapped in every server process (the same import hook / plugin that installs the
patches); a call whose argument shapes, dtypes and scalar values were not seen before is added to the
function's JSON file, a list of `CallRecord`s. Processes merge into one file under an exclusive file lock.
Recording is bounded: after `limit` distinct calls a function's wrapper only forwards. A recording failure
never reaches the server: the call goes on unrecorded.
"""
from __future__ import annotations

import fcntl
import functools
import inspect
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.patching.targets import rebind, resolve
from astra_sglang.patchset.manifest import Target
from astra_sglang.specs.calls import CallRecord, TensorCall

log = logging.getLogger("astra_sglang.patching")

ENV_RECORD = "ASTRA_SGLANG_RECORD_CALLS"
"""Comma-separated module:function names to record."""
ENV_RECORD_OUT = "ASTRA_SGLANG_RECORD_OUT"
ENV_RECORD_LIMIT = "ASTRA_SGLANG_RECORD_LIMIT"
DEFAULT_LIMIT = 64
SCALARS = (bool, int, float)


def parse_targets(text: str) -> list[Target]:
    targets = [Target.parse(t.strip()) for t in text.split(",") if t.strip()]
    if not targets:
        raise AstraError("--record-calls names no function: give MODULE:FUNC[,MODULE:FUNC...]")
    return targets


def out_files(targets: list[Target], out: Path) -> dict[Target, Path]:
    """One function: `out` itself. Several: `<stem>.<function><suffix>` beside it (module-qualified where two
    functions share a name), each one function's calls, as `onboard --shapes` reads them."""
    if len(targets) == 1:
        return {targets[0]: out}
    attrs = [t.attr for t in targets]
    names = {t: t.attr if attrs.count(t.attr) == 1 else f"{t.module}.{t.attr}" for t in targets}
    return {t: out.with_name(f"{out.stem}.{names[t]}{out.suffix or '.json'}") for t in targets}


def merge_call(path: Path, call: CallRecord, limit: int) -> int:
    """Add `call` to the JSON list in `path` unless there or the list is full; returns the list's length.
    An exclusive lock on the file itself serializes the server's processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(0)
            text = f.read()
            calls = json.loads(text) if text.strip() else []
            record = call.dump()
            if record not in calls and len(calls) < limit:
                calls.append(record)
                # onboard names the dims after the first call: the one giving the most tensors goes first
                calls.sort(key=lambda c: -len(c["tensors"]))
                f.seek(0)
                f.truncate()
                f.write(json.dumps(calls, indent=1))
                f.flush()
            return len(calls)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass
class CallRecorder:
    """The distinct calls of one function, written to `path` as they are first seen."""

    target: Target
    path: Path
    limit: int = DEFAULT_LIMIT
    full: bool = False
    seen: set = field(default_factory=set)
    _names: list[str] | None = None

    def record(self, fn: Callable, args: tuple, kwargs: dict, result: Any = None) -> None:
        """Add the call (made with `args`, `kwargs`, having returned `result`) unless seen before."""
        if self.full:
            return
        try:
            key, call = self._describe(fn, args, kwargs, result)
            if key is None or key in self.seen:
                return
            self.seen.add(key)
            self.full = merge_call(self.path, call, self.limit) >= self.limit or len(self.seen) >= self.limit
        except Exception as exc:  # noqa: BLE001 - recording must never fail the server's call
            self.full = True
            log.warning("astra-sglang: recording %s stopped: %s", self.target, exc)

    def _describe(self, fn: Callable, args: tuple, kwargs: dict, result: Any = None):
        """(key, CallRecord) of one call: tensors by shape and dtype, bool/int/float by value, the tensors it
        returned; the key is built from plain tuples so that a call seen before costs no record objects."""
        if self._names is None:
            try:
                self._names = [p for p in inspect.signature(fn).parameters if p != "self"]
            except (TypeError, ValueError):
                self._names = []
        torch = sys.modules.get("torch")
        bound = {(self._names[i] if i < len(self._names) else f"arg{i}"): v for i, v in enumerate(args)}
        bound.update(kwargs)
        tensors, scalars = [], []
        for name, value in bound.items():
            if torch is not None and isinstance(value, torch.Tensor):
                tensors.append((name, tuple(value.shape), str(value.dtype).removeprefix("torch.")))
            elif type(value) in SCALARS:
                scalars.append((name, value))
        if not tensors:
            return None, None
        key = (tuple(tensors), tuple(scalars))
        if key in self.seen:
            return key, None
        values = {name: value for name, value in bound.items() if torch is not None and isinstance(value, torch.Tensor)}
        returned = result if isinstance(result, (tuple, list)) else (result,)
        call = CallRecord(tensors={n: _tensor_call(values[n], torch) for n, _, _ in tensors}, scalars=dict(scalars),
                          returns=[_tensor_call(t, torch) for t in returned
                                   if torch is not None and isinstance(t, torch.Tensor)])
        return key, call

    def wrap(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def recorded(*args, **kwargs):
            result = original(*args, **kwargs)
            self.record(original, args, kwargs, result)
            return result

        recorded.__astra_recorder__ = self
        return recorded

    def around(self, original: Callable, *args, **kwargs):
        """SGLang HookRegistry AROUND hook."""
        result = original(*args, **kwargs)
        self.record(original, args, kwargs, result)
        return result


INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")
RANGE_MAX_ELEMENTS = 1 << 20
"""Integer tensors up to this size get their value range recorded (one small reduction, once per distinct call)."""


def _tensor_call(t, torch) -> TensorCall:
    dtype = str(t.dtype).removeprefix("torch.")
    span = None
    if dtype in INT_DTYPES and 0 < t.numel() <= RANGE_MAX_ELEMENTS and not _capturing(t, torch):
        span = (int(t.min()), int(t.max()))
    return TensorCall(shape=list(t.shape), dtype=dtype, range=span)


def _capturing(t, torch) -> bool:
    """Inside CUDA-graph capture reading a value would break the capture: ranges are left out there."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


class Recording:
    """This process's recorders, one per named function."""

    def __init__(self, targets: list[Target], out: Path, limit: int = DEFAULT_LIMIT):
        self.out, self.limit = out, limit
        self.recorders = {t: CallRecorder(t, path, limit) for t, path in out_files(targets, out).items()}
        self.hooks_registered = False

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "Recording | None":
        env = os.environ if environ is None else environ
        if not env.get(ENV_RECORD):
            return None
        out = Path(env.get(ENV_RECORD_OUT) or "astra-calls.json")
        return cls(parse_targets(env[ENV_RECORD]), out, int(env.get(ENV_RECORD_LIMIT) or DEFAULT_LIMIT))

    def to_env(self) -> dict[str, str]:
        return {ENV_RECORD: ",".join(map(str, self.recorders)), ENV_RECORD_OUT: str(self.out),
                ENV_RECORD_LIMIT: str(self.limit)}

    @property
    def files(self) -> list[Path]:
        return [r.path for r in self.recorders.values()]

    @property
    def modules(self) -> set[str]:
        return {t.module for t in self.recorders}

    def install(self, target: Target) -> None:
        """Rebind `target` (and every imported copy) to its recording wrapper; once per process."""
        original = resolve(target)
        if getattr(original, "__astra_recorder__", None) is not None:
            return
        rebind(target, original, self.recorders[target].wrap(original))

    def patch_module(self, module: str) -> None:
        """Import hook callback: wrap the named functions that live in `module`, just imported."""
        for target in self.recorders:
            if target.module == module:
                self.install(target)

    def install_all(self) -> None:
        for target in self.recorders:
            self.install(target)

    def register_hooks(self) -> int:
        """Plugin mechanism: one AROUND hook per function."""
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        if self.hooks_registered:
            return 0
        self.hooks_registered = True
        for target, recorder in self.recorders.items():
            HookRegistry.register(target.dotted, recorder.around, HookType.AROUND)
        return len(self.recorders)


_current: Recording | None = None


def ensure_from_env() -> Recording | None:
    """This process's Recording, from the environment `launch` set; None when nothing is recorded."""
    global _current
    if _current is None:
        _current = Recording.from_env()
    return _current


def reset() -> None:
    global _current
    _current = None
