"""Fused MoE as the evaluator calls it (spec extract/fused_moe.toml): SGLang's own fused_experts, in place as
a server runs it, after routing the spec's router logits.

`py:astra_sglang.triton.moe.op:sglang_pick` lets SGLang choose its config as it does in a server (its file for
this GPU and expert shape, else its default config). A candidate names its config in the attribute, resolved
here by module `__getattr__`, so that every config is an ordinary `py:` candidate of the isolated evaluator:

    py:astra_sglang.triton.moe.op:config_m64n128k64g1w4s3             one config at every batch size
    py:astra_sglang.triton.moe.op:table_1xm16n64k64g1w4s4_64xm16n...   per batch size, the nearest key (as SGLang)

The config is applied with SGLang's `override_config`, which its tuning script uses too: both GEMMs take it.
A config the GPU cannot run (Triton's OutOfResources) declines the shape (NotImplementedError -> not covered).
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

from astra_sglang.triton.moe.configs import nearest
from astra_sglang.triton.moe.space import MoeConfig


@functools.cache
def _sglang():
    """SGLang's fused MoE entry points; outside a server, its config namespaces published with default
    server arguments first, as SGLang's own kernel tests do."""
    from sglang.srt.runtime_context import get_exec

    try:
        get_exec()
    except ValueError:  # not published: no server in this process
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(ServerArgs(model_path="dummy"))
    from sglang.srt.layers.moe.moe_runner import MoeRunnerConfig
    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_experts, override_config
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    return fused_experts, override_config, MoeRunnerConfig, StandardTopKOutput


def route_into(router_logits: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """Top-k by logit with ties to the lower expert (a stable sort: the reference's rule), the softmax weights
    renormalized over the k, written into `topk_weights`; returns the expert ids (int32)."""
    topk = topk_weights.shape[1]
    ids = torch.sort(router_logits, dim=-1, descending=True, stable=True).indices[:, :topk]
    weights = torch.softmax(router_logits, dim=-1).gather(1, ids)
    torch.div(weights, weights.sum(dim=-1, keepdim=True), out=topk_weights)
    return ids.to(torch.int32)


def _oversized(exc: Exception) -> bool:
    return type(exc).__name__ in ("OutOfResources", "CompilationError")


def run(hidden, w1, w2, router_logits, topk_weights, config: MoeConfig | None = None,
        quant: dict | None = None) -> None:
    """One call: routing, then SGLang's fused_experts in place on `hidden` (config None: SGLang's choice;
    `quant`: fused_experts' quantization arguments, op_fp8's)."""
    fused_experts, override_config, runner_config, topk_output = _sglang()
    experts, inter = w2.shape[0], w2.shape[2]
    ids = route_into(router_logits, topk_weights)
    # num_experts == num_local_experts: no expert filtering, as in a server without expert parallelism.
    settings = runner_config(num_experts=experts, num_local_experts=experts, hidden_size=hidden.shape[1],
                             intermediate_size_per_partition=inter, top_k=topk_weights.shape[1],
                             params_dtype=hidden.dtype, inplace=True)
    output = topk_output(topk_weights, ids, router_logits)
    try:
        if config is None:
            fused_experts(hidden, w1, w2, output, moe_runner_config=settings, **(quant or {}))
        else:
            with override_config(config.sglang()):
                fused_experts(hidden, w1, w2, output, moe_runner_config=settings, **(quant or {}))
    except Exception as exc:  # noqa: BLE001 - only Triton's resource errors are re-labelled
        if _oversized(exc):
            raise NotImplementedError(f"config {config.code() if config else '(SGLang)'} does not fit this GPU: "
                                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
        raise


def sglang_pick(hidden, w1, w2, router_logits, topk_weights) -> None:
    """SGLang's fused MoE with the config SGLang picks itself: the baseline every candidate config is timed
    against."""
    run(hidden, w1, w2, router_logits, topk_weights)


def config_name(config: MoeConfig) -> str:
    return f"config_{config.code()}"


def table_name(table: dict[int, MoeConfig]) -> str:
    return "table_" + "_".join(f"{m}x{table[m].code()}" for m in sorted(table))


def parse_table(name: str) -> dict[int, MoeConfig]:
    entries = name.removeprefix("table_").split("_")
    table = {}
    for entry in entries:
        tokens, _, code = entry.partition("x")
        table[int(tokens)] = MoeConfig.from_code(code)
    return table


def named(name: str, runner: Callable) -> Callable:
    """The op a `config_*` or `table_*` attribute names, calling `runner(hidden, w1, w2, router_logits,
    topk_weights, config)` (this module's `run`, or op_fp8's)."""
    if name.startswith("config_"):
        config = MoeConfig.from_code(name.removeprefix("config_"))
        return lambda hidden, w1, w2, router_logits, topk_weights: runner(hidden, w1, w2, router_logits,
                                                                         topk_weights, config)
    if name.startswith("table_"):
        table = parse_table(name)
        return lambda hidden, w1, w2, router_logits, topk_weights: runner(
            hidden, w1, w2, router_logits, topk_weights, table[nearest(table, hidden.shape[0])])
    raise AttributeError(name)


def __getattr__(name: str) -> Callable:
    try:
        return named(name, run)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
