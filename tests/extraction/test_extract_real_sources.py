"""Extraction from real third-party CUDA: the pinned sglang and flashinfer-python wheels from the registry."""
from __future__ import annotations

import json

import pytest

from astra_sglang.extraction.pipeline import extract

CASES = [  # (spec, source folder inside the unpacked wheels, std the source's own build uses)
    ("silu_and_mul", "sglang", "c++20"),
    ("fused_add_rmsnorm", "sglang", "c++20"),
    ("fused_add_rmsnorm", "flashinfer", "c++17"),
    ("rmsnorm", "flashinfer", "c++17"),
    ("merge_state", "flashinfer", "c++17"),
    ("gelu_and_mul", "sglang", "c++20"),
    ("gelu_tanh_and_mul", "sglang", "c++20"),
    ("gemma_rmsnorm", "flashinfer", "c++17"),
    ("gemma_fused_add_rmsnorm", "flashinfer", "c++17"),
]


@pytest.fixture(scope="module")
def extracted(site_dir, tmp_path_factory):
    out = {}
    for kernel, source, _ in CASES:
        folder = tmp_path_factory.mktemp(f"{kernel}-{source}")
        out[(kernel, source)] = extract(kernel, str(site_dir / source), folder)
    return out


@pytest.mark.parametrize(("kernel", "source", "std"), CASES)
def test_extracts_in_time(extracted, kernel, source, std):
    result = extracted[(kernel, source)]
    assert result.source_kind == source
    assert result.seconds < 10, f"{kernel} from {source} took {result.seconds:.1f}s"
    text = result.kernel_cu.read_text()
    assert "ASTRA_ENTRY" in text and '#include "astra_abi.h"' in text
    assert "tvm::ffi" not in text and "TensorView" not in text  # torch / tvm-ffi host code stays out
    prov = json.loads((result.out_dir / "provenance.json").read_text())
    assert prov["source"]["version"] == {"sglang": "0.5.17", "flashinfer": "0.6.15.post1"}[source]
    assert prov["source"]["path"] in prov["files"] and all(len(h) == 64 for h in prov["files"].values())
    assert any(a.startswith("-resource-dir=") for a in prov["clang_args"]) and prov["upstream_compile_flags"]
    assert (result.out_dir / "spec.toml").read_text().startswith(f'name = "{kernel}"')


def test_sglang_bakes_arch(extracted):
    text = extracted[("silu_and_mul", "sglang")].kernel_cu.read_text()
    assert "#define SGL_CUDA_ARCH 900" in text  # without it the PDL code silently disappears
    assert "act_and_mul_kernel<T, ActivationKind::kSiLU" in text


@pytest.mark.parametrize(("kernel", "kind"), [("silu_and_mul", "kSiLU"), ("gelu_and_mul", "kGELU"),
                                             ("gelu_tanh_and_mul", "kGELUTanh")])
def test_one_launcher_template_per_activation(extracted, kernel, kind):
    """SGLang's act_and_mul_kernel, launched with the spec's activation (one shared launcher template)."""
    text = extracted[(kernel, "sglang")].kernel_cu.read_text()
    launches = [ln for ln in text.splitlines() if "<<<" in ln]
    assert launches and all(f"ActivationKind::{kind}," in ln for ln in launches)


@pytest.mark.parametrize(("kernel", "host"), [("gemma_rmsnorm", "GemmaRMSNorm"),
                                             ("gemma_fused_add_rmsnorm", "GemmaFusedAddRMSNorm")])
def test_gemma_launchers_call_flashinfers_gemma_host_entries(extracted, kernel, host):
    text = extracted[(kernel, "flashinfer")].kernel_cu.read_text()
    launcher = text.split("// ---- generated launcher ----", 1)[1]
    assert f"flashinfer::norm::{host}<nv_bfloat16>(" in launcher
    assert "float weight_bias = 1.f;" in text  # the host entry's Gemma bias came along


def test_flashinfer_takes_vec_specializations(extracted):
    text = extracted[("rmsnorm", "flashinfer")].kernel_cu.read_text()
    assert "struct vec_t<nv_bfloat16, vec_size>" in text or "struct vec_t<nv_bfloat16," in text
    assert "#define FLASHINFER_ENABLE_BF16 1" in text
    assert "cublasLt" not in text


@pytest.mark.nvcc
@pytest.mark.parametrize(("kernel", "source", "std"), CASES)
def test_output_compiles_with_plain_nvcc(extracted, kernel, source, std, compile_cu):
    assert compile_cu(extracted[(kernel, source)].kernel_cu, std=std).is_file()
