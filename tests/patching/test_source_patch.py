"""Source patches (kind triton-source): the writer, the manifest, the launcher rebound in every module that bound
SGLang's (fake modules here: SGLang's own needs CUDA-only imports), the knobs taken per batch size from the
patch's files where SGLang's config is that key's, SGLang reading the files without the knob keys, and the
refusal where the installed SGLang source is not the one the patch was measured on."""
from __future__ import annotations

import json
import sys
import types

import pytest
import torch
from click.testing import CliRunner
from moe_standins import Recorder, sglang_launcher
from pydantic import ValidationError

from astra_sglang.cli import launch as launch_cli
from astra_sglang.cli import patch as cli
from astra_sglang.errors import AstraError
from astra_sglang.patching import runtime
from astra_sglang.patching.triton_config import base_dir, build_config_dir
from astra_sglang.patching.triton_source import SourceChoice, load_variant
from astra_sglang.patchset.manifest import MeasuredShape, PatchManifest, SourceVariant
from astra_sglang.patchset.store import PatchStore
from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe import source_op, source_patch, sources
from astra_sglang.triton.moe.knobs import SplitK, Variant
from astra_sglang.triton.moe.shapes import MoeShape
from astra_sglang.triton.moe.space import MoeConfig
from astra_sglang.triton.moe.splitk_launch import GemmCall

GPU = "NVIDIA H100 80GB HBM3"
SHAPE = MoeShape(8, 96, 64, 2)
SMALL, LARGE = MoeConfig(16, 32, 64, 1, 4, 3), MoeConfig(64, 64, 32, 8, 4, 3)
TABLE = {1: Variant(SMALL, SplitK(1, 4)), 16: Variant(SMALL, SplitK(2, 2)), 256: Variant(LARGE)}
KERNELS, RUNNER = "astra_fake_moe_kernels", "astra_fake_moe_runner"


def run_record(source=None) -> source_patch.SourceRun:
    return source_patch.SourceRun(gpu=GPU, triton=moe_configs.triton_version(), sglang="0.5.17",
                                  source=source or sources.splitk_source(), run_id="test")


def write(root, table=TABLE, target=f"{KERNELS}:invoke_fused_moe_kernel"):
    measured = [MeasuredShape(shape=SHAPE.shape(m), dtype="bfloat16", candidate_us=10.0, baseline_us=12.0, speedup=1.2)
                for m in (1, 16)]
    folder = source_patch.write_source_patch(root, SHAPE, table, run_record(), [1, 16], measured)
    manifest = PatchManifest.load(folder)
    manifest.model_copy(update={"targets": [target]}).save(folder)
    return folder


def test_the_writer_keeps_the_knobs_in_sglangs_file_format(tmp_path):
    folder = write(tmp_path)
    manifest = PatchManifest.load(folder)
    assert manifest.kind == "triton-source" and manifest.variant.source_hash == sources.splitk_source().base_hash
    (config,) = manifest.configs
    assert config.path.endswith(moe_configs.file_name(8, 96, GPU)) and config.tuned == [1, 16]
    raw = json.loads((folder / config.path).read_text())
    assert raw["1"] == {**SMALL.sglang(), "SPLIT_K_DOWN": 4} and raw["256"] == LARGE.sglang()
    assert not list(folder.rglob("*.py"))  # the kernel is never stored: it is SGLang's, regenerated at load


def test_a_manifest_kind_and_its_variant_go_together():
    with pytest.raises(ValidationError, match="names its variant"):
        PatchManifest(op="fused_moe", kind="triton-source", dtypes=["bfloat16"], provenance={"method": "tuner"})
    with pytest.raises(ValidationError, match="names its variant"):
        PatchManifest(op="fused_moe", kind="triton-config", dtypes=["bfloat16"], provenance={"method": "tuner"},
                      variant=SourceVariant(transform_version=1, kernel_file="x", source_hash="y"))


def test_a_config_patch_folder_becomes_a_source_patch(tmp_path):
    from test_config_patch import write_config_patch

    folder = write_config_patch(tmp_path)
    write(tmp_path)
    manifest = PatchManifest.load(folder)
    assert manifest.kind == "triton-source" and len(manifest.configs) == 2  # the config patch's file stays


def test_another_sglang_source_is_not_added_to(tmp_path):
    write(tmp_path)
    other = sources.VariantSource("splitk", sources.splitk_source().path, "0000000000000000")
    with pytest.raises(AstraError, match="measured on splitk of SGLang source"):
        source_patch.write_source_patch(tmp_path, SHAPE, TABLE, run_record(other), [1], [])


def choice(tmp_path) -> SourceChoice:
    folder = write(tmp_path)
    return SourceChoice(folder, PatchManifest.load(folder).configs)


@pytest.mark.parametrize("tokens, n, k, config, split", [
    (1, 64, 96, SMALL, 4),      # down projection, key 1
    (1, 192, 64, SMALL, 1),     # up projection, key 1
    (12, 192, 64, SMALL, 2),    # nearest key 16
    (12, 64, 96, LARGE, 1),     # SGLang handed another config (an override, another file): its own launch
    (300, 64, 96, LARGE, 1),    # key 256 has no split
    (1, 64, 100, SMALL, 1),     # another expert shape
])
def test_the_knobs_are_taken_at_sglangs_key(tmp_path, tokens, n, k, config, split):
    call = GemmCall(tokens=tokens, experts=8, n=n, k=k, dtype="bfloat16", config=tuple(sorted(config.sglang().items())))
    assert choice(tmp_path)(call) == split


@pytest.fixture
def fake_moe(monkeypatch):
    """SGLang's launcher in a kernels module and a `from x import f` copy of it in a runner module."""
    kernels = types.ModuleType(KERNELS)
    kernels.invoke_fused_moe_kernel = sglang_launcher()
    runner = types.ModuleType(RUNNER)
    runner.invoke_fused_moe_kernel = kernels.invoke_fused_moe_kernel
    monkeypatch.setitem(sys.modules, KERNELS, kernels)
    monkeypatch.setitem(sys.modules, RUNNER, runner)
    recorder = Recorder()
    monkeypatch.setattr(sources, "kernel", lambda handle: recorder)
    reduced = []
    module = types.ModuleType("astra_sglang.triton.moe.splitk_reduce")
    module.reduce_into = lambda *a: reduced.append(a)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    runtime.reset()
    yield kernels, runner, recorder, reduced
    runtime.reset()


def down_call(tokens: int, config: MoeConfig):
    A = torch.zeros(tokens * 2, SHAPE.inter, dtype=torch.bfloat16)
    B = torch.zeros(SHAPE.experts, SHAPE.hidden, SHAPE.inter, dtype=torch.bfloat16)
    C = torch.empty(tokens, 2, SHAPE.hidden, dtype=torch.bfloat16)
    args = (A, B, None, C, None, None, None, torch.ones(tokens, 2), torch.zeros(tokens, 2, dtype=torch.int32),
            torch.zeros(64, dtype=torch.int32), torch.zeros(8, dtype=torch.int32), torch.tensor([16]), True, 1,
            config.sglang())
    return args, dict(compute_type="bf16", use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False,
                      use_int4_w4a16=False, per_channel_quant=False)


def test_the_patch_layer_rebinds_the_launcher_everywhere_and_counts(tmp_path, fake_moe):
    kernels, runner, recorder, reduced = fake_moe
    original = kernels.invoke_fused_moe_kernel
    write(tmp_path)
    rt = runtime.install(tmp_path)
    assert runner.invoke_fused_moe_kernel is kernels.invoke_fused_moe_kernel is not original
    runner.invoke_fused_moe_kernel(*down_call(1, SMALL)[0], **down_call(1, SMALL)[1])
    runner.invoke_fused_moe_kernel(*down_call(300, LARGE)[0], **down_call(300, LARGE)[1])
    assert [grid[1] for grid, _ in recorder.launches] == [4] and len(reduced) == 1 and len(original.calls) == 1
    stats = rt.stats.op("fused_moe")
    assert (stats.calls, stats.kernel_calls, stats.fallbacks) == (2, 1, 1)
    assert f"{RUNNER}:invoke_fused_moe_kernel" in stats.targets


def test_a_changed_sglang_source_is_refused_at_load(tmp_path, fake_moe, monkeypatch):
    folder = write(tmp_path)
    manifest = PatchManifest.load(folder)
    changed = manifest.variant.model_copy(update={"source_hash": "0123456789abcdef"})
    manifest.model_copy(update={"variant": changed}).save(folder)
    with pytest.raises(AstraError, match="measured on SGLang's fused_moe_kernel source 0123456789abcdef, the installed"):
        runtime.install(tmp_path)
    assert hasattr(sys.modules[RUNNER].invoke_fused_moe_kernel, "calls")  # SGLang's launcher still bound
    served = write(tmp_path / "served", target=source_patch.TARGET)  # SGLang's own launcher: `launch` checks it
    manifest = PatchManifest.load(served)
    manifest.model_copy(update={"variant": changed}).save(served)
    result = CliRunner().invoke(launch_cli.launch_cmd, ["--patches", str(tmp_path / "served"), "--dry-run", "--",
                                                        "--model-path", "M"])
    lines = [line for line in result.output.strip().splitlines() if not line.startswith("note:")]  # M: a hub id
    assert result.exit_code == 1 and len(lines) == 1 and "re-tune it or disable it" in lines[0]


def test_an_installed_source_the_transform_does_not_fit_is_refused(tmp_path, monkeypatch):
    folder = write(tmp_path)
    text = sources.installed_kernel_file().read_text().replace("for k_start in range(0, K, BLOCK_SIZE_K):",
                                                               "for k_start in range(0, K, BLOCK_SIZE_K * 1):")
    changed = tmp_path / "fused_moe_triton_kernels.py"
    changed.write_text(text)
    monkeypatch.setattr(sources, "installed_kernel_file", lambda: changed)
    with pytest.raises(AstraError, match="no longer matches the splitk transform: the K loop"):
        load_variant(PatchManifest.load(folder).variant)


def test_sglang_reads_the_files_without_the_knob_keys(tmp_path, monkeypatch):
    monkeypatch.delenv(moe_configs.ENV, raising=False)
    write(tmp_path / "patches")
    built = build_config_dir(PatchStore(tmp_path / "patches").enabled(), tmp_path / "built", base_dir())
    path = moe_configs.resolve(built, moe_configs.file_name(8, 96, GPU), moe_configs.triton_version())
    assert moe_configs.read(path) == {m: v.config.sglang() for m, v in TABLE.items()}
    listed = CliRunner().invoke(cli.patch_group, ["list", "--patches", str(tmp_path / "patches")])
    assert "tuner (source variant)" in listed.output and "invoke_fused_moe_kernel" in listed.output


def test_verify_checks_each_files_variants_against_sglangs_pick(tmp_path):
    folder = write(tmp_path)
    (req,) = source_patch.verify_requests(folder, PatchManifest.load(folder))
    assert source_op.parse(req.candidate.path.rsplit(":", 1)[1]) == ("splitk", TABLE)
    assert [s[0] for s in req.shapes] == [1, 16] and req.baseline.path.endswith(":sglang_pick")


def test_launch_serves_the_files_and_patches_sglangs_launcher(tmp_path, monkeypatch):
    monkeypatch.delenv(moe_configs.ENV, raising=False)
    write(tmp_path / "patches", target=source_patch.TARGET)
    result = CliRunner().invoke(launch_cli.launch_cmd, ["--patches", str(tmp_path / "patches"), "--stats-dir",
                                                        str(tmp_path / "stats"), "--mechanism", "import-hook",
                                                        "--dry-run", "--", "--model-path", "M"])
    assert result.exit_code == 0, result.output
    env = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line and " " not in line)
    assert env[moe_configs.ENV] == str((tmp_path / "stats" / "moe-configs").resolve())
    assert "sglang.kernels.ops.moe.fused_moe_triton_kernels" in env["ASTRA_SGLANG_TARGET_MODULES"].split(",")
