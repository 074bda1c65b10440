"""Config patches (kind triton-config): the folder `launch` points SGLang at, SGLang's own lookup reading the
tuned file from it, the lookup counter, launch / list / disable. SGLang's lookup is its installed
fused_moe_triton_config.py, loaded on its own (its package needs CUDA-only imports)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from astra_sglang.cli import launch
from astra_sglang.cli import patch as cli
from astra_sglang.patching import runtime
from astra_sglang.patching.triton_config import base_dir, build_config_dir, is_ours
from astra_sglang.patchset.manifest import PatchManifest
from astra_sglang.patchset.store import PatchStore
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.op import parse_table
from astra_sglang.triton.moe.patch import verify_requests
from astra_sglang.triton.moe.space import MoeConfig

H200 = "NVIDIA H200"
# SGLang 0.5.17 ships an up- and a down-projection file for this shape on an H200 (triton_3_6_0).
E, N = 128, 704
TUNED = {1: MoeConfig(16, 64, 128, 1, 4, 5), 64: MoeConfig(16, 128, 64, 1, 4, 3), 4096: MoeConfig(64, 128, 64, 8, 8, 3)}


def write_config_patch(root, enabled=True, target="sglang.srt.layers.moe.moe_runner.triton_utils."
                       "fused_moe_triton_config:get_moe_configs"):
    folder = root / "fused_moe"
    rel = f"configs/{moe_configs.version_dir(moe_configs.triton_version())}/{moe_configs.file_name(E, N, H200)}"
    moe_configs.write(folder / rel, TUNED)
    manifest = {"op": "fused_moe", "kind": "triton-config", "kernel": "", "dtypes": ["bfloat16"], "targets": [target],
                "enabled": enabled, "provenance": {"method": "tuner", "notes": "test"},
                "configs": [{"path": rel, "experts": E, "inter": N, "hidden": 2048, "topk": 8, "dtype": "bfloat16",
                             "device": "NVIDIA_H200", "triton": moe_configs.triton_version(), "tuned": [1, 64]}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def lookup(monkeypatch):
    module = moe_configs.sglang_module()
    monkeypatch.setattr(module, "get_device_name", lambda: H200)
    monkeypatch.setattr(module, "get_moe_configs", module.get_moe_configs)  # rebound by the patch: restored after
    module.get_moe_configs.cache_clear()
    yield module
    module.get_moe_configs.cache_clear()


@pytest.fixture
def built(tmp_path, monkeypatch):
    monkeypatch.delenv(moe_configs.ENV, raising=False)
    write_config_patch(tmp_path / "patches")
    entries = PatchStore(tmp_path / "patches").enabled()
    return build_config_dir(entries, tmp_path / "moe-configs", base_dir())


def test_sglangs_files_are_all_there_and_ours_over_them(built):
    own = base_dir() / "configs"
    for folder in own.glob("triton_*"):
        theirs = {p.name for p in folder.iterdir() if p.is_file()}
        mine = {p.name for p in (built / "configs" / folder.name).iterdir()}
        assert theirs - mine <= {moe_configs.file_name(E, N, H200, down=True)}
    ours = built / "configs" / moe_configs.version_dir(moe_configs.triton_version()) / moe_configs.file_name(E, N, H200)
    assert is_ours(ours) and not is_ours(next((built / "configs" / "triton_3_6_0").iterdir()))
    assert not list(built.glob(f"configs/*/{moe_configs.file_name(E, N, H200, down=True)}"))


def test_sglangs_lookup_reads_the_tuned_file(built, lookup, monkeypatch):
    monkeypatch.setenv(moe_configs.ENV, str(built))
    assert lookup.get_moe_configs(E, N, None) == {m: c.sglang() for m, c in TUNED.items()}
    # no down-projection file left for this shape: SGLang reuses the tuned up-projection config for both GEMMs
    assert lookup.get_moe_configs(E, N, None, down_moe=True) == {m: c.sglang() for m, c in TUNED.items()}
    # another shape: SGLang's own file, as without the patch
    monkeypatch.delenv(moe_configs.ENV)
    lookup.get_moe_configs.cache_clear()
    own = lookup.get_moe_configs(128, 768, None)
    monkeypatch.setenv(moe_configs.ENV, str(built))
    lookup.get_moe_configs.cache_clear()
    assert own and lookup.get_moe_configs(128, 768, None) == own


def test_lookups_are_counted(built, lookup, monkeypatch, tmp_path):
    monkeypatch.setenv(moe_configs.ENV, str(built))
    write_config_patch(tmp_path / "counted", target=f"{moe_configs.STANDALONE}:get_moe_configs")
    rt = runtime.install(tmp_path / "counted")
    assert lookup.get_moe_configs.__astra_op__ is not None
    assert lookup.get_moe_configs(E, N, None)[64] == TUNED[64].sglang()
    lookup.get_moe_configs(E, N, None, down_moe=True)  # not a lookup of its own: counted once, as the up one
    lookup.get_moe_configs(128, 768, None)
    stats = rt.stats.op("fused_moe")
    assert (stats.calls, stats.kernel_calls, stats.fallbacks) == (3, 2, 1)


def test_launch_points_sglang_at_the_built_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(moe_configs.ENV, raising=False)
    write_config_patch(tmp_path / "patches")
    args = ["--patches", str(tmp_path / "patches"), "--stats-dir", str(tmp_path / "stats"), "--dry-run", "--",
            "--model-path", "M"]
    result = CliRunner().invoke(launch.launch_cmd, args)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith(moe_configs.ENV + "="))
    folder = line.split("=", 1)[1]
    assert folder == str((tmp_path / "stats" / "moe-configs").resolve())
    assert moe_configs.resolve(folder, moe_configs.file_name(E, N, H200), moe_configs.triton_version()).is_file()
    listed = CliRunner().invoke(cli.patch_group, ["list", "--patches", str(tmp_path / "patches")])
    assert "tuner (configs)" in listed.output and "get_moe_configs" in listed.output
    CliRunner().invoke(cli.patch_group, ["disable", "fused_moe", "--patches", str(tmp_path / "patches")])
    again = CliRunner().invoke(launch.launch_cmd, args)
    assert again.exit_code == 1 and "no enabled patches" in again.output


def test_a_users_config_folder_is_the_base(tmp_path, monkeypatch):
    own = tmp_path / "mine" / "configs" / "triton_3_1_0"
    own.mkdir(parents=True)
    (own / "E=9,N=9,device_name=X.json").write_text("{}")
    monkeypatch.setenv(moe_configs.ENV, str(tmp_path / "mine"))
    assert base_dir() == tmp_path / "mine"
    write_config_patch(tmp_path / "patches")
    out = build_config_dir(PatchStore(tmp_path / "patches").enabled(), tmp_path / "built", base_dir())
    assert (out / "configs" / "triton_3_1_0" / "E=9,N=9,device_name=X.json").is_symlink()


def test_verify_checks_the_file_as_sglang_reads_it(tmp_path):
    folder = write_config_patch(tmp_path / "patches")
    (req,) = verify_requests(folder, PatchManifest.load(folder))
    assert parse_table(req.candidate.path.rsplit(":", 1)[1]) == TUNED
    assert [s[0] for s in req.shapes] == [1, 64] and req.baseline.path.endswith(":sglang_pick")
    assert req.shapes[0][1:] == (E, N, 2048, 8)
