"""Everything a user creates or changes lives in the user folder: a failed onboard leaves nothing behind (and an
earlier spec of the name as it was), `patch enable/disable` of a shipped patch writes an override there, never
the installed package's manifest, and a bad user spec never breaks listing the other ops."""
from __future__ import annotations

import json
import tomllib

import pytest
from click.testing import CliRunner
from onboard_support import calls_file

from astra_sglang.cli import main
from astra_sglang.patchset.store import ENV_PATCHES, PatchStore, state_path
from astra_sglang.paths import patches_dir


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_a_reference_failing_on_cpu_leaves_nothing_and_keeps_the_earlier_spec(standins, home, tmp_path):
    assert invoke("onboard", "flashinfer.norm:rmsnorm", "--shapes", calls_file("rmsnorm"), "--name", "n").exit_code == 0
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    (tmp_path / "mine_bad.py").write_text("def bad(input, weight, eps, out):\n"
                                          "    raise ValueError('not written yet')\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        out = invoke("onboard", "flashinfer.norm:rmsnorm", "--shapes", calls_file("rmsnorm"), "--name", "n", "--force",
                     "--reference", "mine_bad:bad")
    finally:
        sys.path.remove(str(tmp_path))
    assert out.exit_code == 1 and "the reference mine_bad:bad fails at 1x4096 on CPU: ValueError" in out.output
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before  # nothing new, nothing changed
    assert not [p for p in home.iterdir() if p.name.startswith(".onboard-")]


@pytest.mark.parametrize("reference, message", [
    ("mine_order:wrong_order", "takes (weight, input, eps, out); the spec's arguments are (input, weight, eps, out)"),
    ("mine_order:missing", "AttributeError"), ("nomodule:f", "ModuleNotFoundError"), ("mine", "write MODULE:FUNCTION")])
def test_a_user_reference_must_take_the_spec_arguments(standins, home, tmp_path, monkeypatch, reference, message):
    (tmp_path / "mine_order.py").write_text("def wrong_order(weight, input, eps, out):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = invoke("onboard", "flashinfer.norm:rmsnorm", "--shapes", calls_file("rmsnorm"), "--reference", reference)
    assert out.exit_code == 1 and message in out.output and len(out.output.strip().splitlines()) == 1
    assert not (home / "specs").exists()


def test_a_user_reference_that_runs_is_proposed(standins, home, tmp_path, monkeypatch):
    (tmp_path / "mine_ln.py").write_text(
        "import torch\n\ndef layernorm(input, gemma, beta, eps, out):\n"
        "    out.copy_(torch.nn.functional.layer_norm(input, input.shape[-1:], gemma, beta, eps))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = invoke("onboard", "flashinfer.norm:layernorm", "--shapes", calls_file("layernorm"), "--reference",
                 "mine_ln:layernorm")
    assert out.exit_code == 0, out.output
    spec = tomllib.loads((home / "specs" / "layernorm.toml").read_text())
    assert (spec["reference"], spec["reference_dtype"], spec["onboard"]["proposed"]) == (
        "mine_ln:layernorm", "float64", "mine_ln:layernorm")
    assert "the reference mine_ln:layernorm against the op" in out.output
    if standins == "live":  # the stand-in runs on CPU: CPU already compares the two
        assert "agreeing with the reference" in out.output


def test_enabling_a_shipped_patch_writes_an_override_in_the_user_folder(home, monkeypatch):
    monkeypatch.delenv(ENV_PATCHES, raising=False)
    manifests = {p: p.read_bytes() for p in patches_dir().glob("*/manifest.json")}
    was = PatchStore().get("rmsnorm").enabled
    out = invoke("--home", home, "patch", "disable", "rmsnorm")
    assert out.exit_code == 0 and f"by the override in {state_path()}" in out.output, out.output
    assert json.loads(state_path().read_text()) == {"rmsnorm": {"enabled": False}}
    entry = PatchStore().get("rmsnorm")
    assert (entry.enabled, entry.overridden, entry.origin) == (False, True, "shipped")
    listed = invoke("patch", "list")
    assert any(line.startswith("rmsnorm ") and " no (yours) " in line for line in listed.output.splitlines())
    assert invoke("patch", "enable", "rmsnorm").exit_code == 0 and PatchStore().get("rmsnorm").enabled
    assert {p: p.read_bytes() for p in patches_dir().glob("*/manifest.json")} == manifests  # never written
    state_path().unlink()
    assert PatchStore().get("rmsnorm").enabled is was and not PatchStore().get("rmsnorm").overridden


def test_a_broken_override_file_is_named(home, monkeypatch):
    monkeypatch.delenv(ENV_PATCHES, raising=False)
    state_path().parent.mkdir(parents=True, exist_ok=True)
    state_path().write_text("{nope")
    out = invoke("patch", "list")
    assert out.exit_code != 0 and f"{state_path()}: not JSON" in out.output


def test_a_bad_user_spec_is_one_line_and_every_other_op_is_listed(standins, home):
    out = invoke("onboard", "flashinfer.norm:rmsnorm", "--shapes", calls_file("rmsnorm"), "--name", "ok_op")
    assert out.exit_code == 0, out.output
    specs = home / "specs"
    good = (specs / "ok_op.toml").read_text()
    (specs / "model_dims.toml").write_text(good.replace('name = "ok_op"', 'name = "model_dims"')
                                           .replace("[shapes]", '[shapes]\nmodel_dims = { x = "hidden" }'))
    (specs / "constraint.toml").write_text(good.replace('name = "ok_op"', 'name = "constraint"')
                                           .replace('constraints = ["tokens >= 1", "d >= 1"]', 'constraints = ["nope > 1"]')
                                           .replace("[shapes]", '[shapes]\nmodel_dims = { d = "hidden" }\ntokens = [1]'))
    out = invoke("kernels")
    assert out.exit_code == 0, out.output
    assert "ok_op" in out.output and "rmsnorm" in out.output and "silu_and_mul" in out.output
    assert "model_dims.toml: shapes.model_dims: 'x' is not one of the dims" in out.output
    assert "constraint.toml: skipped, its shapes do not resolve: NameError" in out.output
    single = invoke("kernels", "constraint")
    assert single.exit_code == 1 and "its shapes do not resolve" in single.output
