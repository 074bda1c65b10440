"""The batch sizes a profiled server ran a Triton kernel at, from the traces a profile lists: what `tune`
tunes with `--profile` (fused MoE's config buckets, attention's sizes)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.profile.records import Profile
from astra_sglang.profile.trace import load
from astra_sglang.triton.moe.configs import BATCH_SIZES, nearest
from astra_sglang.triton.moe.shapes import KERNEL


def profile_buckets(path: str | Path, keys=BATCH_SIZES, kernel: str = KERNEL) -> list[tuple[int, int]]:
    """(bucket, calls) of every batch size the profile's traces ran `kernel` (default fused_moe_kernel) at, as
    the nearest of `keys` (SGLang's config keys; None: the step's own token count) to each step's tokens, most
    calls first. Reads the traces the profile lists (`astra-sglang profile` keeps them beside its JSON)."""
    path = Path(path)
    try:
        profile = Profile.model_validate_json(path.read_text())
    except (OSError, ValueError) as exc:
        raise AstraError(f"{path} is not an astra-sglang profile: {str(exc).splitlines()[0]}") from None
    counts: Counter = Counter()
    for listed in profile.traces:
        trace_path = Path(listed)
        if not trace_path.is_file():  # a profile folder moved since: its traces/<load>/ beside the JSON
            trace_path = path.parent / "traces" / trace_path.parent.name / trace_path.name
        if not trace_path.is_file():
            raise AstraError(f"{path} lists trace {listed}, which is not there (profile keeps them in traces/)")
        trace = load(trace_path)
        for launch in trace.kernels:
            if kernel in launch.name:
                step = trace.step_of(launch)
                if step is not None:
                    counts[nearest(keys, step.tokens) if keys else step.tokens] += 1
    if not counts:
        what = "not a MoE model, or another MoE backend" if kernel == KERNEL else "another attention backend?"
        raise AstraError(f"{path}: no {kernel} launch inside a scheduler step in its traces ({what})")
    return counts.most_common()
