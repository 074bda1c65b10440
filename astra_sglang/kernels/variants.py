"""Ops whose kernels are another op's kernel file built with a define: one source per kernel template.

gelu_and_mul and gelu_tanh_and_mul run silu_and_mul's kernel with another activation (ASTRA_ACT), the Gemma norms
run rmsnorm's / fused_add_rmsnorm's with the weight applied as 1 + weight (ASTRA_GEMMA), as the merge_state patch
runs merge_attn_states_lse's file with base-2 LSEs. Their first kernels (astra_sglang/kernels/) are built the same way, and
a start kernel that must be one file (the tuner, the LLM loop) is the sibling's text with the defines written at
its top (`materialize`).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from astra_sglang.paths import cache_dir, kernels_dir


@dataclass(frozen=True)
class Variant:
    base: str
    """The op whose kernel files (first kernel, shipped patch) this op builds."""
    defines: dict[str, str] = field(default_factory=dict)


VARIANTS = {
    "gelu_and_mul": Variant("silu_and_mul", {"ASTRA_ACT": "1"}),
    "gelu_tanh_and_mul": Variant("silu_and_mul", {"ASTRA_ACT": "2"}),
    "gemma_rmsnorm": Variant("rmsnorm", {"ASTRA_GEMMA": "1"}),
    "gemma_fused_add_rmsnorm": Variant("fused_add_rmsnorm", {"ASTRA_GEMMA": "1"}),
}


def first_kernel(op: str) -> tuple[Path, dict[str, str]]:
    """Our own first kernel for `op` and the defines it is built with."""
    own = kernels_dir() / f"{op}.cu"
    variant = VARIANTS.get(op)
    if own.is_file() or variant is None:
        return own, {}
    return kernels_dir() / f"{variant.base}.cu", dict(variant.defines)


def materialize(source: Path, defines: dict[str, str], label: str) -> Path:
    """`source` as one file with `defines` written at its top (a cached copy), or `source` itself without any."""
    if not defines:
        return source
    head = "".join(f"#define {k} {v}\n" for k, v in sorted(defines.items()))
    text = f"// {label}: {source.name} built with {' '.join(f'{k}={v}' for k, v in sorted(defines.items()))}\n"
    return cached_source(text + head + source.read_text(), label)


def cached_source(text: str, label: str, folder: str = "variants") -> Path:
    """`text` as a .cu file in the build cache, named by `label` and its hash (written once)."""
    where = cache_dir() / folder
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{label}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.cu"
    if not path.is_file():
        path.write_text(text)
    return path
