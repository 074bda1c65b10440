"""Per paper shape: what stands between a shipped kernel and the 1.32x target, from committed data only.

Usage: python3 benchmarks/bounds_table.py KERNELS_JSONL NCU_JSONL [DTYPE] [STREAM_JSONL...]
           [--kernels JSONL...] [--ncu JSONL...] [--probe JSONL...] [--stream-probe JSONL...] [--set SET]
           [--label LABEL...]
--kernels / --ncu: more rows, which replace those of the same op and shape (a later run of one op's new build).
--set: the spec shape set (default paper; e.g. models); --label: only harness rows of these candidate labels
(a variants file holds several, e.g. "models:shipped").
The ncu columns are only as current as the ncu files: join rows and facts of the same builds.
"streaming here" is what a kernel with no dependencies between its loads and stores reaches at the same
byte count: the better of ours and SGLang's silu_and_mul (read 2, write 1, nothing else) in KERNELS_JSONL
and STREAM_JSONL (e.g. a model-set run), as % of its run's copy roofline, interpolated in log(bytes). A small
copy is below the roofline too (launch, ramp, one wave's tail); a norm or merge that would need more than
that at its size to reach 1.32x is bounded by its size, not by its code. This is an empirical reference,
not a proof: a better streaming kernel would move it. --stream-probe adds the rows of
`benchmarks/gpu/stream_sizes.py` (a no-math load/store kernel, the best of its configurations per size) to
that reference; silu_and_mul, the reference itself otherwise, is measured against those rows only.
Joins the harness rows (CUDA-graph replay, L2 cold, interleaved with SGLang's op; same-run SM-copy roofline
and empty-kernel time) with Nsight Compute facts of the same kernels (one launch each, ncu's own clock and
cache control), and prints a markdown table. "at 1.32x" is the copy-roofline fraction a kernel would need
to run 1.32x faster than SGLang's: above 100% the target is past the bandwidth bound; "x empty" is our
time over the empty kernel in a graph, the launch floor that small shapes sit on.
"probe" (--probe, `variants.py` plans open-probe / tie) is the best speedup over SGLang, in its own run, of
the norm kernels with their row reduction cut to one barrier (BAR.RED) over the configurations tried: a norm
of that shape cannot get past it, since every output waits for its row's loads. Below 1.32x the bound is
the row dependency; at or above it, the reduction is what is left.
"""
from __future__ import annotations

import argparse
import json
import math

from astra_sglang.specs.registry import get_spec, resolve_shapes

TARGET = 1.32
LATENCY_BYTES = 8 << 20  # below ~8 MB a 4 TB/s kernel finishes in ~2 us: launch + DRAM latency dominate
OPS = ("silu_and_mul", "fused_add_rmsnorm", "rmsnorm", "merge_attn_states_lse")


def ncu_value(facts: dict, needle: str) -> float | None:
    return next((v for k, v in facts.items() if k.endswith(needle) or needle + " (" in k), None)


def shape_rows(paths: list[str], dtype: str):
    """The timed harness rows of `dtype` in JSONL files, in file order."""
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            if r.get("type") == "shape" and r.get("speedup") and r["dtype"] == dtype:
                yield r


def load(kernels: list[str], ncu: list[str], dtype: str, labels: tuple[str, ...] = ()):
    """Harness rows (of `labels`' candidates, or all) and ncu facts by (op, shape[, side]); a later file's row
    replaces an earlier one's."""
    rows = {(r["kernel"], tuple(r["shape"])): r for r in shape_rows(kernels, dtype)
            if not labels or r.get("candidate_label") in labels}
    facts = {}
    for path in ncu:
        for line in open(path):
            r = json.loads(line)
            facts[(r["op"], tuple(r["shape"]), r["side"])] = r["facts"]
    return rows, facts


def probe_best(paths: list[str], dtype: str) -> dict[tuple[str, tuple], float]:
    """(op, shape) -> the best speedup of any ":probe-" variant row (the reduction cut to one barrier)."""
    best: dict[tuple[str, tuple], float] = {}
    for r in shape_rows(paths, dtype):
        if ":probe-" in (r.get("candidate_label") or ""):
            key = (r["kernel"], tuple(r["shape"]))
            best[key] = max(best.get(key, 0.0), r["speedup"])
    return best


def streaming_points(paths: list[str], dtype: str, probe_paths: list[str] = ()) -> list[tuple[float, float]]:
    """(log bytes, best % of the copy roofline) of silu_and_mul rows, ours or SGLang's, and of stream_sizes.py
    rows (any configuration), sorted by size."""
    best: dict[int, float] = {}
    for r in shape_rows(paths, dtype):
        if r["kernel"] == "silu_and_mul":
            roof = r["min_bytes"] / r["roofline_gbps"] / 1e3  # us at the copy roofline
            pct = 100 * roof / min(r["candidate"]["median_us"], r["baseline"]["median_us"])
            best[r["min_bytes"]] = max(best.get(r["min_bytes"], 0.0), pct)
    for path in probe_paths:
        for line in open(path):
            r = json.loads(line)
            best[r["bytes"]] = max(best.get(r["bytes"], 0.0), r["pct_roofline"])
    return sorted((math.log(b), pct) for b, pct in best.items())


def streaming_at(points: list[tuple[float, float]], nbytes: int) -> float | None:
    """Linear in log(bytes) between the two nearest sizes; None outside the measured range."""
    x = math.log(nbytes)
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def bound(r: dict, needed_pct: float, streaming_pct: float | None = None, probe: float | None = None) -> str:
    if r["speedup"] >= TARGET:
        return "none: 1.32x met"
    if needed_pct > 100:
        return "bandwidth: 1.32x is past the copy roofline"
    if r["kernel"] == "silu_and_mul" and r["min_bytes"] < LATENCY_BYTES:
        return "latency (launch + one cold DRAM round trip)"
    if streaming_pct is not None and needed_pct > streaming_pct:
        return "size: 1.32x needs more than a streaming kernel reaches at this size"
    if probe is not None and probe < TARGET:
        return "row dependency: with its reduction cut to one barrier the kernel still misses 1.32x"
    if r["kernel"] == "silu_and_mul":  # the stream probe gets there and silu does not
        return "open"
    latency = " (latency range)" if r["min_bytes"] < LATENCY_BYTES else ""
    if probe is not None:
        return "open: the row reduction costs the rest (the barrier-only kernel gets there)" + latency
    return "open: a streaming kernel gets there at this size" + latency


def main(kernels: list[str], ncu: list[str], dtype: str = "bfloat16", stream: tuple[str, ...] = (),
         probes: tuple[str, ...] = (), shape_set: str = "paper", labels: tuple[str, ...] = (),
         stream_probe: tuple[str, ...] = ()) -> None:
    rows, facts = load(kernels, ncu, dtype, labels)
    points = streaming_points([*kernels, *stream], dtype, list(stream_probe))
    # silu is the streaming reference itself: it is measured against the no-math probe alone
    probe_points = streaming_points([], dtype, list(stream_probe))
    probe = probe_best(list(probes), dtype)
    print("| op | shape | MB moved | ours us | SGLang us | speedup | % copy roofline | at 1.32x | streaming here | "
          "probe | x empty | ncu DRAM % ours / SGLang | ncu occupancy % ours / SGLang | regs ours / SGLang | bound |")
    print("|---" * 15 + "|")
    for op in OPS:
        for shape in resolve_shapes(get_spec(op), shape_set):
            r = rows.get((op, tuple(shape)))
            if r is None:
                continue
            ours, base = r["candidate"]["median_us"], r["baseline"]["median_us"]
            pct = r.get("pct_roofline") or 0.0
            needed = pct * ours / (base / TARGET)  # the roofline fraction at base / 1.32 us
            f_o, f_s = facts.get((op, tuple(shape), "ours"), {}), facts.get((op, tuple(shape), "SGLang"), {})

            def pair(needle: str) -> str:
                a, b = ncu_value(f_o, needle), ncu_value(f_s, needle)
                return "/".join("-" if v is None else f"{v:.0f}" for v in (a, b))

            streaming = shown = streaming_at(points, r["min_bytes"])
            if op == "silu_and_mul":  # its own rows are no bound on it; without probe rows the column is shown only
                streaming = streaming_at(probe_points, r["min_bytes"])
                shown = streaming if stream_probe else shown
            p = probe.get((op, tuple(shape)))
            print(f"| {op} | {'x'.join(map(str, shape))} | {r['min_bytes'] / 1e6:.1f} | {ours:.2f} | {base:.2f} | "
                  f"{r['speedup']:.3f} | {pct:.0f}% | {needed:.0f}% | "
                  f"{'-' if shown is None else f'{shown:.0f}%'} | {'-' if p is None else f'{p:.3f}'} | "
                  f"{ours / r['empty_kernel_us']:.1f} | "
                  f"{pair(': DRAM Throughput')} | {pair(': Achieved Occupancy')} | {pair(': Registers Per Thread')} | "
                  f"{bound(r, needed, streaming, p)} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernels_jsonl")
    ap.add_argument("ncu_jsonl")
    ap.add_argument("dtype", nargs="?", default="bfloat16")
    ap.add_argument("stream_jsonl", nargs="*", help="more silu_and_mul rows for the streaming reference")
    ap.add_argument("--kernels", nargs="+", default=[], help="more harness rows, replacing those of the same shape")
    ap.add_argument("--ncu", nargs="+", default=[], help="more ncu facts, replacing those of the same shape")
    ap.add_argument("--probe", nargs="+", default=[], help="variants rows with :probe- labels")
    ap.add_argument("--stream-probe", nargs="+", default=[], help="stream_sizes.py rows (stream.jsonl)")
    ap.add_argument("--set", default="paper", help="spec shape set: paper, models, ...")
    ap.add_argument("--label", nargs="+", default=[], help="only harness rows with these candidate labels")
    a = ap.parse_args()
    main([a.kernels_jsonl, *a.kernels], [a.ncu_jsonl, *a.ncu], a.dtype, tuple(a.stream_jsonl), tuple(a.probe),
         a.set, tuple(a.label), tuple(a.stream_probe))
