"""Targets: every spec's SGLang target exists in the pinned SGLang; parsing, rebinding, loud failures."""
from __future__ import annotations

import sys

import pytest

from astra_sglang.errors import AstraError
from astra_sglang.extraction.static_targets import static_check
from astra_sglang.patching.targets import rebind, resolve
from astra_sglang.patchset.manifest import Target
from astra_sglang.patchset.store import PatchStore
from astra_sglang.paths import patches_dir
from astra_sglang.specs.registry import all_specs

SGLANG_TARGETS = [(s.name, f"{t.module}:{t.attr}") for s in all_specs() for t in s.sglang_targets]
# What `launch` patches: the shipped manifests name call-site globals (e.g. flashinfer_backend:merge_state).
SHIPPED_TARGETS = sorted({(e.op, str(t)) for e in PatchStore(patches_dir()).entries() for t in e.targets})


def test_pinned_sglang_installed():
    from importlib.metadata import version

    assert version("sglang") == "0.5.17", "tests/patching/requirements.txt pins the GPU runtime kit's SGLang"


@pytest.mark.parametrize("op,target", SGLANG_TARGETS + SHIPPED_TARGETS,
                         ids=[t for _, t in SGLANG_TARGETS + SHIPPED_TARGETS])
def test_every_spec_target_is_bound_in_pinned_version(op, target):
    # Static: SGLang binds these names only under `if _is_cuda:`, so importing on CPU cannot show them.
    check = static_check(Target.parse(target))
    if check.status == "not-installed":
        pytest.skip(check.detail + " (flashinfer next to CPU torch breaks SGLang's imports)")
    assert check.status == "ok", check.detail


def test_static_check_reports_missing():
    assert static_check(Target.parse("sglang.srt.layers.layernorm:no_such_kernel")).status == "missing-attr"
    assert static_check(Target.parse("sglang.srt.layers.no_such_module:rmsnorm")).status == "missing-module"
    assert static_check(Target.parse("no_such_package_xyz.mod:f")).status == "not-installed"


@pytest.mark.parametrize("text", ["sglang.srt.layers.layernorm", "a:", ":b", "a:b.c"])
def test_bad_target_text(text):
    with pytest.raises(AstraError):
        Target.parse(text)


def test_resolve_missing_fails_loudly(fake_modules):
    with pytest.raises(AstraError, match="has no 'nope'"):
        resolve(Target.parse("astra_fake_layers:nope"))
    with pytest.raises(AstraError, match="cannot import"):
        resolve(Target.parse("astra_fake_missing_mod:f"))


def test_rebind_rewrites_every_copy(fake_modules):
    import astra_fake_kernels
    import astra_fake_layers

    original = astra_fake_kernels.silu_and_mul
    new = lambda *a, **k: "new"  # noqa: E731
    names = rebind(Target.parse("astra_fake_layers:silu_and_mul"), original, new)
    assert names[0] == "astra_fake_layers:silu_and_mul"
    assert "astra_fake_kernels:silu_and_mul" in names
    assert astra_fake_layers.forward(None) == "new" and astra_fake_kernels.silu_and_mul is new
    assert sys.modules["astra_fake_layers"].silu_and_mul is new


@pytest.mark.gpu
@pytest.mark.parametrize("op,target", SGLANG_TARGETS, ids=[t for _, t in SGLANG_TARGETS])
def test_every_spec_target_resolves_live(op, target):
    """On a CUDA machine with SGLang's kernels installed: the real import binds every target."""
    pytest.importorskip("sgl_kernel")
    t = Target.parse(target)
    if static_check(t).status == "not-installed":
        pytest.skip(f"{t.package} not installed")
    assert callable(resolve(t))
