"""The dtypes a spec can name: the op's own floating types, fixed floats, integers and indices, bool and fp8.

Kept free of torch (the spec layer loads without it); `torch_dtype` maps a name where torch is at hand. The
ABI codes are the `AstraDType` values of harness_templates/astra_abi.h (one table, both sides).
"""
from __future__ import annotations

from typing import Literal

TensorDType = Literal["float32", "float16", "bfloat16", "float64", "int8", "int32", "int64", "uint8", "bool",
                      "float8_e4m3fn", "float8_e5m2"]
OpDType = Literal["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8", "int32", "int64",
                  "uint8"]
"""The dtypes an op may be instantiated over (its `T`)."""
OP_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8", "int32", "int64", "uint8")
ScalarType = Literal["float", "int", "bool"]

ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "int32": 4, "int64": 8,
                 "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}
FLOATS = frozenset({"float32", "float16", "bfloat16", "float64"})
FP8 = frozenset({"float8_e4m3fn", "float8_e5m2"})
INTEGERS = frozenset({"int8", "int32", "int64", "uint8", "bool"})
"""Compared exactly; poisoned with a sentinel instead of NaN."""

ABI_CODES = {"float32": 0, "float16": 1, "bfloat16": 2, "int32": 3, "int64": 4, "uint8": 5, "bool": 6,
             "float8_e4m3fn": 7, "float8_e5m2": 8, "int8": 9, "float64": 10}
ABI_NAMES = {"float32": "ASTRA_FLOAT32", "float16": "ASTRA_FLOAT16", "bfloat16": "ASTRA_BFLOAT16",
             "int32": "ASTRA_INT32", "int64": "ASTRA_INT64", "uint8": "ASTRA_UINT8", "bool": "ASTRA_BOOL",
             "float8_e4m3fn": "ASTRA_FLOAT8_E4M3", "float8_e5m2": "ASTRA_FLOAT8_E5M2", "int8": "ASTRA_INT8",
             "float64": "ASTRA_FLOAT64"}
CUDA_TYPES = {"float32": "float", "float16": "half", "bfloat16": "__nv_bfloat16", "float64": "double",
              "int8": "int8_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "bool": "bool",
              "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2"}
"""The C++ type a kernel sees for each dtype (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h)."""

ALIASES = {"fp32": "float32", "f32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
           "f16": "float16", "bf16": "bfloat16", "fp64": "float64", "double": "float64", "i32": "int32",
           "int": "int32", "i64": "int64", "long": "int64", "u8": "uint8", "i8": "int8", "fp8": "float8_e4m3fn",
           "e4m3": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "float8_e4m3": "float8_e4m3fn",
           "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2"}


def canonical(name: str) -> str:
    """"bf16" -> "bfloat16", "torch.int64" -> "int64"; ValueError for a name no spec can use."""
    key = name.strip().lower().removeprefix("torch.")
    key = ALIASES.get(key, key)
    if key not in ELEMENT_BYTES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(ELEMENT_BYTES)}")
    return key


def is_exact(name: str) -> bool:
    return name in INTEGERS


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def name_of(dtype) -> str:
    """torch.bfloat16 -> "bfloat16"."""
    return str(dtype).removeprefix("torch.")
