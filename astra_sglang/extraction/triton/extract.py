"""`extract` for Triton kernels: where the kernel, its launchers and its config live, written to work/.

A spec whose source says `language = "triton"` (extract/fused_moe.toml) names the file, kernel, launcher and
config module inside the sglang package; any other Triton kernel is found by name in a Python file given with
`--from` (absolute, or relative to the installed sglang package). The output folder holds discovery.json
(typed: records.Discovery), a copy of the kernel's file for reading (third-party code: work/ is git-ignored)
and, for a spec, the spec.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError
from astra_sglang.extraction.sources import sglang_package_dir
from astra_sglang.extraction.triton.discover import find_kernel, source_hash
from astra_sglang.extraction.triton.records import ConfigFiles, Discovery
from astra_sglang.paths import specs_dir


@dataclass(frozen=True)
class TritonExtraction:
    discovery: Discovery
    out_dir: Path
    seconds: float

    def summary(self) -> str:
        k, d = self.discovery.kernel, self.discovery
        where = f"{Path(k.file).relative_to(d.root) if Path(k.file).is_relative_to(d.root) else k.file}:{k.line}"
        launchers = ", ".join(sorted({launch.function for launch in k.launches})) or "no launch site in that file"
        knobs = k.knobs()
        text = (f"discovered Triton kernel {k.name} ({d.package} {d.version}, {where}): launched by {launchers}; "
                f"tunable: {', '.join(f'{n} ({s})' for n, s in knobs.items()) or 'none'}; split-K: "
                f"{'yes' if k.split_k else 'no'}")
        if d.configs:
            files = ", ".join(f"{n} for {v.removeprefix('triton_').replace('_', '.')}" for v, n in d.configs.files.items())
            text += f"; config files ({', '.join(d.configs.env)}): {files}"
        return text + f" -> {self.out_dir / 'discovery.json'}"


def triton_source(kernel: str, source: str | None) -> bool:
    """Is this `extract` a Triton one: a spec with a Triton source, or a Python file given with --from."""
    if source and source.endswith(".py"):
        return True
    from astra_sglang.specs.registry import all_specs

    spec = next((s for s in all_specs() if s.name == kernel), None)
    return spec is not None and any(getattr(loc, "language", "") == "triton" for loc in spec.sources.values())


def _root(source: str | None) -> Path:
    """The sglang package folder: installed, or a folder given with --from (a package or a checkout)."""
    if source and not source.endswith(".py"):
        path = Path(source)
        for cand in (path, path / "sglang", path / "python" / "sglang"):
            if (cand / "srt").is_dir():
                return cand
        raise AstraError(f"{source}: not an sglang package folder or checkout (no srt/ in it)")
    return sglang_package_dir()


def extract_triton(kernel: str, source: str | None = None, out_dir: Path | None = None,
                   config_files: Callable[[Path], ConfigFiles] | None = None) -> TritonExtraction:
    """`config_files` summarizes the spec's config folder (the Triton target's own format, e.g. fused MoE's
    `triton.moe.configs.shipped`); without it discovery.json records no config files."""
    from astra_sglang.extraction.sources import _version

    start = time.perf_counter()
    spec_file = specs_dir() / f"{kernel}.toml"
    if source and source.endswith(".py"):  # any Triton kernel, named by its function
        root = sglang_package_dir()
        path = Path(source) if Path(source).is_absolute() else root / source
        name, config_dir, spec_file = kernel, None, None
    else:
        from astra_sglang.specs.registry import get_spec

        spec = get_spec(kernel)
        loc = next(loc for loc in spec.sources.values() if getattr(loc, "language", "") == "triton")
        root = _root(source)
        path, name = root / loc.path, loc.kernel
        config_dir = (root / loc.config).parent if getattr(loc, "config", "") else None
    if not path.is_file():
        raise AstraError(f"source not found: {path}")
    found = find_kernel(path, name)
    launcher = None if spec_file is None else getattr(loc, "launcher", "")
    if launcher and launcher not in {launch.function for launch in found.launches}:
        raise AstraError(f"{name} is not launched by {launcher} in {path.name} (launched by: "
                         f"{', '.join(sorted({x.function for x in found.launches})) or 'nothing in that file'})")
    files = [path, *(Path(launch.file) for launch in found.launches)]
    discovery = Discovery(kernel=found, package="sglang", version=_version(root, "sglang"), root=str(root),
                          source_hash=source_hash(files),
                          configs=config_files(config_dir) if config_dir and config_files else None)
    out = Path(out_dir or Path("work") / "extract" / f"{kernel}-triton")
    out.mkdir(parents=True, exist_ok=True)
    (out / "discovery.json").write_text(discovery.model_dump_json(indent=1))
    shutil.copyfile(path, out / "kernel.py")
    if spec_file is not None and spec_file.is_file():
        shutil.copyfile(spec_file, out / "spec.toml")
    return TritonExtraction(discovery, out, time.perf_counter() - start)
