"""The manifest of a shipped patch (patches/<op>/manifest.json): what it is, how it was made, what it measured.

Written by `optimize` (tuner or LLM run) or by hand; read by `patch list|verify`, `launch` and `ab`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from astra_sglang.errors import AstraError

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Target:
    """A name SGLang calls, "module:attr" (a manifest's `targets`); patching/targets.py finds and rebinds it."""

    module: str
    attr: str

    @classmethod
    def parse(cls, text: str) -> "Target":
        module, sep, attr = text.partition(":")
        if not sep or not module or not attr or "." in attr:
            raise AstraError(f"bad patch target {text!r}: write module:attr, e.g. sglang.srt.layers.layernorm:rmsnorm")
        return cls(module, attr)

    @property
    def dotted(self) -> str:
        """The form SGLang's HookRegistry takes."""
        return f"{self.module}.{self.attr}"

    @property
    def package(self) -> str:
        return self.module.split(".", 1)[0]

    def __str__(self) -> str:
        return f"{self.module}:{self.attr}"


class Provenance(BaseModel):
    method: Literal["hand", "tuner", "llm", "llm+tuner"]
    """Who wrote the kernel: a person, the built-in tuner, an LLM run, or an LLM kernel specialized by the tuner."""
    model: str = ""
    """LLM model name for llm runs."""
    rounds: int = 0
    run_id: str = ""
    date: str = ""
    gpu: str = ""
    started_from: str = ""
    """The baseline the run started from (e.g. an extracted kernel dir, or our own first kernel)."""
    notes: str = ""


class MeasuredShape(BaseModel):
    shape: tuple[int, ...]
    dtype: str
    candidate_us: float
    baseline_us: float
    speedup: float
    pct_roofline: float | None = None


class Defer(BaseModel):
    """Calls the patch leaves to SGLang's original because its kernel measured as fast or faster there: at
    large sizes both kernels stream at the copy roofline and ours can lose by a fraction of a percent; at few
    tokens SGLang's kernel can win on launch shape (rope). A call is deferred when it meets either bound."""
    min_bytes: int | None = Field(default=None, gt=0)
    """A call whose tensors (inputs and outputs) hold at least this many bytes runs the original."""
    below_rows: int | None = Field(default=None, gt=0)
    """A call whose first tensor of the op's dtype has fewer rows (its first dim: tokens) runs the original. In
    rows, not bytes, where a tensor of fixed size rides along (rope's cos/sin cache, max positions x head dim)."""
    dtypes: list[str] = Field(default_factory=list)
    """Only calls of these dtypes (empty: every dtype the patch covers)."""
    multiple_of: int = Field(default=1, gt=0)
    """Only calls whose first tensor's last dim is a multiple of this: the widths measured (SGLang runs other
    code at odd widths; its silu_and_mul faults at d % 8 == 4, where the kernel keeps serving)."""
    evidence: str
    """The measurement behind the threshold: results file, shapes, speedups on both sides of it."""

    @model_validator(mode="after")
    def _some_bound(self) -> "Defer":
        if self.min_bytes is None and self.below_rows is None:
            raise ValueError("defer needs min_bytes or below_rows")
        return self

    def defers(self, spec, shape: tuple[int, ...], dtype: str) -> bool:
        """Whether a call of this spec shape and dtype goes to the original: PatchedOp._coverage's rule, sized
        by the spec (its call_bytes; the first tensor of the op's dtype for rows and width)."""
        if self.dtypes and dtype not in self.dtypes:
            return False
        first = next((a for a in spec.tensor_args if a.dtype == "T"), spec.tensor_args[0])
        dims = spec.arg_shape(first, tuple(shape))
        if not dims or dims[-1] % self.multiple_of:
            return False
        return bool((self.min_bytes is not None and spec.call_bytes(tuple(shape), dtype) >= self.min_bytes)
                    or (self.below_rows is not None and dims[0] < self.below_rows))

    def describe(self) -> str:
        parts = ([f">= {self.min_bytes / 1e6:g} MB"] if self.min_bytes else []) + \
            ([f"< {self.below_rows} rows"] if self.below_rows else [])
        return ", ".join(parts)


class ConfigFile(BaseModel):
    """A tuned Triton config file in SGLang's layout inside the patch folder (kinds "triton-config" and
    "triton-source")."""

    path: str
    """Relative to the patch folder: configs/triton_<version>/E=..,N=..,device_name=...json, as SGLang names it."""
    experts: int
    inter: int
    hidden: int
    topk: int
    """SGLang keys its files by E and N only: a model with the same E and N but another hidden size or top-k
    reads this file too, untuned for it."""
    dtype: str
    device: str
    triton: str
    tuned: list[int] = Field(default_factory=list)
    """Batch sizes where the file holds a config other than SGLang's own pick (elsewhere it holds SGLang's)."""


class LaunchTable(BaseModel):
    """Tuned launch configs of one SGLang Triton attention kernel at one attention shape (kind "triton-launch")."""

    kernel: str
    """decode_attention or extend_attention (astra_sglang.triton.attention.space)."""
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    device: str
    triton: str
    by: Literal["batch", "extend"]
    """What a launch is matched on: its batch size (decode; CUDA graphs fix it at capture, not the kv length)
    or its longest extend length (extend); the nearest key's config, SGLang's own beyond the keys' range."""
    configs: dict[int, str]
    """Every key measured -> config code (AttnConfig.code), "" where SGLang's own pick was the best."""
    max_key: int
    """The largest key measured: a launch above 2x it keeps SGLang's pick (no config was measured there)."""


class SourceVariant(BaseModel):
    """The kernel of a "triton-source" patch: a variant of SGLang's own Triton kernel, generated from the installed
    SGLang source wherever the patch loads (third-party code: never stored in the patch), and served only where
    that source is the one it was measured on."""

    name: str = "splitk"
    """The variant (astra_sglang.triton.moe.sources): "splitk", SGLang's fused_moe_kernel with a SPLIT_K knob."""
    transform_version: int
    kernel_file: str
    """The SGLang file it is generated from, relative to the sglang package."""
    source_hash: str
    """The hash of that file's kernel, helpers and launcher when the patch was measured: another is refused."""


class InPlace(BaseModel):
    """An op's kernel time per step in a patched server against an unpatched one under the same load, at the
    server's own shapes (`astra-sglang profile --report PATCHED --compare BASE --verdict`)."""
    phase: str
    rows: list[int]
    """Tokens of the calls the patch served in that phase (the rest its `defer` left to SGLang)."""
    before_us: float
    after_us: float
    """Per step; the patched run's time scaled to the unpatched run's tokens per step."""
    change_pct: float
    evidence: str
    """The two profiles, their date and GPU."""


class PatchManifest(BaseModel):
    op: str
    """Kernel spec name (extract/<op>.toml)."""
    kind: Literal["cuda", "triton-config", "triton-launch", "triton-source"] = "cuda"
    """cuda: a kernel (`kernel`, C ABI) replacing SGLang's op at `targets`; triton-config: tuned config files for
    SGLang's own Triton kernel (`configs`), which `launch` points SGLang at ($SGLANG_MOE_CONFIG_DIR), its
    `targets` wrapped only to count the lookups that read them; triton-launch: tuned launch configs of SGLang's
    own Triton kernel (`launches`), put at its launch where `targets` names the kernel; triton-source: a source
    variant of SGLang's Triton kernel (`variant`) put in the place of its launcher (`targets`), with config files
    (`configs`) whose entries carry the variant's knobs as extra keys (SPLIT_K_UP, SPLIT_K_DOWN): SGLang reads
    them without those keys, the launcher takes the knobs at the same batch-size key."""
    configs: list[ConfigFile] = Field(default_factory=list)
    variant: SourceVariant | None = None
    launches: list[LaunchTable] = Field(default_factory=list)
    """triton-launch: tuned launch configs put at the launch of SGLang's own kernel (its `targets`: the kernel's
    module global, which SGLang's launcher looks up at every call)."""
    kernel: str = "kernel.cu"
    """Kernel source (exposes the C ABI), relative to the patch folder: a sibling patch's file built with
    other `defines` is allowed (patches/merge_state builds merge_attn_states_lse's with base-2 LSEs)."""
    defines: dict[str, str] = Field(default_factory=dict)
    dtypes: list[str]
    sglang_versions: str = ">=0.5.17"
    """PEP 440 specifier of the SGLang versions whose call sites this patch targets."""
    targets: list[str] = Field(default_factory=list)
    """"module:attr" names replaced in SGLang (default: the spec's sglang_targets)."""
    enabled: bool = True
    provenance: Provenance
    baseline: str = ""
    """What the measured speedups are relative to."""
    measured: list[MeasuredShape] = Field(default_factory=list)
    defer: Defer | None = None
    """Where the patched op calls the original instead of the kernel (None: the kernel serves every covered call)."""
    gate_max_bytes: int | None = None
    """The largest call (bytes of its tensors) the acceptance gate checked the kernel on: a larger call runs
    the original, so that nothing is served that was not checked at its size (None: no bound recorded)."""
    checks: list[str] = Field(default_factory=list)
    """What the kernel passed before it was shipped besides the gate (compute-sanitizer tools), one line each."""
    inplace: list[InPlace] = Field(default_factory=list)
    """The in-place verdict's figures, one per phase the patch served (profile --verdict)."""
    off_reason: str = ""
    """Why the patch is disabled, where a command disabled it (profile --verdict); `launch` prints it."""

    @model_validator(mode="after")
    def _variant_of_source_patches(self) -> "PatchManifest":
        if (self.kind == "triton-source") != (self.variant is not None):
            raise ValueError("a triton-source patch names its variant, and no other kind does")
        return self

    @classmethod
    def load(cls, folder: str | Path) -> "PatchManifest":
        return cls.model_validate_json((Path(folder) / MANIFEST).read_text())

    @classmethod
    def load_of_kind(cls, folder: Path, kind: str, what: str) -> "PatchManifest | None":
        """The manifest a tuner adds its results to: None where the folder has none yet, an error where it holds
        a patch of another kind (`what` names the results, for the message)."""
        if not (folder / MANIFEST).is_file():
            return None
        manifest = cls.load(folder)
        if manifest.kind != kind:
            raise AstraError(f"{folder} holds a {manifest.kind} patch: give another --patches-dir for {what}")
        return manifest

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / MANIFEST
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=1) + "\n")
        return path
