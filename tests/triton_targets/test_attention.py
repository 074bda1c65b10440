"""SGLang's Triton attention as a tuning target, on CPU: discovery in the installed sources, the config space
and its filter, SGLang's own pick (recorded from its launchers), the launch seam, the fp64 references, the
tuner on fake evaluations, the launch patch on a fake module, and the CLI's errors."""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch
from click.testing import CliRunner

from astra_sglang.errors import AstraError
from astra_sglang.harness.records import EvalResult, ShapeResult, Timing
from astra_sglang.optimize.tuner.attention_tune import AttnSetup, attn_tuner
from astra_sglang.optimize.tuner.moe_run import Facts, TuneOptions
from astra_sglang.patching.stats import OpStats
from astra_sglang.patching.triton_launch import LaunchChoice, LaunchPatch
from astra_sglang.patchset.manifest import LaunchTable, PatchManifest
from astra_sglang.triton.attention import layout as attn_layout
from astra_sglang.triton.attention import reference as attn_reference
from astra_sglang.triton.attention.launch import ConfiguredKernel, LaunchInfo, configure, launch_info
from astra_sglang.triton.attention.op import parse_table, table_name
from astra_sglang.triton.attention.space import AttnConfig, AttnShape, neighbors, rejected, space
from astra_sglang.triton.attention.targets import Recorder, discover, record_launch, sglang_pick

LLAMA3 = AttnShape(32, 8, 128)
FACTS = Facts(gpu="NVIDIA H100 80GB HBM3", smem=227 * 1024, triton="3.6.0", sglang="0.5.17", source_hash="cd" * 32)
DECODE_PICK = AttnConfig("decode_attention", block_n=32, warps=4, stages=2, block_h=16)
EXTEND_PICK_H100 = AttnConfig("extend_attention", block_n=64, warps=8, stages=1, block_m=128)


# -- discovery ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,kernel,launcher", [("decode_attention", "_fwd_grouped_kernel_stage1",
                                                   "_decode_grouped_att_m_fwd"),
                                                  ("extend_attention", "_fwd_kernel", "extend_attention_fwd")])
def test_discovery_finds_the_kernels_and_their_launchers(name, kernel, launcher):
    found = discover(name)
    assert found.name == kernel and launcher in {launch.function for launch in found.launches}
    assert {"num_warps", "num_stages"} & set(found.knobs())


def test_decode_discovery_sees_the_hard_coded_block_sizes():
    knobs = discover("decode_attention").knobs()
    assert {knobs[k] for k in ("BLOCK_N", "BLOCK_H", "num_warps", "num_stages")} == {"launcher"}


# -- config space ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["decode_attention", "extend_attention"])
@pytest.mark.parametrize("shape", [LLAMA3, AttnShape(64, 8, 128), AttnShape(8, 2, 64), AttnShape(16, 1, 256)])
def test_space_keeps_only_configs_that_can_run(kernel, shape):
    ok, dropped = space(kernel, shape)
    assert ok and all(not rejected(c, shape) for c in ok)
    assert all(reason for reason in dropped.values())
    assert len(ok) + len(dropped) == math.prod(len(v) for v in __import__(
        "astra_sglang.triton.attention.space", fromlist=["VALUES"]).VALUES[kernel].values())
    for config in ok:
        assert AttnConfig.from_code(kernel, config.code()) == config
        assert config.smem_bytes(shape.head_dim) <= 227 * 1024


def test_block_h_is_filtered_against_the_heads_a_kv_head_serves():
    big = AttnConfig("decode_attention", block_n=32, warps=4, stages=2, block_h=32)
    assert "BLOCK_H 32" in rejected(big, LLAMA3)  # 4 q heads per kv head: 28 of 32 rows masked
    assert rejected(big, AttnShape(64, 2, 128)) == ""  # 32 q heads per kv head
    huge = AttnConfig("decode_attention", block_n=128, warps=4, stages=4, block_h=16)
    assert "shared memory" in rejected(huge, LLAMA3)


def test_neighbors_move_one_knob_one_step():
    for other in neighbors(DECODE_PICK, LLAMA3):
        assert sum(getattr(other, k) != getattr(DECODE_PICK, k) for k in ("block_n", "warps", "stages", "block_h")) == 1


@pytest.mark.parametrize("text", ["h16n32w4", "m64n64w4s1", "h16n32w4s2x", "", "h16n32w4s2h16"])
def test_bad_codes_are_one_clear_error(text):
    with pytest.raises(AstraError, match="not a decode_attention config code"):
        AttnConfig.from_code("decode_attention", text)


# -- SGLang's own pick ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("bucket", [(1, 1), (8, 1024), (64, 4096), (3, 33)])
def test_sglang_decode_pick_is_what_its_launcher_hard_codes(bucket):
    assert sglang_pick("decode_attention", LLAMA3, bucket) == DECODE_PICK
    grid, kwargs = record_launch("decode_attention", LLAMA3, bucket)
    assert grid == (bucket[0], 32 // 4, 8)  # cdiv(heads, min(BLOCK_H, group)), max kv splits
    assert kwargs["kv_group_num"] == 4 and kwargs["q_head_num"] == 32


@pytest.mark.parametrize("capability,pick", [((9, 0), EXTEND_PICK_H100),
                                             ((8, 0), AttnConfig("extend_attention", 128, 8, 1, block_m=128)),
                                             ((8, 9), AttnConfig("extend_attention", 128, 8, 1, block_m=64))])
def test_sglang_extend_pick_follows_its_selection_by_capability(capability, pick):
    assert sglang_pick("extend_attention", LLAMA3, (512, 0), capability=capability) == pick


def test_a_recording_leaves_the_kernel_global_in_place():
    from astra_sglang.triton.attention.targets import sglang_module

    module = sglang_module("decode_attention")
    before = module._fwd_grouped_kernel_stage1
    sglang_pick("decode_attention", LLAMA3, (4, 100))
    assert module._fwd_grouped_kernel_stage1 is before


def test_mha_decode_is_not_a_target():
    with pytest.raises(AstraError, match="per-head kernel"):
        sglang_pick("decode_attention", AttnShape(32, 32, 128), (1, 1024))


# -- the launch seam ------------------------------------------------------------------------------------------
def _decode_launch(batch=8, block_h=16):
    grid, kwargs = record_launch("decode_attention", LLAMA3, (batch, 256))
    q = torch.empty(batch, 32, 128, dtype=torch.bfloat16, device="meta")
    k = torch.empty(batch * 256, 8, 128, dtype=torch.bfloat16, device="meta")
    return grid, (q, k), kwargs


@pytest.mark.parametrize("block_h,rows", [(16, 4), (32, 4)])
def test_configure_sets_the_knobs_and_the_grid_that_depends_on_them(block_h, rows):
    grid, _, kwargs = _decode_launch()
    config = AttnConfig("decode_attention", block_n=64, warps=8, stages=3, block_h=block_h)
    new_grid, new = configure("decode_attention", grid, kwargs, config)
    assert new_grid == (grid[0], 32 // rows, grid[2])
    assert (new["BLOCK_N"], new["BLOCK_H"], new["num_warps"], new["num_stages"]) == (64, block_h, 8, 3)
    assert {k: v for k, v in new.items() if k not in config.launch()} == \
        {k: v for k, v in kwargs.items() if k not in config.launch()}


@pytest.mark.parametrize("extend,block_m,blocks", [(512, 64, 8), (1000, 64, 16), (1000, 32, 32), (100, 16, 8)])
def test_extend_grid_covers_the_longest_extend_in_the_new_block_rows(extend, block_m, blocks):
    grid, kwargs = record_launch("extend_attention", LLAMA3, (extend, 0), capability=(9, 0))
    config = AttnConfig("extend_attention", block_n=64, warps=4, stages=2, block_m=block_m)
    new_grid, _ = configure("extend_attention", grid, kwargs, config)
    assert new_grid[:2] == grid[:2] and new_grid[2] == blocks
    assert new_grid[2] * block_m >= extend


def test_configured_kernel_launches_sglangs_kernel_with_the_choice():
    grid, args, kwargs = _decode_launch(batch=16)
    inner = Recorder()
    seen = []
    config = AttnConfig("decode_attention", block_n=16, warps=2, stages=1, block_h=16)
    proxy = ConfiguredKernel(inner, "decode_attention", lambda info: seen.append(info) or config)
    proxy[grid](*args, **kwargs)
    assert seen == [LaunchInfo("decode_attention", 32, 8, 128, "bfloat16", 16)]
    assert inner.launches[0][2]["BLOCK_N"] == 16 and inner.launches[0][0] == grid
    proxy_none = ConfiguredKernel(inner, "decode_attention", lambda info: None)
    proxy_none[grid](*args, **kwargs)
    assert inner.launches[1][2] == kwargs


def test_configured_kernel_plans_a_launch_form_once_and_counts_every_launch(monkeypatch):
    inner, seen, launched = Recorder(), [], []
    config = AttnConfig("decode_attention", block_n=64, warps=8, stages=3, block_h=32)
    proxy = ConfiguredKernel(inner, "decode_attention", lambda info: seen.append(info.size) or config,
                             on_launch=launched.append)
    forms = [_decode_launch(batch=16), _decode_launch(batch=16), _decode_launch(batch=4), _decode_launch(batch=16)]
    for grid, args, kwargs in forms:
        proxy[grid](*args, **kwargs)
    assert seen == [16, 4] and launched == [True] * 4  # planned at batch 16 and 4; every launch told
    for (grid, _, kwargs), (new_grid, _, new_kwargs) in zip(forms, inner.launches):
        assert (new_grid, new_kwargs) == configure("decode_attention", grid, kwargs, config)
    monkeypatch.setattr(ConfiguredKernel, "PLANS", 2)
    grid, args, kwargs = _decode_launch(batch=2)
    proxy[grid](*args, **kwargs)  # a third form: the store starts over and holds it alone
    assert seen == [16, 4, 2] and len(proxy._plans) == 1


def test_launch_info_declines_what_it_does_not_understand():
    assert launch_info("decode_attention", lambda meta: (1,), (), {}) is None
    _, args, kwargs = _decode_launch()
    assert launch_info("decode_attention", (1, 8, 8), args, dict(kwargs, BLOCK_DPE=64)) is None


# -- layout and references --------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch,kv_len", [(1, 1), (3, 33), (4, 100)])
def test_decode_layout_gives_every_request_its_own_slots(batch, kv_len):
    indptr, indices = attn_layout.decode_slots(batch, kv_len)
    assert indptr.tolist() == [i * kv_len for i in range(batch + 1)]
    assert sorted(indices.tolist()) == list(range(batch * kv_len)) and indices.dtype == torch.int32


def _naive(q, k, v, causal_from=None):
    group = q.shape[1] // k.shape[1]
    out = torch.empty_like(q)
    for i in range(q.shape[0]):
        for h in range(q.shape[1]):
            keys = k.shape[0] if causal_from is None else causal_from + i + 1
            s = (k[:keys, h // group] @ q[i, h]) / math.sqrt(q.shape[-1])
            out[i, h] = torch.softmax(s, 0) @ v[:keys, h // group]
    return out


@pytest.mark.parametrize("batch,kv_len,heads,kv_heads,dim", [(2, 5, 4, 2, 8), (3, 17, 8, 1, 16), (1, 1, 4, 4, 8)])
def test_decode_reference_is_attention_over_the_request_slots(batch, kv_len, heads, kv_heads, dim):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(batch, heads, dim, generator=g, dtype=torch.float64)
    k = torch.randn(batch * kv_len, kv_heads, dim, generator=g, dtype=torch.float64)
    v = torch.randn(batch * kv_len, kv_heads, dim, generator=g, dtype=torch.float64)
    o = torch.full_like(q, float("nan"))
    attn_reference.decode_attention(q, k, v, o)
    _, indices = attn_layout.decode_slots(batch, kv_len)
    for b in range(batch):
        slots = indices[b * kv_len:(b + 1) * kv_len].long()
        torch.testing.assert_close(o[b:b + 1], _naive(q[b:b + 1], k[slots], v[slots]))


@pytest.mark.parametrize("extend,prefix", [(1, 0), (5, 0), (4, 7), (300, 3)])
def test_extend_reference_is_causal_over_prefix_and_new_tokens(extend, prefix):
    g = torch.Generator().manual_seed(2)
    heads, kv_heads, dim = 4, 2, 8
    q = torch.randn(extend, heads, dim, generator=g, dtype=torch.float64)
    k_ext, v_ext = (torch.randn(extend, kv_heads, dim, generator=g, dtype=torch.float64) for _ in range(2))
    kb, vb = (torch.randn(prefix + extend, kv_heads, dim, generator=g, dtype=torch.float64) for _ in range(2))
    o = torch.full_like(q, float("nan"))
    attn_reference.extend_attention(q, k_ext, v_ext, o, kb, vb)
    _, _, slots = attn_layout.extend_slots(extend, prefix)
    k = torch.cat([kb[slots.long()], k_ext])
    v = torch.cat([vb[slots.long()], v_ext])
    torch.testing.assert_close(o, _naive(q, k, v, causal_from=prefix))


@pytest.mark.parametrize("name", ["decode_attention", "extend_attention"])
def test_cost_counts_kv_bytes_and_flops(name):
    from astra_sglang.specs.registry import get_spec
    from astra_sglang.triton import cost

    spec = get_spec(name)
    for shape in spec.shapes.quick + spec.shapes.edge:
        dims = spec.dims_of(shape)
        nbytes, flops = getattr(cost, name)(dims, "bfloat16")
        assert 0 < nbytes <= spec.min_bytes(tuple(shape), "bfloat16") and flops > 0


# -- evaluator op names ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel,table", [
    ("decode_attention", {(1, 1024): DECODE_PICK, (64, 4096): AttnConfig("decode_attention", 64, 8, 3, block_h=16)}),
    ("extend_attention", {(512, 0): EXTEND_PICK_H100})])
def test_table_names_round_trip(kernel, table):
    name = table_name(kernel, table)
    assert name.isidentifier()
    assert parse_table(kernel, name.split("_table_", 1)[1]) == table


# -- tuner on fake evaluations ----------------------------------------------------------------------------------
class Landscape:
    """Bucket (64, 4096) has a 1.2x config (BLOCK_N 64); at (1, 1024) nothing beats SGLang's pick."""

    def __init__(self):
        self.requests = []

    def __call__(self, requests):
        out = []
        for req in requests:
            self.requests.append(req)
            name = req.candidate.path.rsplit(":", 1)[1]
            table = parse_table("decode_attention", name.split("_table_", 1)[1])
            result = EvalResult(kernel=req.kernel, candidate=req.candidate.name(), ok=True, stage="done", wall_s=20.0)
            for shape in req.shapes:
                speed = self.speed(req, shape, table[shape[0], shape[1]])
                result.shapes.append(ShapeResult(
                    shape=shape, dtype="bfloat16", correct=True, speedup=speed,
                    candidate=Timing(median_us=10 / speed, p10_us=10 / speed, p90_us=10 / speed),
                    baseline=Timing(median_us=10.0, p10_us=10.0, p90_us=10.0)))
            out.append(result)
        return out

    def speed(self, req, shape, config) -> float:
        return 1.2 if shape[0] == 64 and config.block_n == 64 else 0.9


def test_tuning_run_reports_speedups_and_writes_a_launch_patch(tmp_path):
    from astra_sglang.optimize.tuner.attention_run import tune_attention

    land = Landscape()
    buckets = [(1, 1024), (64, 4096)]
    options = TuneOptions(rounds=2, width=3, use_cache=False, patches_dir=tmp_path / "patches")
    result = tune_attention("decode_attention", LLAMA3, buckets, tmp_path / "run", options, land, facts=FACTS,
                            echo=lambda _: None)
    verdicts = {tuple(b.bucket): b.verdict for b in result.buckets}
    assert verdicts == {(1, 1024): "sglang-best", (64, 4096): "tuned"}
    assert all(r.baseline.path.endswith("decode_sglang_pick") for r in land.requests)
    assert any("already the best" in n and "1x1024" in n for n in result.notes)
    manifest = PatchManifest.load(tmp_path / "patches" / "decode_attention")
    assert manifest.kind == "triton-launch"
    assert manifest.targets == ["sglang.kernels.ops.attention.decode_attention:_fwd_grouped_kernel_stage1"]
    table = manifest.launches[0]
    assert table.by == "batch" and table.configs[1] == "" and table.configs[64].startswith("h16n64")
    report = (tmp_path / "run" / "tune.md").read_text()
    assert "| 64x4096 |" in report and "SGLang's pick (already the best)" in report


class KvLandscape(Landscape):
    """BLOCK_N 16 is 1.2x at long kv lengths and 0.6x at short ones (as a config chosen on long kv alone did on
    an H100); BLOCK_N 64 is 1.1x at every kv length; everything else 0.9x. `final` scales the final
    evaluation's speedups at (64, 512)."""

    def __init__(self, final: float = 1.0):
        super().__init__()
        self.final = final

    def speed(self, req, shape, config) -> float:
        if config.block_n == 16:
            speed = 1.2 if shape[1] >= 2048 else 0.6
        else:
            speed = 1.1 if config.block_n == 64 else 0.9
        return speed * (self.final if req.candidate.label == "final" and shape[:2] == (64, 512) else 1.0)


def _kv_tuner(land, buckets):
    setup = AttnSetup("decode_attention", LLAMA3, buckets, {b: DECODE_PICK for b in buckets}, FACTS.gpu,
                      FACTS.triton, FACTS.source_hash)
    return attn_tuner(setup, land, echo=lambda _: None, width=400)


def test_one_config_serves_every_kv_length_of_a_batch_size():
    tuner = _kv_tuner(KvLandscape(), [(64, 512), (64, 4096), (8, 4096)])
    tuner.search(rounds=1)
    # the search alone measured every config at every bucket here (width 400 > the space), so nothing to settle
    chosen = tuner.chosen()
    # BLOCK_N 16 wins at 64x4096 (1.2x) but loses at 64x512 (0.6x): batch 64 takes BLOCK_N 64, good at both
    assert chosen[64, 512] == chosen[64, 4096] and chosen[64, 512].block_n == 64
    # batch 8 has only its long kv length: the long-kv winner is taken there
    assert chosen[8, 4096].block_n == 16


def test_settle_measures_each_winner_at_the_other_kv_lengths():
    tuner = _kv_tuner(KvLandscape(), [(64, 512), (64, 4096)])
    win = AttnConfig("decode_attention", block_n=16, warps=4, stages=2, block_h=16)
    tuner.evaluate_round("r1", {(64, 4096): [win], (64, 512): []})
    assert tuner.chosen()[64, 4096] == DECODE_PICK  # not measured at 64x512: no candidate yet
    assert tuner.settle() == 1
    assert tuner.measured[64, 512][win.code()].speedup == pytest.approx(0.6)
    assert tuner.chosen()[64, 4096] == DECODE_PICK and tuner.settle() == 0


def test_a_key_whose_config_loses_one_final_bucket_keeps_sglangs_pick_at_all(tmp_path):
    from astra_sglang.optimize.tuner.attention_run import tune_attention
    from astra_sglang.triton.attention.patch import collapse

    buckets = [(64, 512), (64, 4096), (8, 4096)]
    options = TuneOptions(rounds=1, width=400, use_cache=False, patches_dir=tmp_path / "patches")
    result = tune_attention("decode_attention", LLAMA3, buckets, tmp_path / "run", options, KvLandscape(final=0.8),
                            facts=FACTS, echo=lambda _: None)
    verdicts = {tuple(b.bucket): b.verdict for b in result.buckets}
    assert verdicts == {(64, 512): "sglang-best", (64, 4096): "sglang-best", (8, 4096): "tuned"}
    assert collapse(result) == {8: next(b.chosen for b in result.buckets if b.bucket == (8, 4096)), 64: ""}


def test_tuner_proposals_skip_sglangs_pick_and_filtered_configs():
    setup = AttnSetup("decode_attention", LLAMA3, [(8, 1024)], {(8, 1024): DECODE_PICK}, FACTS.gpu, FACTS.triton,
                      FACTS.source_hash)
    tuner = attn_tuner(setup, Landscape(), echo=lambda _: None, width=50)
    proposed = tuner.propose((8, 1024), first=True)
    assert DECODE_PICK not in proposed and len(proposed) == 50
    assert all(not rejected(c, LLAMA3) for c in proposed)


# -- the launch patch -----------------------------------------------------------------------------------------
def _table(**over):
    data = dict(kernel="decode_attention", heads=32, kv_heads=8, head_dim=128, dtype="bfloat16", device="H100",
                triton="3.6.0", by="batch", configs={1: "", 64: "h16n64w8s3"}, max_key=64)
    data.update(over)
    return LaunchTable(**data)


@pytest.mark.parametrize("batch,expected", [(1, None), (20, None), (40, "h16n64w8s3"), (128, "h16n64w8s3"),
                                            (129, None)])
def test_launch_choice_takes_the_nearest_key_within_twice_the_largest(batch, expected):
    choice = LaunchChoice([_table()])
    config = choice(LaunchInfo("decode_attention", 32, 8, 128, "bfloat16", batch))
    assert (config.code() if config else None) == expected
    assert choice(LaunchInfo("decode_attention", 32, 8, 64, "bfloat16", 64)) is None  # another shape


def test_launch_patch_installs_counts_and_restores_on_a_fake_module(monkeypatch):
    fake = types.ModuleType("fake_decode_attention")
    inner = Recorder()
    fake._fwd_grouped_kernel_stage1 = inner
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    stats = OpStats("decode_attention")
    patch = LaunchPatch(inner, "decode_attention", [_table()], stats, fake.__name__, "_fwd_grouped_kernel_stage1")
    fake._fwd_grouped_kernel_stage1 = patch.fn
    assert patch.fn.__astra_op__ is patch
    for batch in (64, 1):
        grid, args, kwargs = _decode_launch(batch=batch)
        fake._fwd_grouped_kernel_stage1[grid](*args, **kwargs)
    assert (stats.calls, stats.kernel_calls, stats.fallbacks) == (2, 1, 1)
    assert inner.launches[0][2]["BLOCK_N"] == 64 and inner.launches[1][2]["BLOCK_N"] == 32
    patch.restore()
    assert fake._fwd_grouped_kernel_stage1 is inner


def _launch_patch_folder(tmp_path, monkeypatch, module: str) -> types.ModuleType:
    """A fake SGLang module with a decode kernel global, and a triton-launch patch of it in tmp_path."""
    from astra_sglang.patching import runtime
    from astra_sglang.patchset.manifest import Provenance

    fake = types.ModuleType(module)
    fake._fwd_grouped_kernel_stage1 = Recorder()
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    folder = tmp_path / "decode_attention"
    folder.mkdir()
    PatchManifest(op="decode_attention", kind="triton-launch", kernel="", dtypes=["bfloat16"],
                  targets=[f"{fake.__name__}:_fwd_grouped_kernel_stage1"], launches=[_table()],
                  provenance=Provenance(method="tuner")).save(folder)
    monkeypatch.setattr(runtime, "package_installed", lambda name: True)
    return fake


def test_runtime_binds_a_launch_patch_at_the_kernel_global(tmp_path, monkeypatch):
    from astra_sglang.patching import runtime

    fake = _launch_patch_folder(tmp_path, monkeypatch, "fake_attn_mod")
    rt = runtime.Runtime(runtime.RuntimeConfig(tmp_path))
    rt.install_all()
    bound = fake._fwd_grouped_kernel_stage1
    assert isinstance(bound, ConfiguredKernel) and rt.patched == {f"{fake.__name__}:_fwd_grouped_kernel_stage1":
                                                                  "decode_attention"}
    grid, args, kwargs = _decode_launch(batch=64)
    bound[grid](*args, **kwargs)
    assert rt.stats.op("decode_attention").kernel_calls == 1


# -- CLI ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,message", [
    (["tune", "decode_attention", "--model", "llama-3-8b", "--buckets", "1x1024"], "no CUDA device"),
    (["tune", "extend_attention", "--model", "nope"], "unknown model 'nope'"),
    (["tune", "decode_attention", "--model", "llama-3-8b", "--buckets", "64"], "bad bucket '64'"),
    (["tune", "decode_attention", "--shape", "32x6x128"], "not a multiple"),
    (["tune", "decode_attention"], "give the attention shape one way"),
    (["tune", "prefill_attention", "--model", "llama-3-8b"], "not 'prefill_attention'"),
])
def test_cli_errors_are_one_line(argv, message, monkeypatch):
    from astra_sglang.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output


def test_plugin_mechanism_binds_a_launch_patch_in_place(tmp_path, monkeypatch):
    """SGLang's AROUND hooks wrap functions; a kernel object is subscripted (kernel[grid]), so it is bound."""
    from astra_sglang.patching import hook, runtime

    registered = []
    registry = types.ModuleType("sglang.srt.plugins.hook_registry")
    registry.HookType = types.SimpleNamespace(AROUND="around")
    registry.HookRegistry = types.SimpleNamespace(register=lambda *a: registered.append(a))
    monkeypatch.setitem(sys.modules, registry.__name__, registry)
    fake = _launch_patch_folder(tmp_path, monkeypatch, "fake_attn_plugin_mod")
    rt = runtime.Runtime(runtime.RuntimeConfig(tmp_path, mechanism="plugin"))
    assert hook.register_hooks(rt) == 1
    assert registered == [] and isinstance(fake._fwd_grouped_kernel_stage1, ConfiguredKernel)
