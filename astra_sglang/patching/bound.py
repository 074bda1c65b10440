"""What the Triton launch and source patches share: an object the patch layer binds in the place of SGLang's
`original` (module:attr), told of every call, counting those it served as kernel calls and the rest as fallbacks,
and able to put SGLang's own object back."""
from __future__ import annotations

import sys

from astra_sglang.patching.stats import OpStats


class BoundPatch:
    fn: object
    """What the patch layer binds (set by the subclass, with `fn.__astra_op__ = self`)."""

    def __init__(self, original, stats: OpStats, module: str, attr: str):
        self.original, self.stats, self.module, self.attr = original, stats, module, attr

    def count(self, applied: bool) -> None:
        self.stats.calls += 1
        if applied:
            self.stats.kernel_calls += 1
        else:
            self.stats.fallbacks += 1

    def restore(self) -> None:
        """SGLang's own object back in its module (where the patch is still the one bound there)."""
        module = sys.modules.get(self.module)
        if module is not None and getattr(module, self.attr, None) is self.fn:
            setattr(module, self.attr, self.original)
