"""SGLang's Triton attention as the evaluator calls it (specs extract/decode_attention.toml and
extend_attention.toml): SGLang's own `decode_attention_fwd` / `extend_attention_fwd` on the paged layout the
triton backend builds (attn_layout), with SGLang's own launch config or a named one.

    py:astra_sglang.triton.attention.op:decode_sglang_pick            SGLang's launcher as it is (the baseline)
    py:astra_sglang.triton.attention.op:decode_config_h16n64w4s2      one config at every shape
    py:astra_sglang.triton.attention.op:decode_table_1x1024xh16n64w4s2_64x4096xh16n32w4s2
                                 per bucket: (batch, kv length) or (extend, prefix length), the nearest entry

A config is applied by the same `ConfiguredKernel` the live patch installs, put in the launcher's kernel
global for the call. The index tensors, the kv-split counts (SGLang's own `get_num_kv_splits_triton`, as
the backend runs it) and the split scratch are built once per shape and device and shared by every config.
A config the GPU cannot run (Triton's OutOfResources) declines the shape (NotImplementedError).
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

from astra_sglang.triton.attention.launch import ConfiguredKernel, fixed
from astra_sglang.triton.attention.layout import decode_slots, extend_slots
from astra_sglang.triton.attention.space import AttnConfig
from astra_sglang.triton.attention.targets import sglang_module, swapped, target

KV_SPLITS = 8
"""The server's --triton-attention-num-kv-splits default: the bound of the per-request split count."""


@functools.lru_cache(maxsize=32)
def _decode_meta(batch: int, kv_len: int, heads: int, kv_heads: int, head_dim: int, splits: int, device: str):
    indptr, indices = decode_slots(batch, kv_len)
    indptr, indices = indptr.to(device), indices.to(device)
    seq_lens = torch.full((batch,), kv_len, dtype=torch.int32, device=device)
    num_splits = torch.empty((batch,), dtype=torch.int32, device=device)
    from sglang.kernels.ops.attention.metadata import get_num_kv_splits_triton

    cores = torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
    get_num_kv_splits_triton[(1,)](num_splits, seq_lens, batch, 1, heads, kv_heads, splits, cores,
                                   MAX_NUM_SEQ=max(256, 1 << (batch - 1).bit_length()))
    logits = torch.empty((batch, heads, splits, head_dim), dtype=torch.float32, device=device)
    lse = torch.empty((batch, heads, splits), dtype=torch.float32, device=device)
    return indptr, indices, num_splits, logits, lse


@functools.lru_cache(maxsize=32)
def _extend_meta(extend: int, prefix: int, device: str):
    return tuple(t.to(device) for t in extend_slots(extend, prefix))


def _oversized(exc: Exception) -> bool:
    return type(exc).__name__ in ("OutOfResources", "CompilationError")


def _run(kernel: str, call: Callable, config: AttnConfig | Callable | None) -> None:
    t = target(kernel)
    module = sglang_module(kernel)
    if config is None:
        return call(module)
    choose = config if callable(config) else fixed(config)
    try:
        with swapped(module, **{t.kernel: ConfiguredKernel(getattr(module, t.kernel), kernel, choose)}):
            call(module)
    except Exception as exc:  # noqa: BLE001 - only Triton's resource errors are re-labelled
        if _oversized(exc):
            raise NotImplementedError(f"config does not fit this GPU: "
                                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
        raise


def decode(q, k_buffer, v_buffer, o, config=None, splits: int = KV_SPLITS) -> None:
    batch, heads, head_dim = q.shape
    kv_len = k_buffer.shape[0] // batch
    meta = _decode_meta(batch, kv_len, heads, k_buffer.shape[1], head_dim, splits, str(q.device))
    indptr, indices, num_splits, logits, lse = meta

    def call(module):
        module.decode_attention_fwd(q, k_buffer, v_buffer, o, indptr, indices, logits, lse, num_splits, splits,
                                    head_dim ** -0.5, 1.0, 1.0)
    _run("decode_attention", call, config)


def extend(q, k_extend, v_extend, o, k_buffer, v_buffer, config=None) -> None:
    rows = q.shape[0]
    qo_indptr, kv_indptr, kv_indices = _extend_meta(rows, k_buffer.shape[0] - rows, str(q.device))

    def call(module):
        module.extend_attention_fwd(q, k_extend, v_extend, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                                    None, True, None, rows, 1.0, 1.0)
    _run("extend_attention", call, config)


def decode_sglang_pick(q, k_buffer, v_buffer, o) -> None:
    """SGLang's decode attention with its own launch config: the baseline of every decode config."""
    decode(q, k_buffer, v_buffer, o)


def extend_sglang_pick(q, k_extend, v_extend, o, k_buffer, v_buffer) -> None:
    """SGLang's extend attention with its own launch config: the baseline of every extend config."""
    extend(q, k_extend, v_extend, o, k_buffer, v_buffer)


PREFIX = {"decode_attention": "decode", "extend_attention": "extend"}


Bucket = tuple[int, int]
"""decode: (batch, kv length); extend: (extend length, prefix length)."""


def table_name(kernel: str, table: dict[Bucket, AttnConfig]) -> str:
    return f"{PREFIX[kernel]}_table_" + "_".join(f"{a}x{b}x{table[a, b].code()}" for a, b in sorted(table))


def parse_table(kernel: str, text: str) -> dict[Bucket, AttnConfig]:
    table = {}
    for entry in text.split("_"):
        a, b, code = entry.split("x", 2)
        table[int(a), int(b)] = AttnConfig.from_code(kernel, code)
    return table


def nearest_entry(table: dict[Bucket, AttnConfig], bucket: Bucket) -> AttnConfig:
    """The bucket's own entry, else the nearest (first dim, then second; ties to the smaller)."""
    return table[min(table, key=lambda k: (abs(k[0] - bucket[0]), abs(k[1] - bucket[1]), k))]


def _op(kernel: str, choose: Callable[[Bucket], AttnConfig]) -> Callable:
    if kernel == "decode_attention":
        def op(q, k_buffer, v_buffer, o) -> None:
            decode(q, k_buffer, v_buffer, o, choose((q.shape[0], k_buffer.shape[0] // q.shape[0])))
        return op

    def op(q, k, v, o, kb, vb) -> None:
        extend(q, k, v, o, kb, vb, choose((q.shape[0], kb.shape[0] - q.shape[0])))
    return op


def __getattr__(name: str) -> Callable:
    for kernel, prefix in PREFIX.items():
        if name.startswith(f"{prefix}_config_"):
            config = AttnConfig.from_code(kernel, name.removeprefix(f"{prefix}_config_"))
            return _op(kernel, lambda bucket: config)
        if name.startswith(f"{prefix}_table_"):
            table = parse_table(kernel, name.removeprefix(f"{prefix}_table_"))
            return _op(kernel, lambda bucket: nearest_entry(table, bucket))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
