"""The copy roofline and empty-kernel floor of this GPU, measured by the harness's probes in a process of
their own (`python -m astra_sglang.profile.ceilings` prints them as JSON), before the server takes the GPU."""
from __future__ import annotations

import json
import subprocess
import sys

from pydantic import BaseModel


class Ceilings(BaseModel):
    gpu: str
    roofline_gbps: float
    empty_us: float


def measure(timeout_s: float = 180.0) -> Ceilings | None:
    """None where there is no GPU or the probe fails (the headroom columns then stay empty)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "astra_sglang.profile.ceilings"], capture_output=True,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    lines = proc.stdout.strip().splitlines()
    return Ceilings.model_validate_json(lines[-1]) if proc.returncode == 0 and lines else None


def _main() -> int:
    import torch

    from astra_sglang.harness.build import build_library
    from astra_sglang.harness.timing import Ceilings as Probe
    from astra_sglang.paths import templates_dir

    if not torch.cuda.is_available():
        return 1
    probes = build_library(templates_dir() / "probes.cu")
    if not probes.ok:
        return 2
    with torch.cuda.stream(torch.cuda.Stream()):
        probe = Probe(probes.library)
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "roofline_gbps": probe.roofline_gbps,
                      "empty_us": probe.empty_us}))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
