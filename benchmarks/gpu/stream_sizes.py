"""What a streaming kernel reaches at each size: the reference `bounds_table.py --stream` compares with.

A kernel whose every store waits only on its own loads (stream_probe.cu: READS 16-byte loads and one store
per vector, no math) is timed like every harness evaluation: CUDA-graph replay, inputs rotated so each
replay is L2 cold, in the same process as the SM-copy roofline. At each size the configurations (loads per
store, threads per block, vectors per thread) are interleaved and each one's median is kept; the best is
what that size allows a kernel with no dependency chain, and a norm, merge or silu that would need more than
it to run 1.32x faster than SGLang's is bounded by its size. Sessions 6-7 used silu_and_mul's own rows for
this, which left silu itself with no reference.

Usage (GPU machine, repo root, after `source benchmarks/gpu/setup.sh`):
    python3 benchmarks/gpu/stream_sizes.py OUTDIR [MIN_BYTES MAX_BYTES]
    python3 benchmarks/gpu/stream_sizes.py --table OUTDIR/stream.jsonl   (the printout again, anywhere)
Writes OUTDIR/stream.jsonl (one row per size and configuration) and prints, per size, the best configuration
of each kind (loads per store) with PDL and without it.
"""
from __future__ import annotations

import ctypes
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from astra_sglang.harness.build import build_library
from astra_sglang.harness.timing import Ceilings, interleaved, rotation_sets
from astra_sglang.paths import templates_dir

READS = (1, 2)
THREADS = (128, 256, 512)
VPTS = (1, 2, 4)
PDLS = (0, 1)  # the shipped kernels launch with PDL; call 1 of session 8 ran without it (~0.5 us more per launch)
STEPS_PER_OCTAVE = 4
QUANTUM = 96  # bytes moved: whole 16-byte vectors for both READS 1 (32 per vector) and READS 2 (48)


@dataclass
class StreamRow:
    bytes: int  # moved: read + written
    reads: int
    threads: int
    vpt: int
    pdl: int
    median_us: float
    pct_roofline: float  # of the same process's SM-copy roofline
    roofline_gbps: float


def sizes(lo: int, hi: int) -> list[int]:
    steps = int(math.log2(hi / lo) * STEPS_PER_OCTAVE) + 1
    return sorted({max(QUANTUM, round(lo * 2 ** (k / STEPS_PER_OCTAVE) / QUANTUM) * QUANTUM) for k in range(steps)})


def measure(lib, nbytes: int, roofline: float) -> list[StreamRow]:
    n1, n2 = nbytes // 32, nbytes // 48
    sets = rotation_sets(nbytes)
    bufs = [(torch.empty(n1 * 16, dtype=torch.uint8, device="cuda").random_(0, 255),
             torch.empty(n2 * 16, dtype=torch.uint8, device="cuda").random_(0, 255),
             torch.empty(n1 * 16, dtype=torch.uint8, device="cuda")) for _ in range(sets)]

    def fn(reads: int, threads: int, vpt: int, pdl: int):
        n = n1 if reads == 1 else n2
        return lambda i: lib.astra_stream(bufs[i][2].data_ptr(), bufs[i][0].data_ptr(), bufs[i][1].data_ptr(), n,
                                          reads, threads, vpt, pdl, torch.cuda.current_stream().cuda_stream)

    cfgs = [(r, t, v, p) for r in READS for t in THREADS for v in VPTS for p in PDLS]
    samples = interleaved({cfg: fn(*cfg) for cfg in cfgs}, sets)
    rows = []
    for (r, t, v, p), us in samples.items():
        med = statistics.median(us)
        rows.append(StreamRow(nbytes, r, t, v, p, med, 100.0 * nbytes / med / 1e3 / roofline, roofline))
    return rows


def best(rows: list[StreamRow]) -> dict[tuple[int, int], StreamRow]:
    """(loads per store, PDL) -> the fastest configuration among `rows` (one size)."""
    out: dict[tuple[int, int], StreamRow] = {}
    for r in rows:
        if (r.reads, r.pdl) not in out or r.median_us < out[(r.reads, r.pdl)].median_us:
            out[(r.reads, r.pdl)] = r
    return dict(sorted(out.items()))


def line(nbytes: int, rows: list[StreamRow]) -> str:
    return f"STREAM {nbytes / 1e6:9.3f} MB " + "  ".join(
        f"reads{reads}{' pdl' if pdl else '    '} {b.median_us:8.2f} us {b.pct_roofline:5.1f}% ({b.threads}x{b.vpt})"
        for (reads, pdl), b in best(rows).items())


def table(path: Path) -> None:
    by_size: dict[int, list[StreamRow]] = {}
    for text in path.read_text().splitlines():
        r = json.loads(text)
        r.setdefault("pdl", 0)  # session 8 call 1 ran without PDL and without the field
        by_size.setdefault(r["bytes"], []).append(StreamRow(**r))
    for nbytes, rows in sorted(by_size.items()):
        print(line(nbytes, rows))


def main(out: Path, lo: int = 1 << 15, hi: int = 1 << 29) -> None:
    out.mkdir(parents=True, exist_ok=True)
    probe = build_library(Path(__file__).with_name("stream_probe.cu"))
    probes = build_library(templates_dir() / "probes.cu")
    if not (probe.ok and probes.ok):
        raise SystemExit(f"stream_sizes: build failed: {(probe.log if not probe.ok else probes.log)[-400:]}")
    lib = ctypes.CDLL(probe.library)
    lib.astra_stream.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] + [ctypes.c_int] * 4 + [ctypes.c_void_p]
    ceilings = Ceilings(probes.library)
    print(f"roofline {ceilings.roofline_gbps:.0f} GB/s, empty kernel {ceilings.empty_us:.2f} us", flush=True)
    with open(out / "stream.jsonl", "a") as fh:
        for nbytes in sizes(lo, hi):
            rows = measure(lib, nbytes, ceilings.roofline_gbps)
            fh.writelines(json.dumps(asdict(r)) + "\n" for r in rows)
            fh.flush()
            print(line(nbytes, rows), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        table(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:4]))
