"""In-situ cost of the patched ops inside a decode step: Llama MLP blocks captured in one CUDA graph, timed with
SGLang's ops, with ours (PDL on, as shipped), and with ours built with PDL off.

Why: the harness times an op alone, its graph replaying the op back to back on cold L2. In a decode step each
op sits between GEMMs: its input is the GEMM's fresh output (hot in L2), and with PDL our grid is launched while
the GEMM before it drains, its blocks waiting on griddepcontrol.wait. Neither effect shows in isolation, and a
serving A/B (session 9, call 2) measured B's ITL 6-44% higher in its two rounds. Here one replay is L layers of

    fused_add_rmsnorm(x, residual, w)  ->  h = x @ W_gu  ->  silu_and_mul(h, a)  ->  x = a @ W_down

at Llama-3-8B widths (4096 / 14336); "gemm-only" is the same graph without the two ops, so (variant - gemm-only)
is what the ops cost in place. Variants are timed interleaved, REPS rounds, median per replay.

Usage (GPU machine with sglang, sgl_kernel, flashinfer, torch; repo root):
    python3 benchmarks/gpu/sandwich.py OUTDIR [--tokens 1,16,64,128] [--layers 8]
Writes OUTDIR/sandwich.jsonl and OUTDIR/sandwich.md.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

from astra_sglang.patching.manifest import PatchManifest
from astra_sglang.patching.runtime import Runtime, RuntimeConfig
from astra_sglang.patching.targets import resolve

HIDDEN, INTER, EPS = 4096, 14336, 1e-5
OPS = ("fused_add_rmsnorm", "silu_and_mul")
REPLAYS, REPS = 50, 7


@dataclass
class Row:
    tokens: int
    layers: int
    variant: str
    us_per_layer: float  # median over REPS of (one replay / layers)
    ops_us_per_layer: float  # minus gemm-only: what the two ops cost in place
    gpu: str
    date: str


def op_fns(patches: Path) -> dict:
    """op -> the patched callable (SGLang's calling convention) for this patches folder."""
    runtime = Runtime(RuntimeConfig(patches))
    fns = {}
    for entry in runtime.entries:
        if entry.op in OPS:
            fns[entry.op] = runtime.op_for(entry, resolve(entry.targets[0])).fn
    return fns


def without_pdl(patches: Path, folder: Path) -> Path:
    """A copy of the patches whose kernels are built with ASTRA_DEFAULT_PDL=0."""
    out = folder / "patches-nopdl"
    shutil.copytree(patches, out)
    for op in OPS:
        manifest = PatchManifest.load(out / op)
        manifest.kernel = str((patches / op / manifest.kernel).resolve())
        manifest.defines = {**manifest.defines, "ASTRA_DEFAULT_PDL": "0"}
        manifest.save(out / op)
    return out


def build_graph(tokens: int, layers: int, fns: dict | None) -> torch.cuda.CUDAGraph:
    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    w_gu = torch.randn(HIDDEN, 2 * INTER, device=dev, dtype=dt, generator=gen) * HIDDEN ** -0.5
    w_down = torch.randn(INTER, HIDDEN, device=dev, dtype=dt, generator=gen) * INTER ** -0.5
    w_norm = torch.ones(HIDDEN, device=dev, dtype=dt)
    x = torch.randn(tokens, HIDDEN, device=dev, dtype=dt, generator=gen)
    residual = torch.randn(tokens, HIDDEN, device=dev, dtype=dt, generator=gen)
    h = torch.empty(tokens, 2 * INTER, device=dev, dtype=dt)
    a = torch.empty(tokens, INTER, device=dev, dtype=dt)

    def step():
        for _ in range(layers):
            if fns is not None:
                fns["fused_add_rmsnorm"](x, residual, w_norm, EPS)
            torch.mm(x, w_gu, out=h)
            if fns is not None:
                fns["silu_and_mul"](h, a)
            torch.mm(a, w_down, out=x)  # gemm-only: `a` as the previous replay left it (timing ignores values)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # cuBLAS workspaces and our verdicts exist before capture
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph._keep = (w_gu, w_down, w_norm, x, residual, h, a)  # buffers live as long as the graph
    return graph


def replay_us(graph: torch.cuda.CUDAGraph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / REPLAYS


def main(out: Path, tokens_list: tuple[int, ...], layers: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "date": datetime.now(UTC).isoformat(timespec="seconds")}
    import sglang.srt.layers.activation as act
    import sglang.srt.layers.layernorm as ln

    with tempfile.TemporaryDirectory(prefix="astra-sandwich-") as tmp:
        variants = {"gemm-only": None,
                    "sglang": {"fused_add_rmsnorm": ln.fused_add_rmsnorm, "silu_and_mul": act.silu_and_mul},
                    "ours": op_fns(Path("patches")),
                    "ours-nopdl": op_fns(without_pdl(Path("patches"), Path(tmp)))}
        rows = []
        for tokens in tokens_list:
            graphs = {name: build_graph(tokens, layers, fns) for name, fns in variants.items()}
            times: dict[str, list[float]] = {name: [] for name in graphs}
            for name, graph in graphs.items():  # warm-up
                replay_us(graph)
            for _ in range(REPS):
                for name, graph in graphs.items():
                    times[name].append(replay_us(graph) / layers)
            base = statistics.median(times["gemm-only"])
            for name, values in times.items():
                med = statistics.median(values)
                rows.append(Row(tokens, layers, name, med, med - base, **meta))
                print(f"T={tokens:4d} {name:11s} {med:8.2f} us/layer  ops in place {med - base:6.2f} us", flush=True)
            del graphs
    with open(out / "sandwich.jsonl", "w") as fh:
        fh.writelines(json.dumps(asdict(r)) + "\n" for r in rows)
    lines = [f"In-situ cost per layer (fused_add_rmsnorm + GEMM + silu_and_mul + GEMM, {HIDDEN}/{INTER}, bf16, one "
             f"CUDA graph of {layers} layers, median of {REPS} x {REPLAYS} replays). {meta['gpu']}, {meta['date']}.",
             "", "| tokens | variant | us per layer | ops in place (us) |", "|---:|---|---:|---:|"]
    lines += [f"| {r.tokens} | {r.variant} | {r.us_per_layer:.2f} | {r.ops_us_per_layer:.2f} |" for r in rows]
    (out / "sandwich.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--tokens", default="1,16,64,128")
    ap.add_argument("--layers", type=int, default=8)
    cli = ap.parse_args()
    main(cli.outdir, tuple(int(t) for t in cli.tokens.split(",")), cli.layers)
