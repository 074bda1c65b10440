"""The split-K transform of SGLang's installed fused_moe_kernel: what it changes, that the result is a valid Triton
module, and its refusal (one line naming the cause) where the source is not what it was written against. The
changed sources are made from the installed file at test time, in a temporary folder."""
from __future__ import annotations

import ast
import difflib

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe import sources, splitk


@pytest.fixture(scope="module")
def installed() -> splitk.KernelSource:
    return splitk.read(sources.installed_kernel_file())


def _kernel_text(module_text: str) -> str:
    tree = ast.parse(module_text)
    return ast.unparse(next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == splitk.KERNEL))


def test_reads_sglangs_kernel_helpers_and_launcher(installed):
    assert installed.kernel.name == splitk.KERNEL and [h.name for h in installed.helpers] == list(splitk.HELPERS)
    assert set(splitk.LAUNCHER_PARAMS) <= set(installed.launcher_params)
    assert len(installed.source_hash) == 16 and installed.source_hash == splitk.read(installed.path).source_hash
    assert "def invoke_fused_moe_kernel(" in installed.text


REMOVED = ["for k_start in range(0, K, BLOCK_SIZE_K):", "a_ptrs += BLOCK_SIZE_K * stride_ak",
           "b_ptrs += BLOCK_SIZE_K * stride_bk", "accumulator += bias", "accumulator = accumulator.to(compute_type)"]
ADDED = ["pid_k = tl.program_id(axis=1)", "c_ptr += pid_k * stride_ck", "if a_desc is None:",
         "a_ptrs += pid_k * BLOCK_SIZE_K * stride_ak", "if b_desc is None:", "b_ptrs += pid_k * BLOCK_SIZE_K * stride_bk",
         "for k_start in range(pid_k * BLOCK_SIZE_K, K, BLOCK_SIZE_K * SPLIT_K):",
         "a_ptrs += BLOCK_SIZE_K * SPLIT_K * stride_ak", "b_ptrs += BLOCK_SIZE_K * SPLIT_K * stride_bk",
         "if pid_k == 0:", "accumulator += bias", "if SPLIT_K == 1:", "accumulator = accumulator.to(compute_type)"]


def test_the_transform_changes_what_it_says_and_nothing_else(installed):
    before = ast.unparse(installed.kernel)
    transformed = splitk.transform(installed)
    assert ast.unparse(installed.kernel) == before  # the parsed original is left alone
    assert tuple(a.arg for a in transformed.args.args) == splitk.PARAMS + splitk.ADDED
    body = [ln for ln in before.splitlines() if not ln.startswith(("@", "def "))]  # the signature: checked above
    changed = [ln for ln in ast.unparse(transformed).splitlines() if not ln.startswith(("@", "def "))]
    diff = list(difflib.unified_diff(body, changed, lineterm="", n=0))
    assert [ln[1:].strip() for ln in diff if ln.startswith("-") and not ln.startswith("---")] == REMOVED
    assert [ln[1:].strip() for ln in diff if ln.startswith("+") and not ln.startswith("+++")] == ADDED


def test_the_variant_module_is_valid_triton(installed, tmp_path):
    handle = sources.splitk_source(root=tmp_path)
    text = handle.path.read_text()
    compile(text, str(handle.path), "exec")
    assert handle.base_hash == installed.source_hash and installed.source_hash in handle.path.name
    kernel = sources.kernel(handle)  # decorated by triton.jit: a JITFunction with the launcher's names
    assert {"SPLIT_K", "stride_ck", "BLOCK_SIZE_K"} <= set(kernel.arg_names)
    assert "SPLIT_K" in {kernel.arg_names[i] for i in kernel.constexprs}
    assert sources.splitk_source(root=tmp_path).path == handle.path  # generated once per source hash
    assert sources.by_name("splitk", root=tmp_path).path == handle.path


MUTATIONS = {
    "the helper gone": ("write_zeros_to_output(", "write_zeros(", "uses module names the variant would not have: "
                                                                  "write_zeros"),
    "a parameter renamed": ("    even_Ks: tl.constexpr,", "    even_K: tl.constexpr,", "parameters differ (even_K"),
    "the K loop rewritten": ("for k_start in range(0, K, BLOCK_SIZE_K):",
                             "for k_start in range(0, K, 2 * BLOCK_SIZE_K):", "the K loop"),
    "the cast removed": ("    accumulator = accumulator.to(compute_type)\n", "\n",
                         "`accumulator = accumulator.to(compute_type)` found 0 times"),
    "a launcher parameter gone": ("    router_topk: int = 1,\n", "", "invoke_fused_moe_kernel has no parameter "
                                                                    "router_topk"),
    "a new module name": ("    pid = tl.program_id(axis=0)\n", "    pid = tl.program_id(axis=0) + _OFFSET\n",
                          "module names the variant would not have: _OFFSET"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_changed_source_is_refused_in_one_line(installed, tmp_path, name):
    old, new, expect = MUTATIONS[name]
    text = installed.path.read_text()
    at = text.index(f"def {splitk.LAUNCHER}(" if "launcher" in name else f"def {splitk.KERNEL}(")
    assert old in text[at:], f"the mutation no longer applies to the installed source: {old!r}"
    path = tmp_path / "fused_moe_triton_kernels.py"
    path.write_text(text[:at] + text[at:].replace(old, new, 1))
    with pytest.raises(splitk.SourceMismatch) as info:
        sources.splitk_source(kernel_file=path, root=tmp_path)
    message = str(info.value)
    assert expect in message and "\n" not in message and str(path) in message
    assert not list((tmp_path / "triton-sources").glob("*.py"))  # nothing generated from it


def test_an_unreadable_source_is_an_error(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def fused_moe_kernel(:\n")
    with pytest.raises(AstraError, match="cannot read SGLang's fused MoE kernels"):
        splitk.read(path)


AGENT_ERRORS = {
    "not Python": ("def f(:", "not Python"),
    "no kernel": ("import triton\n", "defines no top-level fused_moe_kernel"),
    "not jitted": ("def fused_moe_kernel(a_ptr):\n    pass\n", "not decorated with @triton.jit"),
    "missing parameters": ("@triton.jit\ndef fused_moe_kernel(a_ptr, SPLIT_K):\n    pass\n",
                           "lacks parameters the launcher passes: a_desc"),
    "extra without default": ("@triton.jit\ndef fused_moe_kernel(" + ", ".join(splitk.PARAMS + splitk.ADDED) +
                              ", EXTRA):\n    pass\n", "extra parameters need defaults: EXTRA"),
}


@pytest.mark.parametrize("name", sorted(AGENT_ERRORS))
def test_an_agent_variant_is_checked_before_it_is_registered(tmp_path, name):
    text, expect = AGENT_ERRORS[name]
    with pytest.raises(AstraError, match=expect):
        sources.register(text, root=tmp_path)


def test_an_agent_variant_with_an_extra_knob_is_registered_by_its_text(tmp_path):
    text = sources.splitk_source(root=tmp_path).path.read_text()
    text = text.replace("SPLIT_K: tl.constexpr)", "SPLIT_K: tl.constexpr, UNROLL: tl.constexpr = 1)")
    handle = sources.register(text, root=tmp_path)
    assert handle.name.startswith("agent-") and handle.path.read_text() == text
    assert sources.by_name(handle.name, root=tmp_path) == handle
    assert sources.register(text, root=tmp_path) == handle
    with pytest.raises(AstraError, match="no Triton variant 'agent-0000'"):
        sources.by_name("agent-0000", root=tmp_path)
