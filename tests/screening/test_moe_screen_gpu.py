"""Fused MoE's screening launch on a GPU with SGLang: SGLang's real fused_moe_kernel compiled ahead on the CPU
processes is found by the worker's launch (every compile a hit), each config is checked against the fp32 reference
and timed, at two batch sizes (some specializations change with the batch size), and a kernel variant plugs in by
name. Needs SGLang importable (the runtime kit on the GPU machine)."""
from __future__ import annotations

import pytest

from astra_sglang.optimize.tuner.screen_pool import ScreenPool
from astra_sglang.optimize.tuner.screen_worker_handle import WorkerSettings

pytestmark = pytest.mark.gpu
CONFIGS = ["m16n64k64g1w4s3", "m16n128k128g1w4s4", "m32n64k128g16w4s3", "m64n128k64g1w8s3", "m16n32k64g1wdsd",
           "m64n64k32g8wdsd", "m16n64k64g1w4s3+same:SPLIT_K=1"]
PICK_1 = "m16n32k64g1wdsd"
"""SGLang's default config at batch 1 for 8 experts (get_default_config: M <= E), Triton's default warps/stages."""


def test_real_kernel_compiled_ahead_checked_and_timed(tmp_path):
    pytest.importorskip("sglang")
    settings = WorkerSettings(target="astra_sglang.optimize.tuner.moe_screen:MoeScreenLaunch", options={
        "experts": 8, "inter": 256, "hidden": 512, "topk": 2,
        "variants": {"same": "variant_same:fused_experts_same"}})
    with ScreenPool(settings, ["0"], tmp_path / "triton", compile_workers=4) as pool:
        found = pool.record(1, CONFIGS)
        first, stats1 = pool.screen(1, CONFIGS, found=found)
        second, stats2 = pool.screen(64, CONFIGS)
    for results, stats in ((first, stats1), (second, stats2)):
        assert all(r.ok and r.error < 1.0 for r in results[:-1]), [(r.config, r.stage, r.reason) for r in results]
        assert stats.compile_failed == 0 and stats.misses == 0  # the worker only loaded what the pool compiled
    # two kernels (gate/up, down) a plain config, none shared with another config, except SGLang's pick: the
    # worker's prepare() runs it once in-process (its kernels in memory: nothing to record). At batch 1 with 8
    # experts SGLang picks its default m16n32k64g1 (Triton's warps and stages), one of CONFIGS: 10 jobs, as an
    # H200 run compiled. On failure, each config's kernels by name, digest and specialization.
    kernels = {c: [(j.qualname, j.digest(), j.data[:600]) for j in found.get(c, [])] for c in CONFIGS[:-1]}
    assert kernels[PICK_1] == [] and all(len(k) == 2 for c, k in kernels.items() if c != PICK_1), kernels
    assert len({d for k in kernels.values() for _, d, _ in k}) == 2 * 5, kernels
    assert stats1.compile_jobs == 2 * 5 and stats1.hits >= stats1.compile_jobs, (stats1, kernels)
    assert first[-1].stage in ("done", "slow") and first[-1].reason == ""  # the variant ran, its knob passed
