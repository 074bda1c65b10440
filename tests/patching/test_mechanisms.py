"""Patches land in children started with multiprocessing spawn, through the import hook (sitecustomize on
PYTHONPATH) and through SGLang's own plugin system; missing targets fail loudly in every mechanism."""
from __future__ import annotations

import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest
import spawn_children
from patch_folders import write_patch

from astra_sglang.errors import AstraError
from astra_sglang.patching import hook, runtime


def _spawn(fn):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn).result(timeout=120)


def _env(monkeypatch, patch_dir, stats, mechanism):
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", str(patch_dir))
    monkeypatch.setenv("ASTRA_SGLANG_VERIFY_RATE", "1.0")
    monkeypatch.setenv("ASTRA_SGLANG_STATS_DIR", str(stats))
    monkeypatch.setenv("ASTRA_SGLANG_MECHANISM", mechanism)


def _assert_engaged(result, stats):
    assert result["pid"] != os.getpid() and result["close"]
    op = result["stats"]["ops"]["silu_and_mul"]
    assert op["calls"] == 1 and op["kernel_calls"] == 1 and op["shadow_checks"] == 1 and not op["disabled"]
    on_disk = json.loads((stats / f"astra-{os.uname().nodename}-{result['pid']}.json").read_text())
    assert on_disk["ops"]["silu_and_mul"]["calls"] == 1 and on_disk["pid"] == result["pid"]
    return on_disk


def test_import_hook_lands_in_spawned_child(fake_modules, patch_dir, tmp_path, monkeypatch):
    stats = tmp_path / "stats"
    _env(monkeypatch, patch_dir, stats, "import-hook")
    monkeypatch.setenv("ASTRA_SGLANG_TARGET_MODULES", "astra_fake_layers")
    folder = hook.write_sitecustomize(tmp_path / "hook")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    result = _spawn(spawn_children.import_hook_child)
    assert result["check"] == {"finder_installed": True, "layers_patched": True, "kernels_patched": True}
    on_disk = _assert_engaged(result, stats)
    assert on_disk["mechanism"] == "import-hook"
    assert "astra_fake_kernels:silu_and_mul" in on_disk["ops"]["silu_and_mul"]["targets"]


def test_plugin_lands_in_spawned_child(fake_modules, patch_dir, tmp_path, monkeypatch):
    # An installed distribution's entry point, as pyproject will declare it, found by SGLang's load_plugins().
    dist = tmp_path / "eps" / "astra_sglang_plugin_test-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: astra-sglang-plugin-test\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text(f"[{hook.PLUGIN_GROUP}]\n{hook.PLUGIN_NAME} = {hook.PLUGIN_VALUE}\n")
    monkeypatch.syspath_prepend(str(dist.parent))
    assert hook.plugin_available()
    stats = tmp_path / "stats"
    _env(monkeypatch, patch_dir, stats, "plugin")
    monkeypatch.setenv("SGLANG_PLUGINS", hook.PLUGIN_NAME)
    result = _spawn(spawn_children.plugin_child)
    assert result["check"] == {"layers_wrapped": True, "same_in_kernels": True}
    assert _assert_engaged(result, stats)["mechanism"] == "plugin"


def test_direct_install(fake_modules, patch_dir, tmp_path):
    runtime.set_launcher_factory(lambda entry, store: spawn_children.standin_launcher(), device_type="cpu")
    rt = runtime.install(patch_dir, verify_rate=0.0, stats_dir=tmp_path / "s")
    import astra_fake_layers
    import torch

    astra_fake_layers.forward(torch.randn(2, 8))
    assert rt.stats.ops["silu_and_mul"].kernel_calls == 1
    assert set(rt.patched) >= {"astra_fake_layers:silu_and_mul", "astra_fake_kernels:silu_and_mul"}
    rt.install_all()  # idempotent: already ours
    assert astra_fake_layers.silu_and_mul.__astra_op__.original.__module__ == "astra_fake_kernels"


def test_disabled_patch_is_not_installed(fake_modules, tmp_path):
    write_patch(tmp_path / "p", enabled=False)
    runtime.set_launcher_factory(lambda entry, store: spawn_children.standin_launcher(), device_type="cpu")
    runtime.install(tmp_path / "p")
    import astra_fake_layers

    assert not hasattr(astra_fake_layers.silu_and_mul, "__astra_op__")


def test_missing_target_fails_loudly_direct(fake_modules, tmp_path):
    write_patch(tmp_path / "p", targets=("astra_fake_layers:nope",))
    runtime.set_launcher_factory(lambda entry, store: spawn_children.standin_launcher(), device_type="cpu")
    with pytest.raises(AstraError, match="has no 'nope'"):
        runtime.install(tmp_path / "p")


def test_missing_target_fails_loudly_plugin(fake_modules, tmp_path, monkeypatch):
    write_patch(tmp_path / "p", targets=("astra_fake_layers:nope",))
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", str(tmp_path / "p"))
    monkeypatch.setenv("ASTRA_SGLANG_MECHANISM", "plugin")
    runtime.set_launcher_factory(lambda entry, store: spawn_children.standin_launcher(), device_type="cpu")
    with pytest.raises(SystemExit, match="astra-sglang: .*has no 'nope'"):  # escapes load_plugins' except
        hook.sglang_plugin()


def test_missing_target_fails_loudly_import_hook(fake_modules, tmp_path, monkeypatch):
    write_patch(tmp_path / "p", targets=("astra_fake_layers:nope",))
    monkeypatch.setenv("ASTRA_SGLANG_PATCHES", str(tmp_path / "p"))
    monkeypatch.setenv("ASTRA_SGLANG_MECHANISM", "import-hook")
    runtime.set_launcher_factory(lambda entry, store: spawn_children.standin_launcher(), device_type="cpu")
    finder = hook.install_import_hook({"astra_fake_layers"})
    try:
        with pytest.raises(AstraError, match="has no 'nope'"):
            import astra_fake_layers  # noqa: F401
    finally:
        sys.meta_path.remove(finder)


def test_plugin_inactive_without_config(monkeypatch):
    monkeypatch.delenv("ASTRA_SGLANG_PATCHES", raising=False)
    hook.sglang_plugin()  # a plain `sglang serve` with astra-sglang installed stays unpatched
    assert runtime.current() is None
