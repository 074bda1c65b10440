"""The screening worker: one long-lived process per GPU, serving configs over a pipe.

It pins its GPU (CUDA_VISIBLE_DEVICES) before anything imports torch, loads the op's launch once, and answers:

    ("prepare", bucket)            -> ("prepared", seconds)      inputs and reference of a bucket, once
    ("jobs", [config, ...])        -> ("jobs", {config: [CompileJob, ...]})   what each would compile
    ("screen", config, cutoff_us)  -> ("screened", Screened)     check, then time
    ("stop",)                      -> exits

A thread beats a shared clock every `beat_s` seconds: a worker whose clock stops (a frozen process, the GIL held
forever) is stale and replaced by the pool. A config whose error leaves the device unusable gets its answer
sent, then the worker exits: the pool starts a new one. Anything the launch raises outside a config (`prepare`)
is answered as ("error", text) and ends the worker.
"""
from __future__ import annotations

import os
import threading
import time
import traceback

from astra_sglang.errors import describe
from astra_sglang.optimize.tuner.screen_launch import ScreenFailure, ScreenLaunch, load_launch
from astra_sglang.triton.screen_records import Screened

FATAL_EXIT = 3


def _beat(clock, beat_s: float) -> None:
    while True:
        clock.value = time.time()
        time.sleep(beat_s)


def _stage_of(exc: BaseException) -> str:
    name = type(exc).__name__
    if name == "OutOfResources":
        return "load"
    if name in ("CompilationError", "CompileTimeAssertionFailure"):
        return "compile"
    return "launch"


def screen_one(launch: ScreenLaunch, config: str, bucket, cutoff_us: float | None, worker: str) -> tuple[Screened, bool]:
    """(the answer, whether the worker must exit)."""
    start = time.perf_counter()
    counter = launch.counter()
    out = dict(config=config, bucket=bucket, worker=worker)
    fatal = False
    try:
        with counter:
            checked = launch.check(config)
            if checked.error > 1.0:
                out.update(stage="check", error=checked.error,
                           reason=f"wrong results: {checked.error:.3g}x the tolerance {checked.detail}".strip())
            else:
                timed = launch.time(config, cutoff_us)
                out.update(stage="slow" if timed.cut else "done", us=timed.us, spread=timed.spread,
                           replays=timed.replays, error=checked.error)
    except ScreenFailure as exc:
        out.update(stage=exc.stage, reason=exc.reason[:300])
    except Exception as exc:  # noqa: BLE001 - a config's failure is its answer, not the worker's end
        fatal = launch.fatal(exc)
        out.update(stage="crash" if fatal else _stage_of(exc), reason=describe(exc))
    return Screened(**out, hits=counter.hits, misses=counter.misses, seconds=time.perf_counter() - start), fatal


def main(conn, target: str, options: dict, gpu: str | None, clock, beat_s: float) -> None:
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    threading.Thread(target=_beat, args=(clock, beat_s), daemon=True, name="astra-heartbeat").start()
    worker = f"gpu{gpu}" if gpu is not None else "cpu"
    bucket = None
    try:
        launch = load_launch(target, options)
        conn.send(("ready", os.getpid()))
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                return
            if msg[0] == "prepare":
                start = time.perf_counter()
                bucket = msg[1]
                launch.prepare(bucket)
                conn.send(("prepared", time.perf_counter() - start))
            elif msg[0] == "jobs":
                found = {}
                for config in msg[1]:
                    try:
                        found[config] = launch.jobs(config)
                    except Exception:  # noqa: BLE001 - screening the config will say what is wrong with it
                        found[config] = []
                conn.send(("jobs", found))
            elif msg[0] == "screen":
                result, fatal = screen_one(launch, msg[1], bucket, msg[2], worker)
                conn.send(("screened", result))
                if fatal:
                    os._exit(FATAL_EXIT)  # the device is unusable: no clean-up that could touch it
    except (EOFError, KeyboardInterrupt):
        return
    except Exception as exc:  # noqa: BLE001 - told to the pool, which stops this worker
        conn.send(("error", f"{describe(exc)}\n{traceback.format_exc(limit=6)}"))
