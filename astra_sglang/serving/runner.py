"""Run a crossover or restarts A/B (serving/designs.py) period by period, resumable from its folder.

A period starts its servers together (each on its GPU: CUDA_VISIBLE_DEVICES), waits for all, runs one untimed
warm-up round (the timed rounds' own client settings, so that every batch shape and JIT compile of a timed round
has been met), then `rounds` timed rounds in which every server of the period is benchmarked at the same time,
probes each server's logprobs (serving/parity.py), and stops them. Each arm's rounds, the warm-up's included, are
run by one long-lived benchmark client for the whole call (serving/bench_clients.py). Its rows are written only once the period is
complete, so a run cut short keeps every finished period and nothing of a half one. OUT/plan.json holds what
the run was started with; the same command with the same --out goes on from the first period not done (once the
starts recorded in OUT/starts.jsonl are found to be the plan's), and a different command is refused rather than
mixed into the rows.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, Field
from rich.console import Console

from astra_sglang.errors import AstraError
from astra_sglang.serving import noise, parity, server, settings, window
from astra_sglang.serving.bench_clients import ClientPool
from astra_sglang.serving.client import ClientSettings
from astra_sglang.serving.designs import Period, Slot, gpu_of

PLAN, ROWS, STARTS, PROBES = "plan.json", "ab.jsonl", "starts.jsonl", "parity.jsonl"
Launch = Callable[[str, int], tuple[list[str], dict, Path | None]]
"""(arm, period) -> (argv, environment, stats folder or None) of that arm's server."""


class RunPlan(BaseModel):
    design: str
    periods: list[Period]
    client: ClientSettings
    model_path: str
    load_format: str | None = None
    server_args: list[str] = Field(default_factory=list)
    control: bool = False
    patches: str | None = None
    patches_sha: str | None = None
    """sha256 of the patch folder's files (folder_digest): a resumed run may find the same patches elsewhere (another
    output folder, another machine), and only their content must match."""
    gpus: list[str] = Field(default_factory=list)
    port: int = 30000
    parity_prompts: int = parity.PROMPTS
    parity_tokens: int = parity.TOKENS
    parity_top_k: int = parity.TOP_K
    vocab: int = 32000

    def same_run(self, other: "RunPlan") -> str:
        """'' where `other` continues this run, else the first field that differs (the patches' path only where
        either plan has no digest of them)."""
        moved = self.patches_sha is not None and other.patches_sha is not None
        mine, theirs = (p.model_dump(exclude={"patches"} if moved else None) for p in (self, other))
        return next((k for k in mine if mine[k] != theirs[k]), "")


def folder_digest(folder: str | Path | None) -> str | None:
    """sha256 over a folder's files, each as its path in the folder and its bytes, in path order (None: no folder)."""
    if folder is None:
        return None
    h = hashlib.sha256()
    root = Path(folder)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def load_or_write_plan(out: Path, plan: RunPlan) -> RunPlan:
    """The plan of OUT: written on the first call; a later call must ask for the same run, and serves its patches
    from where it gives them (the plan then records that path)."""
    path = out / PLAN
    if path.is_file():
        old = RunPlan.model_validate_json(path.read_text())
        field = old.same_run(plan)
        if field:
            raise AstraError(f"{out} holds a run started with another {field}: give another --out, or the same "
                             f"options to continue it")
        if old.patches != plan.patches:
            old = old.model_copy(update={"patches": plan.patches})
            path.write_text(old.model_dump_json(indent=1))
        return old
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(plan.model_dump_json(indent=1))
    return plan


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _append(path: Path, rows: list[dict]) -> None:
    with open(path, "a") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)


def done_periods(out: Path) -> set[int]:
    """Periods whose rows are written (a period's rows, starts and probes are written together at its end)."""
    return {row["period"] for row in read_jsonl(out / STARTS)}


def _starts_text(starts: list[tuple]) -> str:
    return ", ".join(f"{arm} on GPU {index} (CUDA_VISIBLE_DEVICES {gpu or 'unset'})" for arm, index, gpu in starts)


def check_starts(plan: RunPlan, out: Path) -> None:
    """A resumed run's recorded starts are its plan's: each recorded period is one of the plan's, with each of its
    arms started once on the GPU the plan gives it. Else the run refuses to go on (AstraError naming the first
    period that differs): its periods would be counted done for a schedule they did not follow."""
    by_period: dict[int, list[tuple]] = {}
    for row in read_jsonl(out / STARTS):
        by_period.setdefault(row.get("period"), []).append((row.get("arm"), row.get("gpu_index"), row.get("gpu_id")))
    periods = {p.index: p for p in plan.periods}
    for index, starts in by_period.items():  # in the order they were written
        period = periods.get(index)
        if period is None:
            raise AstraError(f"{out / STARTS} records period {index}, which the plan of {out} does not have "
                             f"(periods 1-{len(plan.periods)}): give another --out")
        want = sorted(((s.arm, s.gpu, gpu_of(s, plan.gpus)) for s in period.slots), key=str)
        if sorted(starts, key=str) != want:
            raise AstraError(f"{out / STARTS} does not match the plan at period {index}: recorded "
                             f"{_starts_text(starts)}; planned {_starts_text(want)}: give another --out")


def _port(plan: RunPlan, arm: str) -> int:
    return plan.port if arm == "A" else plan.port + 1


def _round(plan: RunPlan, period: Period, slots: list[Slot], clients: ClientPool, tag: str,
           out: Path) -> list[tuple[dict, dict, float]]:
    """Every slot's benchmark at once, each by its arm's client: (metrics, gpu state before/after, client wall
    seconds) per slot."""
    def one(slot: Slot):
        gpu = gpu_of(slot, plan.gpus)
        before, start = noise.gpu_state(index=gpu), time.monotonic()
        metrics = clients.run(_port(plan, slot.arm), out / f"bench-{slot.arm}-p{period.index}-{tag}.jsonl")
        return metrics, {"before": before, "after": noise.gpu_state(index=gpu)}, time.monotonic() - start
    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        return list(pool.map(one, slots))


def default_launch(plan: RunPlan, out: Path) -> Launch:
    """A unpatched on plan.port; B on the next port, with the plan's patches (unpatched too in a control), its
    stats in OUT/stats/B-p<period>."""
    from astra_sglang.patching.server_env import patched_server
    from astra_sglang.patching.stats import ENV_STATS_INTERVAL

    def launch(arm: str, period: int):
        argv = server.server_command(plan.model_path, _port(plan, arm), plan.load_format, plan.server_args)
        if arm == "A" or plan.control:
            return argv, server.strip_patch_env(dict(os.environ)), None
        stats = out / "stats" / f"B-p{period}"
        env, command, _ = patched_server(Path(plan.patches) if plan.patches else None, stats_dir=stats,
                                         no_build=True, server_args=argv[3:])
        return command, {**env, ENV_STATS_INTERVAL: str(server.STATS_INTERVAL_S)}, stats
    return launch


def _healthy(plan: RunPlan, period: Period, slot: Slot, proc, out: Path, health_timeout: float,
             console: Console, launched: float) -> tuple[dict, dict]:
    """(its starts.jsonl row, its /server_info) once the slot's server answers /health; ready_s counts from its
    launch (`launched`, time.monotonic()), not from when the wait for it began."""
    port = _port(plan, slot.arm)
    ready = server.wait_healthy(proc, port, out / f"server-{slot.arm}-p{period.index}.log", health_timeout,
                                since=launched)
    info = server.server_info(port)
    console.out(f"[p{period.index} {slot.arm}] healthy after {ready:.0f} s")
    return {"period": period.index, "arm": slot.arm, "gpu_index": slot.gpu, "gpu_id": gpu_of(slot, plan.gpus),
            "ready_s": ready, "kv_tokens": server.kv_tokens(info)}, info


def _say_round(console: Console, tag: str, row: dict, wall: float, min_window_s: float) -> None:
    metrics = row["metrics"]
    w = window.windows([row])[0]
    console.out(f"[{tag}] output {metrics['output_throughput']:.1f} tok/s, ITL "
                f"{metrics.get('mean_itl_ms', float('nan')):.2f} ms; {window.describe(w, min_window_s)} "
                f"({wall:.0f} s of client wall)")


def run_period(plan: RunPlan, period: Period, out: Path, launch: Launch, clients: ClientPool,
               health_timeout: float = 900.0, stagger: bool = False, console: Console | None = None,
               min_window_s: float = window.MIN_WINDOW_S) -> tuple[list[dict], list[dict], list[dict]]:
    """(rows, starts, probes) of one period; its servers are stopped however it ends. `stagger`: each server
    starts once the one before it is healthy (the first period of a call: on a fresh machine the first start
    JIT-compiles flashinfer's and SGLang's kernels into shared cache folders, which two starts would race).
    Each round's timed window is printed, and marked when under `min_window_s`."""
    console = console or Console(highlight=False)
    procs: dict[str, object] = {}
    launched: dict[str, float] = {}
    starts, stats_dirs = [], {}
    try:
        order = sorted(period.slots, key=lambda slot: slot.gpu)
        infos = {}
        for k, slot in enumerate(order):  # all at once, each on its own GPU, or one after the other (stagger)
            argv, env, stats_dirs[slot.arm] = launch(slot.arm, period.index)
            gpu = gpu_of(slot, plan.gpus)
            env = {**env, "CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else env
            console.out(f"[p{period.index} {slot.arm}] starting on GPU {gpu or 'default'}: {' '.join(argv)}")
            launched[slot.arm] = time.monotonic()
            procs[slot.arm] = server.start_server(argv, env, out / f"server-{slot.arm}-p{period.index}.log")
            if stagger or k == len(order) - 1:
                for waiting in (w for w in order[:k + 1] if w.arm not in infos):
                    row, infos[waiting.arm] = _healthy(plan, period, waiting, procs[waiting.arm], out,
                                                       health_timeout, console, launched[waiting.arm])
                    starts.append(row)
        if len(infos) == 2:
            have = all(infos.values())
            settings.write(out, settings.differences(infos["A"], infos["B"]) if have else [], have,
                           name=f"settings-diff-p{period.index}.json")
        rows = []
        if period.rounds:  # untimed, and the very round a timed one is: a shorter one leaves shapes cold
            for slot, (metrics, _, wall) in zip(period.slots, _round(plan, period, period.slots, clients, "warmup",
                                                                     out)):
                _say_round(console, f"p{period.index} warm-up {slot.arm}", {"metrics": metrics}, wall, min_window_s)
        for r in range(1, period.rounds + 1):
            for slot, (metrics, gpu, wall) in zip(period.slots, _round(plan, period, period.slots, clients, f"r{r}",
                                                                       out)):
                rows.append({"design": plan.design, "period": period.index, "round": r, "arm": slot.arm,
                             "gpu_index": slot.gpu, "gpu_id": gpu_of(slot, plan.gpus), "metrics": metrics, "gpu": gpu,
                             "bench_wall_s": wall, "control": plan.control,
                             **({"stats_dir": str(stats_dirs[slot.arm])} if stats_dirs.get(slot.arm) else {})})
                _say_round(console, f"p{period.index} r{r} {slot.arm}", rows[-1], wall, min_window_s)
        ids = parity.prompts(plan.parity_prompts, plan.vocab)
        probes = [{"period": period.index, "arm": slot.arm, "gpu_index": slot.gpu,
                   "answers": [a.model_dump() for a in parity.probe(
                       lambda body, port=_port(plan, slot.arm): server.post_generate(port, body), ids,
                       plan.parity_tokens, plan.parity_top_k)]} for slot in period.slots]
        if any(stats_dirs.values()):
            time.sleep(server.STATS_INTERVAL_S + 1.0)  # one more stats write of the patched server
        return rows, starts, probes
    finally:
        for proc in procs.values():
            server.stop_server(proc)


def run(plan: RunPlan, out: Path, launch: Launch, on_period: Callable[[], None] = lambda: None,
        stop_after: float | None = None, health_timeout: float = 900.0, stagger_first: bool = True,
        console: Console | None = None, min_window_s: float = window.MIN_WINDOW_S) -> int:
    """Every period not done yet, in order; returns how many ran. With `stop_after` seconds, no period starts
    that the longest period so far (this call's or a recorded one's) would carry past it. `stagger_first`: the
    call's first period starts its servers one after the other (run_period). One benchmark client per arm serves
    every round of the call (serving/bench_clients.py)."""
    console = console or Console(highlight=False)
    check_starts(plan, out)
    done, began, ran = done_periods(out), time.monotonic(), 0
    # A staggered first period (with a fresh machine's JIT compiles in it) is no measure of the periods after it:
    # it stands in only until one started at once has been timed.
    recorded = read_jsonl(out / STARTS)
    normal = max((s.get("period_s", 0.0) for s in recorded if not s.get("staggered")), default=0.0)
    fallback = max((s.get("period_s", 0.0) for s in recorded), default=0.0)
    clients = ClientPool(plan.client, plan.model_path, out, console)
    ports = sorted({_port(plan, s.arm) for p in plan.periods if p.index not in done and p.rounds for s in p.slots})
    try:
        for period in plan.periods:
            if period.index in done:
                continue
            longest = normal or fallback
            if stop_after is not None and time.monotonic() - began + longest > stop_after:
                console.out(f"stopping before period {period.index}: about {longest:.0f} s a period would pass "
                            f"--stop-after {stop_after:.0f} s; the same command goes on from here")
                break
            if ran == 0:  # every arm's client of the call, once: their imports overlap the first servers' starts
                clients.start(ports)
            start, stagger = time.monotonic(), stagger_first and ran == 0
            rows, starts, probes = run_period(plan, period, out, launch, clients, health_timeout, stagger=stagger,
                                               console=console, min_window_s=min_window_s)
            seconds = time.monotonic() - start
            if stagger:
                fallback = max(fallback, seconds)
            else:
                normal = max(normal, seconds)
            _append(out / ROWS, rows)
            _append(out / PROBES, probes)
            _append(out / STARTS, [{**s, "period_s": seconds, "staggered": stagger} for s in starts])  # last: done
            ran += 1
            on_period()
    finally:
        clients.close()
    return ran
