"""The GPUs of this host (one evaluation worker each) and the facts about them a planner can use.

Facts come from torch in a short-lived child process (the parent never holds a CUDA context of its own
while evaluations time on the GPUs); the memory bandwidth is the SM-copy roofline the harness measures in
every evaluation, which is what a kernel can reach. On a machine without a GPU the facts are whatever the
evaluation results say (the GPU's name, the roofline) plus the build architecture.

Run as `python -m astra_sglang.optimize.pool.devices` to print this host's facts as JSON.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from pydantic import BaseModel

from astra_sglang.harness.records import EvalResult

PROBE_TIMEOUT_S = 120


class GpuFacts(BaseModel):
    """What the planner is told about the GPU (None: not known on this machine)."""

    name: str = ""
    arch: str = ""
    """Build architecture, e.g. sm_90."""
    sm_count: int | None = None
    smem_per_block_kib: float | None = None
    """Largest shared memory a block can opt in to."""
    smem_per_sm_kib: float | None = None
    l2_mib: float | None = None
    memory_gib: float | None = None
    bandwidth_gbps: float | None = None
    """SM-copy roofline measured by the harness (read + write GB/s)."""
    empty_kernel_us: float | None = None
    """A launch's floor: an empty kernel in a CUDA graph, measured by the harness."""
    source: str = ""
    """torch (device properties), evaluation (results only) or both."""

    def with_results(self, results: list[EvalResult]) -> "GpuFacts":
        """Fill what the evaluations measured (the latest one with a roofline wins)."""
        timed = [r for r in results if r.roofline_gbps]
        if not timed:
            return self
        last = timed[-1]
        return self.model_copy(update={
            "name": self.name or last.gpu, "bandwidth_gbps": last.roofline_gbps,
            "empty_kernel_us": last.empty_kernel_us or self.empty_kernel_us,
            "source": "torch+evaluation" if self.source == "torch" else "evaluation"})


def visible_gpus(requested: str | None = None) -> list[str]:
    """GPU ids to put one evaluation worker on: `requested` ("0,1", or "none"), else CUDA_VISIBLE_DEVICES,
    else nvidia-smi's list; [] = no GPU."""
    if requested is not None:
        text = requested.strip()
        return [] if text.lower() in ("", "none") else [g.strip() for g in text.split(",") if g.strip()]
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30).stdout
    except (subprocess.TimeoutExpired, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip().isdigit()]


def probe(gpu: str | None = None) -> GpuFacts:
    """This host's GPU (or `gpu`'s), from torch in a child process; empty facts where there is none."""
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {})}
    try:
        proc = subprocess.run([sys.executable, "-m", "astra_sglang.optimize.pool.devices"], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return GpuFacts()
    try:
        return GpuFacts.model_validate_json(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return GpuFacts()


def _here() -> GpuFacts:
    try:
        import torch
    except ImportError:
        return GpuFacts()
    if not torch.cuda.is_available():
        return GpuFacts()
    p = torch.cuda.get_device_properties(0)
    kib = 1024.0
    return GpuFacts(name=p.name, arch=f"sm_{p.major}{p.minor}", sm_count=p.multi_processor_count,
                    smem_per_block_kib=getattr(p, "shared_memory_per_block_optin", 0) / kib or None,
                    smem_per_sm_kib=getattr(p, "shared_memory_per_multiprocessor", 0) / kib or None,
                    l2_mib=getattr(p, "L2_cache_size", 0) / kib / kib or None,
                    memory_gib=p.total_memory / kib ** 3, source="torch")


if __name__ == "__main__":
    print(json.dumps(_here().model_dump(mode="json")))
