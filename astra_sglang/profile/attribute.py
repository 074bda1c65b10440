"""Which op a GPU kernel belongs to, and what the tool can do about it.

A kernel is matched, in order, to: an op with a spec (the `__global__` names of its sources in extract/, of
the patch set's patches, the user folder's included, and of our own first kernels), a family of SGLang ops
that have no spec yet, a library family the tool does not touch (GEMMs, attention), or framework glue. The
rules are patterns over the kernel's function name; the first that matches wins.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.kernels.variants import VARIANTS
from astra_sglang.patchset.store import PatchStore
from astra_sglang.paths import kernels_dir
from astra_sglang.profile.records import Kind
from astra_sglang.specs.registry import all_specs

# `__global__ void [__launch_bounds__(a, (b) ? c : d)] [// comment] NAME(`: one level of nested parentheses.
GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*)?void\s+"
                    r"(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*(?://[^\n]*)?\s*)?(\w+)\s*\(")


@dataclass(frozen=True)
class Owner:
    kind: Kind
    op: str
    action: str


NO_SPEC = "an SGLang op with no spec here yet: onboard it to optimize it"

# (pattern over the short name or the full name, kind, op, action): SGLang ops without a spec and libraries.
RULES: tuple[tuple[str, Kind, str, str], ...] = (
    (r"fused_moe_kernel", "sglang", "fused_moe (Triton)",
     "SGLang's Triton fused MoE: its block-size config is per GPU and expert shape; no spec here yet"),
    (r"_fwd_grouped_kernel|_fwd_kernel_stage|decode_att", "sglang", "decode attention (Triton)",
     "SGLang's Triton decode attention (--attention-backend triton); no spec here yet"),
    (r"^_fwd_kernel$|extend_att", "sglang", "extend attention (Triton)",
     "SGLang's Triton extend/prefill attention (--attention-backend triton); no spec here yet"),
    (r"rotary|rope", "sglang", "rotary embedding", NO_SPEC),
    (r"store_kvcache|set_kv_buffer|kv_buffer|copy_kv", "sglang", "KV cache store",
     NO_SPEC),
    (r"per_token_group_quant|quant_fp8|scaled_fp8", "sglang", "fp8 quantization",
     NO_SPEC),
    (r"topk|moe_align|moe_sum|count_and_sort", "sglang", "MoE routing",
     NO_SPEC),
    (r"gelu", "sglang", "gelu (other forms)", NO_SPEC),
    (r"nvjet|gemm|cutlass|xmma|splitKreduce|cublas|Kernel2|wgmma|_gemm_", "library", "GEMM",
     "a cuBLAS/CUTLASS GEMM: not a target of this tool (its time follows the GEMM library and the shapes)"),
    (r"flash|fmha|BatchPrefill|BatchDecode|PrefillWithKVCache|Attention|attention|MergeState|merge_state", "library",
     "attention", "an attention library kernel (flashinfer / flash-attention): not a target of this tool"),
    (r"sampling|argmax|[Ss]ort|radix|softmax|multinomial|Sampling", "other", "sampling",
     "sampling and logits processing: framework code"),
    (r"elementwise|reduce_kernel|CatArray|index|[Cc]opy|fill|Memcpy|Memset|embedding|gather|scatter|cumsum|arange",
     "other", "PyTorch glue", "PyTorch elementwise, copy and index kernels between the ops"),
)


def short_name(name: str) -> str:
    """`void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(...)` -> FusedAddRMSNormKernel;
    `void (anonymous namespace)::act_and_mul_kernel<...>(...)` -> act_and_mul_kernel."""
    head = re.sub(r"^void\s+", "", name.strip().replace("(anonymous namespace)::", ""))
    depth, cut = 0, len(head)
    for i, ch in enumerate(head):  # the first '<' or '(' at depth 0 ends the qualified name
        if ch in "<(" and depth == 0:
            cut = i
            break
    return head[:cut].split("::")[-1].strip() or name


# Ops that share a kernel template with another op (act_and_mul_kernel, flashinfer's RMSNormKernel, our files
# built with ASTRA_ACT / ASTRA_GEMMA): the full name's template arguments tell which one ran, where they can.
# SGLang's JIT activation kernel names its kind as a number (kSiLU 0, kGELU 1, kGELUTanh 2), sgl-kernel's by the
# function, ours by the activation type. flashinfer takes Gemma's 1 + weight as a runtime argument: a trace cannot
# tell gemma_rmsnorm from rmsnorm there, and the plain op (no marker) is named.
VARIANT_MARKERS = (
    ("gelu_tanh_and_mul", r"gelu_tanh|GeluTanh|ActivationKind\)2"),
    ("gelu_and_mul", r"gelu|Gelu|ActivationKind\)1"),
    ("gemma_rmsnorm", r"[Gg]emma"),
    ("gemma_fused_add_rmsnorm", r"[Gg]emma"),
)


@functools.cache
def spec_kernels() -> dict[str, tuple[str, ...]]:
    """__global__ name -> the spec ops it serves, from every spec's sources, the patch set's layers (a user
    folder's patch is what its server runs) and our first kernels (plain ops first)."""
    names: dict[str, list[str]] = {}
    specs = {s.name: s for s in all_specs()}
    for spec in specs.values():
        for loc in spec.sources.values():
            for kernel in (loc.kernel, *loc.also):
                names.setdefault(kernel, []).append(spec.name)
    for folder in (*PatchStore().roots, kernels_dir()):
        for path in sorted(Path(folder).glob("**/*.cu")):
            op = path.parent.name if path.name == "kernel.cu" else path.stem
            if op in specs:
                for name in GLOBAL.findall(path.read_text()):
                    names.setdefault(name, []).append(op)
    for op, variant in VARIANTS.items():  # their patches build the base op's files
        for ops in names.values():
            if variant.base in ops and op in specs:
                ops.append(op)
    marked = {op for op, _ in VARIANT_MARKERS}
    return {k: tuple(sorted(dict.fromkeys(v), key=lambda op: (op in marked, op))) for k, v in names.items()}


def spec_op(short: str, name: str) -> str | None:
    """The spec op a kernel belongs to: of the ops sharing its template, the one its full name marks, else the
    first unmarked one."""
    ops = spec_kernels().get(short, ())
    for op, pattern in VARIANT_MARKERS:
        if op in ops and re.search(pattern, name):
            return op
    plain = [op for op in ops if op not in VARIANTS]
    return plain[0] if plain else None


def _triton(op: str) -> bool:
    return any(getattr(loc, "language", "") == "triton" for s in all_specs() if s.name == op for loc in s.sources.values())


def owner(name: str) -> Owner:
    short = short_name(name)
    op = spec_op(short, name)
    if op:
        if _triton(op):  # SGLang's own Triton kernel: its launch config is tuned, the kernel stays SGLang's
            return Owner("spec", op, f"spec extract/{op}.toml: `astra-sglang tune {op}` (buckets: --profile PROFILE.json)")
        return Owner("spec", op, f"spec extract/{op}.toml: `astra-sglang optimize {op}` (shapes: --shapes PROFILE.json)")
    for pattern, kind, family, action in RULES:
        if re.search(pattern, short) or re.search(pattern, name):
            return Owner(kind, family, action)
    return Owner("other", "", "unknown kernel")
