"""The serving benchmark's client settings, pinned for a whole A/B and recorded in its report.

Every round of every arm sends the same prompts (`seed`) of fixed lengths (`random-ids` with range ratio 1.0:
no length drawn at random), after `warmup_requests` requests the benchmark does not time, and with the server's
prefix cache flushed after them (`flush_cache`): the same prompts every round would otherwise be served from
the radix cache from the second round on, a different load than the first.

The untimed warm-up round after each server start uses these very settings: a shorter one (as many prompts as the
concurrency: 32 requests in 0.84 s on an H200, 2026-11-27) left the first timed rounds of a start still warming, its
output throughput rising 8.0k -> 11.0k -> 16.0k tok/s over three rounds.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from astra_sglang.errors import AstraError
from astra_sglang.serving import server


class ClientSettings(BaseModel):
    dataset: str = "random-ids"
    num_prompts: int = Field(512, ge=1)
    input_len: int = Field(1024, ge=1)
    output_len: int = Field(256, ge=1)
    concurrency: int = Field(64, ge=1)
    seed: int = 1
    fixed_lengths: bool = True
    """random-ids with --random-range-ratio 1.0: every prompt input_len tokens in, output_len out."""
    warmup_requests: int = Field(1, ge=0)
    flush_cache: bool = True
    prefix_len: int = 2048
    groups: int = 16
    """shared-prefix only: system prompt tokens and how many distinct ones."""

    @classmethod
    def from_opts(cls, opts: dict) -> "ClientSettings":
        """From ab's options dict (the keys it shares with this record)."""
        return cls(**{k: opts[k] for k in cls.model_fields if k in opts})

    def argv(self, model_path: str, port: int, output_file: str | Path, python: str = sys.executable) -> list[str]:
        return server.bench_command(model_path, port, output_file, self.num_prompts, self.input_len, self.output_len,
                                    self.concurrency, python=python, dataset=self.dataset, prefix_len=self.prefix_len,
                                    groups=self.groups, seed=self.seed, warmup_requests=self.warmup_requests,
                                    flush_cache=self.flush_cache)

    def describe(self) -> str:
        lengths = "fixed" if self.fixed_lengths else "random"
        text = (f"{self.dataset}, {self.num_prompts} prompts of {self.input_len} tokens in / {self.output_len} out "
                f"({lengths} lengths), {self.concurrency} concurrent, seed {self.seed}, {self.warmup_requests} "
                f"untimed warm-up request(s) per round")
        return text + (", prefix cache flushed after them" if self.flush_cache else "")

    def run(self, model_path: str, port: int, bench_file: Path, timeout_s: float = 900.0) -> dict:
        """One benchmark by SGLang's serving benchmark against the server at `port`: its metrics."""
        bench_file.unlink(missing_ok=True)
        done = subprocess.run(self.argv(model_path, port, bench_file), env=server.strip_patch_env(dict(os.environ)),
                              capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise AstraError(f"benchmark failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
        return server.read_bench(bench_file)
