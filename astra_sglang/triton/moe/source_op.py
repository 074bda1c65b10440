"""Fused MoE with a source variant of SGLang's kernel, as the evaluator calls it: `py:` candidates named like
moe_op's, whose configs may carry splits, and whose name may name an agent's registered variant:

    py:astra_sglang.triton.moe.source_op:table_1xm16n64k128g1w4s4su1sd4_64xm32n64k64g8w4s3
    py:astra_sglang.triton.moe.source_op:agent0123456789abcdef__table_1xm16n64k64g1w4s4

The first runs the split-K variant (split 4 on the down projection at batch sizes near 1; at 64 SGLang's own
kernel with that config); the second an agent's variant (sources.register) at every batch size. Everything
else is moe_op.run's: SGLang's fused_experts in place, the config applied with SGLang's override, a config the
GPU cannot run declining the shape; the provider puts the variant at SGLang's launcher for the call only.
`screen` (and `screen_agent<hash>`) is the same call as the screening tier's launch makes it.
"""
from __future__ import annotations

import functools
from typing import Callable

from astra_sglang.triton.moe import op as moe_op
from astra_sglang.triton.moe import sources
from astra_sglang.triton.moe.configs import nearest
from astra_sglang.triton.moe.knobs import Variant
from astra_sglang.triton.moe.provider import KernelSourceProvider
from astra_sglang.triton.moe.shapes import MoeShape

MODULE = "py:astra_sglang.triton.moe.source_op:"
_AGENT = "agent"


@functools.cache
def provider(name: str) -> KernelSourceProvider:
    return KernelSourceProvider(name)


def run(hidden, w1, w2, router_logits, topk_weights, variant: Variant, source: str = sources.SPLITK) -> None:
    moe_op._sglang()  # SGLang's fused MoE module imported: the provider swaps a global of it
    shape = MoeShape(w1.shape[0], w2.shape[2], hidden.shape[1], topk_weights.shape[1])
    with provider(source).installed(variant, shape):
        moe_op.run(hidden, w1, w2, router_logits, topk_weights, variant.config)


def screen(hidden, w1, w2, topk_output, moe_runner_config, config: dict, source: str = sources.SPLITK) -> None:
    """The screening tier's hook (its launch's `variants`, name -> "module:function", calls it with SGLang's
    fused_experts arguments and the config's SGLang dict plus the knob keys, SPLIT_K_UP / SPLIT_K_DOWN): SGLang's
    fused_experts in place on `hidden` with the config, and the variant at its launcher for the call."""
    fused_experts, override_config, _, _ = moe_op._sglang()
    variant = Variant.from_file_entry(config)
    shape = MoeShape(w1.shape[0], w2.shape[2], hidden.shape[1], topk_output[0].shape[1])
    with provider(source).installed(variant, shape), override_config(variant.config.sglang()):
        fused_experts(hidden, w1, w2, topk_output, moe_runner_config=moe_runner_config)


def screen_hook(source: str = sources.SPLITK) -> str:
    """The "module:function" the screening tier's launch calls for `source`'s variant (its `variants` entry)."""
    name = "screen" if source == sources.SPLITK else "screen_" + _AGENT + source.removeprefix(sources.AGENT)
    return MODULE.removeprefix("py:") + name


def table_name(table: dict[int, Variant], source: str = sources.SPLITK) -> str:
    prefix = "" if source == sources.SPLITK else source.replace("-", "") + "__"
    return prefix + "table_" + "_".join(f"{m}x{table[m].code()}" for m in sorted(table))


def candidate_path(table: dict[int, Variant], source: str = sources.SPLITK) -> str:
    return MODULE + table_name(table, source)


def parse(name: str) -> tuple[str, dict[int, Variant]]:
    """(variant source, table) of an attribute name."""
    source = sources.SPLITK
    if name.startswith(_AGENT):
        head, _, name = name.partition("__")
        source = sources.AGENT + head.removeprefix(_AGENT)
    table = {}
    for entry in name.removeprefix("table_").split("_"):
        tokens, _, code = entry.partition("x")
        table[int(tokens)] = Variant.from_code(code)
    return source, table


def _table(source: str, table: dict[int, Variant]) -> Callable:
    def op(hidden, w1, w2, router_logits, topk_weights) -> None:
        run(hidden, w1, w2, router_logits, topk_weights, table[nearest(table, hidden.shape[0])], source)
    return op


def __getattr__(name: str) -> Callable:
    if "table_" in name:
        return _table(*parse(name))
    if name.startswith("screen_" + _AGENT):  # screen_agent<hash>: an agent's registered variant
        return functools.partial(screen, source=sources.AGENT + name.removeprefix("screen_" + _AGENT))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
