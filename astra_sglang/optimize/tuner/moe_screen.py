"""Fused MoE's screening launch: SGLang's fused_experts with one config for both GEMMs, as SGLang's tuner times it
(`override_config`, in place, the whole call: routing alignment, gate/up GEMM, activation, down GEMM, top-k sum).

Per expert shape the weights are drawn once (the spec's scales, extract/fused_moe.toml; with quant "fp8_w8a8"
quantized per expert, static activation scales calibrated per batch size and a reference that rounds as the kernel
does: triton/moe/fp8.py); per batch size the
hidden states, `replays` routings (top-k of random logits, ties to the lower expert: the reference's rule) and
the fp32 reference output of the first routing (moe_reference.fused_moe); SGLang's own pick is timed once there,
and its time sets how many calls a timed graph holds at that batch size (GraphTimer.fit). Each config is checked on
a fresh copy of the inputs against that reference with the spec's tolerance (a config that changes the results is
dropped, with its error), then timed by CUDA-graph replay (graph_timing.GraphTimer), a new routing copied in
before every replay.

A config is its code: `MoeConfig.code()`, or a kernel variant's, `<code>+<variant>[:KEY=VALUE,...]`: the variant
is looked up in `variants` (name -> "module:function") and called as
`fn(hidden, w1, w2, topk_output, moe_runner_config, config)` with `config` the base config's SGLang dict plus the
KEY=VALUE pairs, in place on `hidden` like `fused_experts`. Its Triton kernels compile ahead like SGLang's (any
Triton launch is recorded), from their own module.
"""
from __future__ import annotations

import importlib
from typing import Callable

from astra_sglang.optimize.tuner.compile_ahead import HitCounter, record
from astra_sglang.optimize.tuner.graph_timing import GraphTimer
from astra_sglang.optimize.tuner.screen_launch import Checked, ScreenFailure, Timed, cuda_fatal
from astra_sglang.triton.moe import fp8
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig
from astra_sglang.triton.screen_records import CompileJob

STD = {"w1": 0.02, "w2": 0.01}
"""The spec's weight scales (extract/fused_moe.toml): outputs near unit scale up to Mixtral's N."""


def parse(code: str) -> tuple[MoeConfig, str, dict[str, int]]:
    """(base config, variant name or "", the variant's extra knobs)."""
    base, _, variant = code.partition("+")
    name, _, knobs = variant.partition(":")
    extra = {}
    for item in filter(None, knobs.split(",")):
        key, _, value = item.partition("=")
        if not key or not value.lstrip("-").isdigit():
            raise ScreenFailure("launch", f"bad knob {item!r} in config {code!r}: KEY=INT")
        extra[key] = int(value)
    return MoeConfig.from_code(base), name, extra


class MoeScreenLaunch:
    def __init__(self, experts: int, inter: int, hidden: int, topk: int, dtype: str = "bfloat16",
                 launches: int = 10, replays: int = 10, warmup: int = 1, seed: int = 0,
                 variants: dict[str, str] | None = None, quant: str = ""):
        import torch

        from astra_sglang.specs.registry import get_spec
        from astra_sglang.triton.moe.op import _sglang

        self.torch = torch
        shape = MoeShape(experts, inter, hidden, topk, dtype, quant)
        self.experts, self.inter, self.hidden, self.topk = experts, inter, hidden, topk
        self.dtype = getattr(torch, dtype)
        self.seed, self.replays = seed, max(replays, warmup)
        tol = get_spec("fused_moe").tolerance[dtype]
        self.atol, self.rtol = fp8.TOLERANCE if shape.quantized else (tol.atol, tol.rtol)
        self.fused_experts, self.override_config, runner_config, self.topk_output = _sglang()
        self.settings = runner_config(num_experts=experts, num_local_experts=experts, hidden_size=hidden,
                                      intermediate_size_per_partition=inter, top_k=topk, params_dtype=self.dtype,
                                      inplace=True)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        w1 = torch.randn(experts, 2 * inter, hidden, device="cuda", generator=gen) * STD["w1"]
        w2 = torch.randn(experts, hidden, inter, device="cuda", generator=gen) * STD["w2"]
        self.fp8 = fp8.Fp8Experts.of(w1, w2) if shape.quantized else None  # fp8_w8a8, the one QUANTS has
        self.quant = self.fp8.kwargs() if self.fp8 else {}
        self.w1, self.w2 = (self.fp8.w1, self.fp8.w2) if self.fp8 else (w1.to(self.dtype), w2.to(self.dtype))
        del w1, w2
        self.variants = dict(variants or {})
        self._variant_fns: dict[str, Callable] = {}
        self.timer = GraphTimer(launches, replays, warmup)

    def prepare(self, tokens: int) -> None:
        from astra_sglang.triton.moe.op import route_into
        from astra_sglang.triton.moe.reference import fused_moe as reference

        torch = self.torch
        gen = torch.Generator(device="cuda").manual_seed(self.seed * 1_000_003 + tokens)
        self.x0 = torch.randn(tokens, self.hidden, device="cuda", generator=gen).to(self.dtype)
        logits = [torch.randn(tokens, self.experts, device="cuda", generator=gen) for _ in range(self.replays)]
        self.routings = []
        for lg in logits:
            weights = torch.empty(tokens, self.topk, device="cuda")
            self.routings.append((weights, route_into(lg, weights)))
        self.weights, self.ids = self.routings[0][0].clone(), self.routings[0][1].clone()
        self.output = self.topk_output(self.weights, self.ids, logits[0].clone())
        self.check_hidden, self.time_hidden = torch.empty_like(self.x0), self.x0.clone()
        if self.fp8:  # static activation scales for this batch, then the quantized computation's output
            self.ref = self.fp8.prepare(self.x0, logits[0], self.topk)
        else:
            ref = self.x0.float()
            reference(ref, self.w1.float(), self.w2.float(), logits[0], torch.empty(tokens, self.topk, device="cuda"))
            self.ref = ref
        self._route(0)
        self.check_hidden.copy_(self.x0)
        self._call(None, self.check_hidden)  # SGLang's own pick once: its kernels and torch.compile's warm up
        torch.cuda.synchronize()
        self.timer.launches = 1  # the pick's time sets how many calls a timed graph holds at this batch size
        pick = self.timer.time(lambda: self._call(None, self.time_hidden), before=self._route)
        self.timer.fit(pick.us)

    def _route(self, i: int) -> None:
        weights, ids = self.routings[i % len(self.routings)]
        self.weights.copy_(weights)
        self.ids.copy_(ids)

    def _variant(self, name: str) -> Callable:
        if name not in self._variant_fns:
            if name not in self.variants:
                raise ScreenFailure("launch", f"unknown kernel variant {name!r} (known: {sorted(self.variants)})")
            module, _, attr = self.variants[name].partition(":")
            self._variant_fns[name] = getattr(importlib.import_module(module), attr)
        return self._variant_fns[name]

    def _call(self, code: str | None, hidden) -> None:
        if code is None:
            self.fused_experts(hidden, self.w1, self.w2, self.output, moe_runner_config=self.settings, **self.quant)
            return
        config, variant, extra = parse(code)
        values = {**config.sglang(), **extra}
        if variant:
            if self.quant:
                raise ScreenFailure("launch", f"kernel variant {variant!r}: variants run unquantized shapes only")
            self._variant(variant)(hidden, self.w1, self.w2, self.output, self.settings, values)
            return
        with self.override_config(values):
            self.fused_experts(hidden, self.w1, self.w2, self.output, moe_runner_config=self.settings, **self.quant)

    def jobs(self, code: str) -> list[CompileJob]:
        found: list[CompileJob] = []
        with record(found):
            self._call(code, self.check_hidden)
        self.torch.cuda.synchronize()
        return list({job.digest(): job for job in found}.values())

    def check(self, code: str) -> Checked:
        self._route(0)
        self.check_hidden.copy_(self.x0)
        self._call(code, self.check_hidden)
        err = (self.check_hidden.float() - self.ref).abs() / (self.atol + self.rtol * self.ref.abs())
        worst = float(err.nan_to_num(nan=float("inf")).max())
        return Checked(error=worst, detail=f"(atol {self.atol:g}, rtol {self.rtol:g}, fp32 reference)")

    def time(self, code: str, cutoff_us: float | None) -> Timed:
        return self.timer.time(lambda: self._call(code, self.time_hidden), before=self._route, cutoff_us=cutoff_us)

    def counter(self) -> HitCounter:
        return HitCounter()

    def fatal(self, exc: BaseException) -> bool:
        return cuda_fatal(exc)
