"""SGLang's config files: names, the resolution order and the picks, held to SGLang's own lookup code (its
installed fused_moe_triton_config.py) on CPU."""
from __future__ import annotations

import json

import pytest

from astra_sglang.triton.moe import configs as moe_configs
from astra_sglang.triton.moe.space import MoeConfig
from tests.triton_targets.conftest import H100, config_table

RUNNING = moe_configs.triton_version()


@pytest.mark.parametrize("experts, inter, device", [(128, 768, H100), (8, 14336, "NVIDIA H200"), (60, 1408, "A 100")])
def test_file_name_is_sglangs(sglang_lookup, experts, inter, device):
    sglang_lookup.get_device_name = lambda: device
    assert moe_configs.file_name(experts, inter, device) == sglang_lookup.get_config_file_name(experts, inter, None)


def _sglang_reads(module, monkeypatch, folder, experts=8, inter=512):
    monkeypatch.setenv(moe_configs.ENV, str(folder))
    module.get_moe_configs.cache_clear()
    return module.get_moe_configs(experts, inter, None)


def test_resolution_follows_sglang(sglang_lookup, monkeypatch, fake_configs):
    name = moe_configs.file_name(8, 512, H100)
    # no folder for the running Triton: SGLang falls back to the newest other version
    path = moe_configs.resolve(fake_configs, name, RUNNING)
    assert path.parent.name == "triton_9_9_0"
    assert _sglang_reads(sglang_lookup, monkeypatch, fake_configs) == moe_configs.read(path)
    # the running Triton's own folder wins
    own = fake_configs / "configs" / moe_configs.version_dir(RUNNING)
    own.mkdir()
    (own / name).write_text(json.dumps(config_table(64)))
    path = moe_configs.resolve(fake_configs, name, RUNNING)
    assert path == own / name
    assert _sglang_reads(sglang_lookup, monkeypatch, fake_configs) == moe_configs.read(path)
    # no file anywhere: SGLang's default config (None here)
    assert moe_configs.resolve(fake_configs, moe_configs.file_name(7, 7, H100), RUNNING) is None
    assert _sglang_reads(sglang_lookup, monkeypatch, fake_configs, 7, 7) is None


def test_resolution_in_sglangs_own_folder(sglang_lookup, monkeypatch):
    monkeypatch.delenv(moe_configs.ENV, raising=False)
    folder = moe_configs.default_config_dir()
    path = moe_configs.resolve(folder, moe_configs.file_name(128, 768, H100), RUNNING)
    assert path is not None and path.is_file()
    sglang_lookup.get_moe_configs.cache_clear()
    assert sglang_lookup.get_moe_configs(128, 768, None) == moe_configs.read(path)


def test_picks_from_a_file_and_from_the_default(sglang_lookup, monkeypatch, fake_configs):
    monkeypatch.setenv(moe_configs.ENV, str(fake_configs))
    picks = moe_configs.sglang_picks(8, 512, 1024, 2, [1, 50, 5000])
    assert [p.source for p in picks] == ["file"] * 3 and [p.key for p in picks] == [1, 64, 4096]
    assert picks[0].config == MoeConfig(32, 64, 64, 1, 4, 3) and "triton_9_9_0" in picks[0].describe()
    picks = moe_configs.sglang_picks(128, 100, 1024, 8, [1, 128, 129])  # no file for N=100
    assert [p.source for p in picks] == ["default"] * 3
    expect = [sglang_lookup.get_default_config(m, 128, 100, 1024, 8, None, False, None) for m in (1, 128, 129)]
    assert [p.config.sglang() for p in picks] == expect
    assert picks[1].config != picks[2].config  # SGLang's default switches above M = E
    assert "default config" in picks[0].describe()


def test_written_files_read_back_through_sglang(sglang_lookup, monkeypatch, tmp_path):
    table = {1: MoeConfig(16, 64, 128, 1, 4, 4), 64: MoeConfig(16, 128, 128, 1, None, None)}
    path = moe_configs.write(tmp_path / "configs" / moe_configs.version_dir(RUNNING)
                             / moe_configs.file_name(4, 64, H100), table)
    read = _sglang_reads(sglang_lookup, monkeypatch, tmp_path, 4, 64)
    assert read == {m: c.sglang() for m, c in table.items()}
    assert list(json.loads(path.read_text())) == ["1", "64"]


def test_nearest_key_is_sglangs_choice():
    keys = [1, 2, 4, 8, 64, 4096]
    # 36 is as far from 8 as from 64: the first key wins, as with min()
    assert [moe_configs.nearest(keys, m) for m in (1, 3, 6, 36, 40, 5000)] == [1, 2, 4, 8, 64, 4096]


def test_shipped_summary_and_first_guesses():
    summary = moe_configs.shipped()
    assert summary.files["triton_3_6_0"] > 0 and summary.env == ["SGLANG_MOE_CONFIG_DIR"]
    assert set(summary.functions) == set(moe_configs.LOOKUPS)
    assert {16, 32, 64, 128, 256} <= set(summary.keys["BLOCK_SIZE_M"])
    assert set(moe_configs.BATCH_SIZES) <= set(summary.batch_sizes)
    guesses = moe_configs.shipped_configs(128, 768, 64)
    assert len(guesses) >= 2 and len(set(guesses)) == len(guesses)  # H100, H200, ... files; fp8 ones left out
