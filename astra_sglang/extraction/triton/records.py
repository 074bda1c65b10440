"""Typed records of Triton discovery: a `@triton.jit` kernel, where it is launched and with which values,
and (fused MoE) the config files SGLang picks its block sizes from."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

LAUNCH_META = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""Launch options Triton takes beside the kernel's own arguments."""


class KernelParam(BaseModel):
    name: str
    constexpr: bool = False
    default: str | None = None


class LaunchArg(BaseModel):
    """One keyword argument at a launch site, and where its value comes from."""

    name: str
    source: Literal["constant", "local", "expression"]
    """constant: a literal; local: a name the launcher assigns literals to (a hard-coded knob, one value per
    branch); expression: anything else (derived from shapes, dtypes, flags)."""
    values: list[int | float | bool | str | None] = Field(default_factory=list)
    expr: str = ""


class Launch(BaseModel):
    """`kernel[grid](...)` inside a launcher function."""

    function: str
    file: str
    line: int
    grid: str
    args: list[LaunchArg] = Field(default_factory=list)
    splats: list[str] = Field(default_factory=list)
    """`**name` arguments: a config dict whose keys fill the kernel's remaining constexprs and launch options."""


class TritonKernel(BaseModel):
    name: str
    file: str
    line: int
    decorators: list[str]
    params: list[KernelParam]
    autotuned: bool = False
    """Decorated with @triton.autotune: Triton picks the config at run time from its own list."""
    launches: list[Launch] = Field(default_factory=list)

    @property
    def constexprs(self) -> list[str]:
        return [p.name for p in self.params if p.constexpr]

    def knobs(self) -> dict[str, str]:
        """Tunable values by name -> where they are set: "config" (a **splat, e.g. SGLang's config files),
        "launcher" (literals in the launcher), for constexprs the launch does not derive from its inputs,
        plus Triton's launch options."""
        out: dict[str, str] = {}
        for launch in self.launches:
            named = {a.name: a for a in launch.args}
            for name in [*self.constexprs, *LAUNCH_META]:
                arg = named.get(name)
                if arg is None and launch.splats and name not in self._fixed():
                    out.setdefault(name, "config")
                elif arg is not None and arg.source in ("constant", "local") and not _flag(arg):
                    out.setdefault(name, "launcher")
        return out

    def _fixed(self) -> set[str]:
        """Constexprs with a default in the signature and Triton options no config file sets."""
        return {p.name for p in self.params if p.default is not None} | {"num_ctas", "maxnreg"}

    @property
    def split_k(self) -> bool:
        return any("SPLIT_K" in p.name.upper() for p in self.params)


def _flag(arg: LaunchArg) -> bool:
    """A switch the launcher derives (even_Ks = True / False by branch), not a size to tune."""
    return all(isinstance(v, bool) for v in arg.values)


class ConfigFiles(BaseModel):
    """Where SGLang keeps a kernel's per-GPU, per-shape configs and what they hold."""

    module: str
    """The config module (file inside the sglang package)."""
    functions: list[str]
    """Its lookup functions found by name (get_config_file_name, get_moe_configs, ...)."""
    env: list[str]
    """Environment variables it reads (SGLANG_MOE_CONFIG_DIR: where the configs folder lives)."""
    directory: str
    """The shipped configs folder (configs/triton_<version>/...)."""
    files: dict[str, int]
    """Triton version folder -> number of config files in it."""
    keys: dict[str, list[int]]
    """Every config key seen in the shipped files -> the values it takes there."""
    batch_sizes: list[int]
    """The batch sizes (M) the shipped files are keyed by, all files together."""


class Discovery(BaseModel):
    """What `extract` found for one Triton kernel."""

    kernel: TritonKernel
    package: str
    version: str
    root: str
    source_hash: str
    """sha256 of the kernel's file and its launchers' files: a key of the tuner's cache."""
    configs: ConfigFiles | None = None
