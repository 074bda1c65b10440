"""A stand-in for SGLang's serving benchmark (sglang.benchmark.serving) on CPU, where the real one does not import
(no transformers): put first on PYTHONPATH, it shadows the installed package in the processes the tests start.

It keeps the shape the long-lived client relies on, as SGLang 0.5.17 has it (tests/serving/test_bench_clients.py
checks that shape in the installed source): `cli_main` builds the arguments with its parser and hands them to the
module's `run_benchmark`; `run_benchmark(args)` seeds `random` and numpy from --seed, draws the random-ids prompts,
sends them to the server's /generate (at most --max-concurrency at once), appends one JSONL line of results to
--output-file and returns them; `get_tokenizer` and `check_chat_template` are module functions.

$BENCH_STAND_IN_LOG: one line per import ("import PID MODULE-NAME") and per run ("run PID PORT DIGEST", the digest
of the prompts sent), so tests count client processes and compare prompts. BENCH_STAND_IN_OLD=1: no cli_main (an
SGLang whose parser lives under __main__ only), which the long-lived client cannot drive; BENCH_STAND_IN_BROKEN=1:
the import fails, as the real one does without transformers.
"""
import argparse
import hashlib
import json
import os
import random
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np

VOCAB = 1000


def _log(line):
    if os.environ.get("BENCH_STAND_IN_LOG"):
        with open(os.environ["BENCH_STAND_IN_LOG"], "a") as fh:
            fh.write(line + "\n")


_log(f"import {os.getpid()} {__name__}")
if os.environ.get("BENCH_STAND_IN_BROKEN") == "1":
    raise ImportError("No module named 'transformers'")


def get_tokenizer(name):
    return name


def check_chat_template(name):
    return False


def _parser():
    p = argparse.ArgumentParser()
    for flag in ("--backend", "--host", "--model", "--tokenizer", "--output-file", "--dataset-name"):
        p.add_argument(flag)
    for flag in ("--port", "--num-prompts", "--max-concurrency", "--seed", "--warmup-requests",
                 "--random-input-len", "--random-output-len"):
        p.add_argument(flag, type=int)
    p.add_argument("--random-range-ratio", type=float)
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--flush-cache", action="store_true")
    return p


def _generate(port, ids, out_len):
    body = json.dumps({"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": out_len}}).encode()
    start = time.perf_counter()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        reply = json.loads(resp.read())
    return time.perf_counter() - start, len(reply["output_ids"])


def run_benchmark(args):
    random.seed(args.seed)
    np.random.seed(args.seed)
    tokenizer = get_tokenizer(args.tokenizer)
    check_chat_template(tokenizer)
    prompts = np.random.randint(0, VOCAB, size=(args.num_prompts, args.random_input_len)).tolist()
    _log(f"run {os.getpid()} {args.port} {hashlib.sha256(json.dumps(prompts).encode()).hexdigest()[:16]}")
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.max_concurrency) as pool:
        done = list(pool.map(lambda ids: _generate(args.port, ids, args.random_output_len), prompts))
    duration = time.perf_counter() - start
    latencies, outputs = [d[0] for d in done], sum(d[1] for d in done)
    result = {"backend": args.backend, "dataset_name": args.dataset_name, "duration": duration,
              "completed": len(done), "request_throughput": len(done) / duration,
              "output_throughput": outputs / duration, "mean_ttft_ms": 1000 * float(np.mean(latencies)),
              "mean_itl_ms": 1000 * float(np.mean(latencies)) / max(1, args.random_output_len),
              "mean_e2e_latency_ms": 1000 * float(np.mean(latencies))}
    with open(args.output_file, "a") as fh:
        fh.write(json.dumps(result) + "\n")
    return result


if os.environ.get("BENCH_STAND_IN_OLD") != "1":
    def cli_main():
        run_benchmark(_parser().parse_args())

if __name__ == "__main__":
    run_benchmark(_parser().parse_args())
