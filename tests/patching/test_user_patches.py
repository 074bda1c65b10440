"""The user folder's patches (HOME/patches) over the shipped set: listing, enable/disable, launch's env,
and the runtime reading two roots from the environment; an explicit folder still means that folder only."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from patch_folders import write_patch

from astra_sglang import cli as top
from astra_sglang.cli import patch as cli
from astra_sglang.patching import runtime
from astra_sglang.patchset.store import ENV_PATCHES, PatchStore
from astra_sglang.paths import patches_dir


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SGLANG_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(ENV_PATCHES, raising=False)
    return tmp_path / "home"


def invoke(*args):
    return CliRunner().invoke(top.main, [str(a) for a in args])


def rows(output: str) -> dict[str, str]:
    return {line.split()[0]: line for line in output.splitlines()[2:] if line.strip()}


def test_without_a_user_folder_the_set_is_the_shipped_one(home):
    store = PatchStore()
    assert store.roots == [patches_dir()]
    listed = invoke("patch", "list")
    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines()[0].split()[-1] == "from"
    assert all(line.endswith("shipped") for line in rows(listed.output).values())


@pytest.mark.parametrize("enabled", [True, False])
def test_a_user_patch_wins_over_the_shipped_one_and_the_listing_says_so(home, enabled):
    mine = write_patch(home / "patches", op="silu_and_mul", targets=(), enabled=enabled)
    write_patch(home / "patches", op="rmsnorm", targets=(), enabled=True)
    entries = {e.op: e for e in PatchStore().entries()}
    assert entries["silu_and_mul"].folder == mine and entries["silu_and_mul"].enabled is enabled
    assert (entries["silu_and_mul"].origin, entries["silu_and_mul"].shadows) == ("user", "shipped")
    assert entries["gelu_and_mul"].origin == "shipped" and not entries["gelu_and_mul"].shadows
    assert PatchStore().get("silu_and_mul").folder == mine
    listed = invoke("--home", home, "patch", "list")
    assert listed.exit_code == 0, listed.output
    table = rows(listed.output)
    assert table["silu_and_mul"].endswith("user (over shipped)") and " 1.50x " in table["silu_and_mul"]
    assert table["gelu_and_mul"].endswith("shipped")
    assert ("silu_and_mul" in [e.op for e in PatchStore().enabled()]) is enabled


def test_enable_and_disable_touch_the_winning_manifest_only(home):
    mine = write_patch(home / "patches", op="silu_and_mul", targets=())
    shipped = (patches_dir() / "silu_and_mul" / "manifest.json").read_bytes()
    result = invoke("patch", "disable", "silu_and_mul")
    assert result.exit_code == 0 and str(mine) in result.output, result.output
    assert json.loads((mine / "manifest.json").read_text())["enabled"] is False
    assert (patches_dir() / "silu_and_mul" / "manifest.json").read_bytes() == shipped
    assert invoke("patch", "enable", "silu_and_mul").exit_code == 0
    assert json.loads((mine / "manifest.json").read_text())["enabled"] is True


@pytest.mark.parametrize("op", ["silu_and_mul", "gemma_rmsnorm"])
def test_layers_of_an_op_put_the_user_patch_first_and_name_each_one(home, tmp_path, op):
    assert [(e.origin, e.shadows, e.label) for e in PatchStore().layers(op)] == [("shipped", "", f"patches/{op}")]
    mine = write_patch(home / "patches", op=op, targets=())
    user, shipped = PatchStore().layers(op)
    assert (user.folder, user.origin, user.shadows, user.label) == (mine, "user", "shipped", f"user:patches/{op}")
    assert user.describe() == f"the user folder's patch {mine}, over the shipped one"
    assert (shipped.folder, shipped.describe()) == (patches_dir() / op, "the shipped patch")
    assert PatchStore().find(op) == PatchStore().get(op) == user
    other = write_patch(tmp_path / "other", op=op)
    assert PatchStore([tmp_path / "other"]).find(op).describe() == f"the patch in {other}"
    assert PatchStore([home / "patches", tmp_path / "other"]).find(op).describe() == (
        f"the patch in {other}, over the user one")
    assert PatchStore([tmp_path / "missing"]).find(op) is None


def test_an_explicit_folder_is_that_folder_only(home, tmp_path, monkeypatch):
    write_patch(home / "patches", op="rmsnorm", targets=())
    other = tmp_path / "other"
    write_patch(other, op="silu_and_mul")
    store = PatchStore(other)
    assert [(e.op, e.origin) for e in store.entries()] == [("silu_and_mul", str(other))]
    monkeypatch.setenv(ENV_PATCHES, str(other))
    assert PatchStore().roots == [other] and [e.op for e in PatchStore().entries()] == ["silu_and_mul"]
    missing = invoke("patch", "enable", "rmsnorm")
    assert missing.exit_code == 1 and "no patch 'rmsnorm'" in missing.output


def test_launch_hands_both_roots_to_the_server_processes(home, tmp_path):
    write_patch(home / "patches", op="silu_and_mul", targets=())
    result = invoke("launch", "--mechanism", "import-hook", "--no-build", "--stats-dir", tmp_path / "st",
                    "--dry-run", "--", "--model-path", "m")
    assert result.exit_code == 0, result.output
    env = dict(line.split("=", 1) for line in result.output.splitlines() if line.startswith("ASTRA_SGLANG_"))
    roots = env[ENV_PATCHES].split(os.pathsep)
    assert roots == [str(patches_dir().resolve()), str((home / "patches").resolve())]
    assert "sglang.srt.layers.activation" in env["ASTRA_SGLANG_TARGET_MODULES"].split(",")
    # what a spawned process makes of that environment: the same set, the user's patch winning
    config = runtime.RuntimeConfig.from_env(env)
    assert config.patches == tuple(map(type(patches_dir()), roots))
    assert runtime.RuntimeConfig.from_env(config.to_env()) == config
    store = runtime.Runtime(config).store
    assert store.get("silu_and_mul").folder.resolve() == (home / "patches" / "silu_and_mul").resolve()


def test_launch_with_an_explicit_folder_hands_only_that_one(home, tmp_path):
    write_patch(home / "patches", op="rmsnorm", targets=())
    other = tmp_path / "other"
    write_patch(other, targets=("sglang.srt.layers.layernorm:rmsnorm",))
    result = invoke("launch", "--patches", other, "--mechanism", "import-hook", "--no-build", "--stats-dir",
                    tmp_path / "st", "--dry-run", "--", "--model-path", "m")
    assert result.exit_code == 0, result.output
    assert f"{ENV_PATCHES}={other.resolve()}\n" in result.output
    assert "1 patch(es) [silu_and_mul]" in result.output
