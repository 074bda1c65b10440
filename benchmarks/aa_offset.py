"""Why the second of two identical SGLang servers on one GPU ran slower (H100, 2026-11-25: -14% output
throughput, +31% ITL, mean TTFT not worse, in both round orders): the test.

Read from SGLang 0.5.17's code: with --max-total-tokens and --cuda-graph-max-bs-decode fixed, the settings it
derives from the memory a server finds at start resolve alike for the second server (the KV pool is capped by
the token count, max_running_requests follows the pool, chunked prefill and graph batch sizes follow the GPU's
total memory, not its free memory), so a setting is the less likely cause. The slower ITL with TTFT unchanged
points at decode, which replays CUDA graphs, and not at prefill, which runs eager: the candidates left are the
second server's graphs running slower on the GPU (memory placement, a second CUDA context) or its host loop
running slower. This script tells them apart:
- both servers up on one GPU, one after the other, their /server_info compared (serving/settings.py);
- each server's decode steps profiled under the same load, one at a time (the other idle): GPU kernel time per
  step against the step's host wall (median and mean) and its launch calls (benchmarks/step_walls.py).
If the second server's GPU time per step is higher, the cause is on the GPU; if only its wall is, on the host.
Usage: python3 benchmarks/aa_offset.py OUT --model M [--gpu 0] [--steps 15] [--port 30141] -- SERVER_ARGS
Writes OUT/offset.json, OUT/settings-diff.json, OUT/server-{first,second}.log and the traces; prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_walls import step_times  # noqa: E402

from astra_sglang.profile.build import build_profile  # noqa: E402
from astra_sglang.profile.drive import WORKLOADS, Server, profile_load  # noqa: E402
from astra_sglang.serving import server, settings  # noqa: E402

ORDER = ("first", "second")


def decode_figures(traces: list[Path]) -> dict:
    """GPU time per decode step, the step's host wall (mean, median), and its time in launch calls."""
    phase = build_profile({"decode": traces}, None, None).phase("decode")
    steps = [t for f in traces for t in step_times(f) if t.phase == "decode"]
    return {"steps": phase.steps if phase else 0, "tokens_per_step": phase.tokens_per_step if phase else 0,
            "gpu_us_per_step": phase.gpu_us_per_step if phase else None,
            "wall_mean_us": statistics.fmean(t.wall_us for t in steps) if steps else None,
            "wall_median_us": statistics.median(t.wall_us for t in steps) if steps else None,
            "launch_median_us": statistics.median(t.launch_us for t in steps) if steps else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", required=True)
    parser.add_argument("--gpu", default="0")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--port", type=int, default=30141)
    parser.add_argument("--health-timeout", type=float, default=400.0)
    parser.add_argument("server_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    extra = [a for a in args.server_args if a != "--"]
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**server.strip_patch_env(dict(os.environ)), "CUDA_VISIBLE_DEVICES": args.gpu}
    procs, infos, result = [], {}, {}
    try:
        for k, name in enumerate(ORDER):  # one after the other: the second sizes itself beside the first
            port = args.port + k
            log = args.out / f"server-{name}.log"
            procs.append(server.start_server(server.server_command(args.model, port, None, extra), env, log))
            ready = server.wait_healthy(procs[-1], port, log, args.health_timeout)
            infos[name] = server.server_info(port)
            print(f"{name} server healthy after {ready:.0f} s", flush=True)
        diffs = settings.differences(infos["first"], infos["second"])
        settings.write(args.out, diffs, all(infos.values()))
        print(settings.summary(diffs, all(infos.values())), flush=True)
        for k, name in enumerate(ORDER):
            load = WORKLOADS["decode"]
            traces = profile_load(Server(url=f"http://127.0.0.1:{args.port + k}", model_path=args.model), load,
                                  args.out / "traces" / name, args.steps)
            result[name] = decode_figures(traces)
    finally:
        for proc in procs:
            server.stop_server(proc)
    (args.out / "offset.json").write_text(json.dumps({"settings_differences": [d.key for d in diffs],
                                                      **result}, indent=1) + "\n")
    print("server  steps  tokens/step  GPU us/step  wall mean us  wall median us  in launch calls us")
    for name in ORDER:
        r = result[name]
        print(f"{name:7} {r['steps']:5}  {r['tokens_per_step']:11.0f}  {r['gpu_us_per_step'] or 0:11.1f}  "
              f"{r['wall_mean_us'] or 0:12.1f}  {r['wall_median_us'] or 0:14.1f}  {r['launch_median_us'] or 0:18.1f}")
    first, second = result["first"], result["second"]
    if first["gpu_us_per_step"] and second["gpu_us_per_step"] and first["wall_median_us"]:
        gpu = 100 * (second["gpu_us_per_step"] / first["gpu_us_per_step"] - 1)
        wall = 100 * (second["wall_median_us"] / first["wall_median_us"] - 1)
        print(f"second vs first: GPU time a decode step {gpu:+.1f}%, host wall a step (median) {wall:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
