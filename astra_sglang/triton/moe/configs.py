"""SGLang's fused MoE config files: their names and format, and which file (or default config) SGLang picks.

SGLang (fused_moe_triton_config.py) reads `<dir>/configs/triton_<version>/E=..,N=..,device_name=..[,dtype=..]
.json`, where <dir> is $SGLANG_MOE_CONFIG_DIR or the folder of that module: the running Triton's folder
first, then the other versions' folders newest first, else its default config (with a warning). A file maps
batch sizes M to configs; a call of M tokens takes the nearest key. `resolve` follows the same order, and the
tests hold it to SGLang's own `get_moe_configs`. SGLang's functions themselves come from its installed source,
loaded standalone (`sglang_module`): importing its package pulls the whole server in.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace

from astra_sglang.errors import AstraError
from astra_sglang.extraction.sources import sglang_package_dir
from astra_sglang.extraction.triton.records import ConfigFiles
from astra_sglang.triton.moe.space import MoeConfig

ENV = "SGLANG_MOE_CONFIG_DIR"
CONFIG_MODULE = "srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py"
BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
"""The batch sizes SGLang's tuning script writes a config for (its files' keys)."""
STANDALONE = "astra_sglang_moe_config"
"""The module name SGLang's config lookup is loaded under by `sglang_module`."""
LOOKUPS = ("get_config_file_name", "get_moe_configs", "get_default_config", "try_get_optimal_moe_config")


def version_dir(triton_version: str) -> str:
    return "triton_" + triton_version.replace(".", "_")


def _version_key(folder: str) -> tuple[int, ...]:
    return tuple(int(x) for x in folder.removeprefix("triton_").split("_") if x.isdigit())


def dtype_selector(dtype: str | None) -> str:
    """The part of a file name SGLang's get_config_file_name gives a quantization (none: bf16/fp16)."""
    return f",dtype={dtype}" if dtype else ""


def file_name(experts: int, inter: int, device: str, dtype: str | None = None, down: bool = False) -> str:
    """As SGLang's get_config_file_name names a file (dtype None: unquantized, bf16/fp16)."""
    return (f"E={experts},N={inter},device_name={device.replace(' ', '_')}{dtype_selector(dtype)}"
            f"{'_down' if down else ''}.json")


def resolve(config_dir: Path, name: str, triton_version: str) -> Path | None:
    """The file SGLang reads for `name` under `config_dir`: the running Triton's folder, else the other
    versions' newest first; None where it falls back to its default config."""
    root = Path(config_dir) / "configs"
    exact = root / version_dir(triton_version) / name
    if exact.exists():
        return exact
    folders = sorted((p.name for p in root.iterdir() if p.name.startswith("triton_")), key=_version_key,
                     reverse=True) if root.is_dir() else []
    for folder in folders:
        if folder != version_dir(triton_version) and (root / folder / name).exists():
            return root / folder / name
    return None


def read(path: Path) -> dict[int, dict]:
    try:
        return {int(k): v for k, v in json.loads(Path(path).read_text()).items()}
    except (OSError, ValueError, AttributeError) as exc:
        raise AstraError(f"not a fused MoE config file: {path} ({exc})") from None


def write(path: Path, table: dict[int, MoeConfig]) -> Path:
    """A file in SGLang's format: batch size -> config, sorted by batch size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({str(m): table[m].sglang() for m in sorted(table)}, indent=4) + "\n")
    return path


def nearest(keys, tokens: int) -> int:
    """SGLang's choice of key for a call of `tokens` tokens (ties to the first key, as min() does)."""
    return min(keys, key=lambda k: abs(k - tokens))


def package_dir() -> Path:
    """The installed sglang package's folder, found without importing it."""
    return sglang_package_dir()


def default_config_dir() -> Path:
    """Where SGLang reads configs from in this environment ($SGLANG_MOE_CONFIG_DIR or its own folder)."""
    return Path(os.environ.get(ENV) or (package_dir() / CONFIG_MODULE).parent)


@functools.cache
def sglang_module() -> ModuleType:
    """SGLang's installed fused_moe_triton_config.py, loaded on its own (under a private name): its
    lookup functions without its package's server imports. Outside a server its exec config is not
    published: the lookup then runs as a server without --enable-deterministic-inference does."""
    path = package_dir() / CONFIG_MODULE
    spec = importlib.util.spec_from_file_location(STANDALONE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[STANDALONE] = module  # importable by name, like any module (patch targets, pickling)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[STANDALONE]
        raise AstraError(f"cannot load SGLang's config lookup {path}: {exc}") from None
    try:
        module.get_exec()
    except ValueError:  # "config namespace 'exec' not published": no server here
        module.get_exec = lambda: SimpleNamespace(deterministic=SimpleNamespace(enable_deterministic_inference=False))
    return module


@dataclass(frozen=True)
class Pick:
    """The config SGLang runs a call of `tokens` tokens with, and where it comes from."""

    tokens: int
    config: MoeConfig
    source: str
    """"file" (a shipped or user file: `path`) or "default" (SGLang's default config)."""
    path: str = ""
    key: int | None = None
    """The file's batch size whose config it takes."""

    def describe(self) -> str:
        if self.source == "default":
            return "SGLang's default config (no file for this GPU and expert shape)"
        return f"{Path(self.path).parent.name}/{Path(self.path).name} (key {self.key})"


def triton_version() -> str:
    import triton

    return triton.__version__


def sglang_picks(experts: int, inter: int, hidden: int, topk: int, batch_sizes, dtype: str | None = None
                 ) -> list[Pick]:
    """What SGLang picks at each batch size for this expert shape (`dtype` as its config files name it: None for
    bf16/fp16, "fp8_w8a8" for per-tensor fp8), by its own lookup (get_moe_configs, get_default_config) on this
    GPU, Triton and $SGLANG_MOE_CONFIG_DIR."""
    module = sglang_module()
    table = module.get_moe_configs(experts, inter, dtype)
    path = resolve(default_config_dir(), file_name(experts, inter, module.get_device_name(), dtype), triton_version())
    picks = []
    for tokens in batch_sizes:
        if table:
            key = nearest(table, tokens)
            picks.append(Pick(tokens, MoeConfig.from_sglang(table[key]), "file", str(path or ""), key))
        else:
            default = module.get_default_config(tokens, experts, inter, hidden, topk, dtype, False, None)
            picks.append(Pick(tokens, MoeConfig.from_sglang(default), "default"))
    return picks


def shipped(config_dir: Path | None = None) -> ConfigFiles:
    """A summary of the configs folder: files per Triton version, every key's values, the batch sizes."""
    root = Path(config_dir or (package_dir() / CONFIG_MODULE).parent)
    counts: dict[str, int] = {}
    values: dict[str, set] = defaultdict(set)
    sizes: set[int] = set()
    for folder in sorted((root / "configs").glob("triton_*"), key=lambda p: _version_key(p.name)):
        files = sorted(folder.glob("E=*.json"))
        counts[folder.name] = len(files)
        for path in files:
            try:
                table = read(path)
            except AstraError:
                continue
            sizes |= set(table)
            for config in table.values():
                for key, value in config.items():
                    if isinstance(value, (int, bool)):
                        values[key].add(int(value))
    from astra_sglang.extraction.triton.discover import env_reads, function_names

    module = root / Path(CONFIG_MODULE).name
    return ConfigFiles(module=str(module), functions=[f for f in function_names(module) if f in LOOKUPS],
                       env=env_reads(module), directory=str(root / "configs"), files=counts,
                       keys={k: sorted(v) for k, v in sorted(values.items())}, batch_sizes=sorted(sizes))


def shipped_configs(experts: int, inter: int, tokens: int, config_dir: Path | None = None,
                    dtype: str | None = None) -> list[MoeConfig]:
    """The configs SGLang's files hold for this expert shape and dtype (None: unquantized) on any GPU and Triton
    version, at the key nearest `tokens`: what tuning found elsewhere, a first guess here."""
    root = Path(config_dir or (package_dir() / CONFIG_MODULE).parent) / "configs"
    found = []
    for path in sorted(root.glob(f"triton_*/E={experts},N={inter},device_name=*.json")):
        selector = path.stem.partition(",dtype=")[2]
        if selector != (dtype or "") or path.name.endswith("_down.json"):
            continue
        try:
            table = read(path)
            config = MoeConfig.from_sglang(table[nearest(table, tokens)])
        except (AstraError, ValueError):
            continue
        if config not in found:
            found.append(config)
    return found
