"""The kernel-source provider: the one interface through which a config search (the tuner, the screening tier)
and the evaluator op reach a source variant of SGLang's fused_moe_kernel.

    provider = KernelSourceProvider("splitk")            # or "agent-<hash>" (sources.register)
    provider.extend(config, tokens, shape)               # the knob's values as more points of the space
    with provider.installed(variant, shape):             # SGLang's fused_experts now launches the variant
        with override_config(variant.config.sglang()):   # (the caller sets the config, as for any config)
            fused_experts(...)

`installed` swaps one module global, the launcher name SGLang's fused_experts calls, for a SplitLauncher with the
variant's splits, for the duration only: nothing else in the process sees it. `kernel` is the variant's Triton
JITFunction and `splitk_launch.variant_args` the (grid, keywords) of its launch, for a compile-ahead step.
`source_hash` names the variant's text, for caching what was measured with it.
"""
from __future__ import annotations

import contextlib
import functools
import sys

from astra_sglang.triton.moe import knobs, sources
from astra_sglang.triton.moe.splitk_launch import SplitLauncher, fixed

FUSED_MOE_MODULE = "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe"
LAUNCHER_NAME = "invoke_fused_moe_kernel"


class KernelSourceProvider:
    def __init__(self, name: str = sources.SPLITK):
        self.name = name

    @functools.cached_property
    def source(self) -> sources.VariantSource:
        return sources.by_name(self.name)

    @property
    def source_hash(self) -> str:
        return self.source.text_hash

    @property
    def kernel(self):
        return sources.kernel(self.source)

    def extend(self, config, tokens: int, shape, sms: int = knobs.SMS) -> list[knobs.Variant]:
        """`config` and its split variants worth measuring at `tokens` tokens of `shape` (a MoeShape)."""
        return knobs.extend(config, tokens, shape.experts, shape.inter, shape.hidden, shape.topk, sms)

    @functools.cache  # noqa: B019 - one provider per variant source and process
    def _launcher(self, original, up: int, down: int, experts: int, inter: int, hidden: int) -> SplitLauncher:
        return SplitLauncher(original, self.kernel, fixed(up, down, experts, inter, hidden),
                             variant_at_one=self.name != sources.SPLITK)

    @contextlib.contextmanager
    def installed(self, variant: knobs.Variant, shape):
        """SGLang's fused_experts launches this variant with its splits while inside. The split-K variant at
        split 1 is SGLang's kernel: SGLang's own launcher runs it; another origin's variant runs at every split."""
        if variant.split.trivial and self.name == sources.SPLITK:
            yield
            return
        module = sys.modules[FUSED_MOE_MODULE]
        original = getattr(module, LAUNCHER_NAME)
        original = getattr(original, "original", original)  # never wrap a launcher of ours
        launcher = self._launcher(original, variant.split.up, variant.split.down, shape.experts, shape.inter,
                                  shape.hidden)
        setattr(module, LAUNCHER_NAME, launcher)
        try:
            yield launcher
        finally:
            setattr(module, LAUNCHER_NAME, original)
