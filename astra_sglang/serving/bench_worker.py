"""A long-lived client of SGLang's serving benchmark: `python -m astra_sglang.serving.bench_worker`, one process per
server, every round of a run one request to it (serving/bench_clients.py starts and drives it).

Why: a fresh `python -m sglang.benchmark.serving` per round cost 18-30 s of wall before its timed window (4x NVIDIA
H200, 2026-11-27, commit 45b7284), more than the window itself; most of it is the import. Here the module is
imported once and each round runs through its own entry points: `cli_main` parses the very argv a per-round process
gets (ClientSettings.argv: its parser, its defaults and checks), and `run_benchmark(args)` runs the round. That
function seeds `random` and numpy from --seed and draws the dataset anew on every call, so every round sends the
same prompts as a fresh process did, and it appends the round's JSONL line to --output-file as before.

Protocol, one JSON line each way on stdin/stdout: first {"ready": true}, or {"ready": false, "why": ...} and exit;
then for each {"argv": [...]} in, {"ok": true} or {"ok": false, "error": ...} out. The benchmark's own prints go
to stderr, so that stdout carries the replies alone.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import traceback
from typing import IO

MODULE = "sglang.benchmark.serving"
ENTRY = ("cli_main", "run_benchmark", "get_tokenizer", "check_chat_template")
"""What the module must offer (SGLang 0.5.17 does): the CLI's parser and the run, and the two tokenizer loads cached."""


def load():
    """(the benchmark module, '') or (None, the one-line reason it cannot run in-process)."""
    try:
        bench = importlib.import_module(MODULE)
    except Exception as exc:  # noqa: BLE001 - any import failure means: a process per round
        return None, f"{MODULE} does not import here ({type(exc).__name__}: {exc})"
    missing = [name for name in ENTRY if not callable(getattr(bench, name, None))]
    if missing:
        return None, f"{MODULE} has no {', '.join(missing)} (another SGLang version)"
    # run_benchmark loads the tokenizer twice per call (its chat-template check and the dataset's), the same one
    # every round: once per process here.
    bench.get_tokenizer = functools.cache(bench.get_tokenizer)
    bench.check_chat_template = functools.cache(bench.check_chat_template)
    return bench, ""


def parse(bench, argv: list[str]) -> argparse.Namespace:
    """The Namespace SGLang's CLI builds from `argv` (its own parser and checks), without running the benchmark."""
    captured: list[argparse.Namespace] = []
    real, old_argv = bench.run_benchmark, sys.argv
    bench.run_benchmark, sys.argv = captured.append, [MODULE, *argv]
    try:
        bench.cli_main()
    finally:
        bench.run_benchmark, sys.argv = real, old_argv
    if len(captured) != 1:
        raise RuntimeError(f"{MODULE}.cli_main did not hand one set of arguments to run_benchmark")
    return captured[0]


def _reply(out: IO[str], message: dict) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def serve(requests: IO[str], out: IO[str]) -> int:
    bench, why = load()
    _reply(out, {"ready": True} if bench is not None else {"ready": False, "why": why})
    if bench is None:
        return 0
    for line in requests:
        if not line.strip():
            continue
        try:
            bench.run_benchmark(parse(bench, json.loads(line)["argv"]))
            _reply(out, {"ok": True})
        except (Exception, SystemExit) as exc:  # its CLI and its run end bad input with sys.exit
            _reply(out, {"ok": False, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2500:]}"})
    return 0


def main() -> None:
    replies = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)  # the benchmark prints its tables and progress: to stderr, the replies' pipe stays clean
    raise SystemExit(serve(sys.stdin, replies))


if __name__ == "__main__":
    main()
