"""The shapes fused MoE runs with in a server: the model's expert shape (config.json) and the batch sizes
(SGLang's config buckets; profile/buckets.py finds the ones a profile recorded the kernel in)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.specs.dtypes import ELEMENT_BYTES

KERNEL = "fused_moe_kernel"
DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16"}
QUANT_FLAGS = ("use_fp8_w8a8", "use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16")
"""fused_experts' quantization switches (SGLang's tuner passes them all, by name)."""


@dataclass(frozen=True)
class Quant:
    """What a quantization changes around the kernel: the facts callers ask a shape for, not its name."""

    weight_bytes: int | None
    """Bytes of one stored weight element (None: the activations' dtype's)."""
    gemm_rate: float
    """The GEMMs' tensor-core rate over the activations' dtype's (Hopper runs fp8 at twice bf16's)."""
    flags: tuple[str, ...] = ()
    """The QUANT_FLAGS it sets."""
    spec: str = "fused_moe"
    """The strict evaluator's spec (extract/SPEC.toml) for this precision: its reference rounds as the kernel does."""
    op: str = "astra_sglang.triton.moe.op"
    """The module of its `py:` ops (sglang_pick, config_*, table_*)."""


QUANTS = {"": Quant(None, 1.0),
          "fp8_w8a8": Quant(1, 2.0, ("use_fp8_w8a8",), "fused_moe_fp8", "astra_sglang.triton.moe.op_fp8")}
"""Weight/activation quantizations a shape can name: none, or SGLang's fp8_w8a8 with per-tensor scales (one per
expert for the weights, static ones for the activations: the layout of per-tensor FP8 checkpoints such as
Mixtral-8x7B-Instruct FP8; their values: fp8.py). Block-quantized fp8 (block_shape) is not covered."""


@dataclass(frozen=True)
class MoeShape:
    """One MoE layer's expert shape as SGLang's fused MoE sees it (per tensor-parallel rank)."""

    experts: int
    inter: int
    """N: the experts' intermediate size per rank (w2's last dim; SGLang's config files' N)."""
    hidden: int
    topk: int
    dtype: str = "bfloat16"
    """The activations' dtype (with fp8_w8a8 too: SGLang quantizes them inside the call)."""
    quant: str = ""
    """"" or "fp8_w8a8" (QUANTS): SGLang's config files name it (`,dtype=fp8_w8a8`)."""

    def __post_init__(self):
        if self.quant not in QUANTS:
            known = ", ".join(q or "(none)" for q in QUANTS)
            raise AstraError(f"unknown MoE quantization {self.quant!r}: one of {known}")

    @property
    def quantized(self) -> bool:
        return bool(self.quant)

    @property
    def config_dtype(self) -> str | None:
        """The dtype SGLang's config lookup and file names take (None: bf16/fp16)."""
        return self.quant or None

    @property
    def script_dtype(self) -> str:
        """SGLang's tuner script's --dtype ("auto": the model's own)."""
        return self.quant or "auto"

    @property
    def precision(self) -> str:
        """What the shape computes in, as records and labels name it: its quantization, else its dtype."""
        return self.quant or self.dtype

    @property
    def element_bytes(self) -> int:
        """Bytes of one activation element (hidden states, intermediates: `dtype` whatever the quantization)."""
        return ELEMENT_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> int:
        """Bytes of one stored weight element (a kernel's weight tiles too)."""
        return QUANTS[self.quant].weight_bytes or self.element_bytes

    @property
    def gemm_rate(self) -> float:
        return QUANTS[self.quant].gemm_rate

    @property
    def spec(self) -> str:
        """The strict evaluator's kernel (spec) name for this shape's precision."""
        return QUANTS[self.quant].spec

    def op(self, name: str) -> str:
        """The `py:` path of one of this precision's ops (sglang_pick, config_*, table_*)."""
        return f"py:{QUANTS[self.quant].op}:{name}"

    def quant_flags(self) -> dict[str, bool]:
        """fused_experts' quantization switches, every one by name."""
        return {flag: flag in QUANTS[self.quant].flags for flag in QUANT_FLAGS}

    def shape(self, tokens: int) -> tuple[int, int, int, int, int]:
        """The spec's shape (tokens, experts, inter, hidden, topk)."""
        return (tokens, self.experts, self.inter, self.hidden, self.topk)

    def describe(self) -> str:
        return f"E={self.experts} N={self.inter} hidden={self.hidden} topk={self.topk} {self.precision}"


def from_config(path: str | Path, tp: int = 1) -> MoeShape:
    """The expert shape of a Hugging Face config.json: Qwen2/3-MoE (num_experts, moe_intermediate_size),
    DeepSeek-style (n_routed_experts), Mixtral (num_local_experts, intermediate_size); N divided by the
    tensor-parallel size as SGLang shards it (no expert parallelism)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AstraError(f"cannot read model config {path}: {exc}") from None
    cfg = cfg.get("text_config", cfg)
    experts = cfg.get("num_experts") or cfg.get("n_routed_experts") or cfg.get("num_local_experts")
    topk = cfg.get("num_experts_per_tok")
    inter = cfg.get("moe_intermediate_size") or (cfg.get("intermediate_size") if cfg.get("num_local_experts") else None)
    if not (experts and topk and inter):
        raise AstraError(f"{path} is not a MoE model config (no num_experts / num_experts_per_tok / "
                         f"moe_intermediate_size): architectures {cfg.get('architectures')}")
    if inter % tp:
        raise AstraError(f"{path}: intermediate size {inter} is not divisible by tensor-parallel size {tp}")
    dtype = DTYPES.get(str(cfg.get("torch_dtype", "bfloat16")), "bfloat16")
    return MoeShape(int(experts), int(inter) // tp, int(cfg["hidden_size"]), int(topk), dtype)


def parse_buckets(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise AstraError(f"bad batch sizes {text!r}: write them like 1,64,4096") from None
    if not values or min(values) < 1:
        raise AstraError(f"bad batch sizes {text!r}: positive integers")
    return list(dict.fromkeys(values))
