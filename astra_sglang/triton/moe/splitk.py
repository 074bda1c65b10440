"""Split-K for SGLang's fused_moe_kernel: a transformation (Python's `ast`) of the kernel in the installed source.

At decode batch sizes the down projection has few output blocks. Mixtral's (hidden 4096, N = 14336, top-2) at
batch 1 routes 2 token slots to 2 experts: 2 M-blocks x 4096 / BLOCK_SIZE_N N-blocks (128 at BLOCK_SIZE_N 64,
64 at 128) for an H100's 132 SMs, each block walking K = 14336 alone. With SPLIT_K, SPLIT_K programs share each
output block, each taking every SPLIT_K-th K tile; the partial sums go to an fp32 workspace [SPLIT_K, rows, N]
that a reduce kernel sums and casts (splitk_launch): no atomics, so results repeat bit for bit run to run. (Triton
has bf16 atomic adds on sm_90, and SGLang's own FUSE_SUM_ALL_REDUCE path adds into its output with them; here they
would round every partial to bf16 and sum in arrival order, for one launch saved.)

What the transform does, each step checked against what it expects (anything else is refused, naming it):
- appends the parameters `stride_ck` (the workspace's split stride) and `SPLIT_K: tl.constexpr`;
- after `pid = tl.program_id(axis=0)`: `pid_k = tl.program_id(axis=1)` and `c_ptr += pid_k * stride_ck`;
- `for k_start in range(0, K, BLOCK_SIZE_K)` becomes `range(pid_k * BLOCK_SIZE_K, K, BLOCK_SIZE_K * SPLIT_K)`,
  the A and B pointers start at the split's first tile and advance by SPLIT_K tiles;
- the bias is added by split 0 only; the routed weight scales every partial (linear: the sum carries it once);
- the cast to compute_type happens only where SPLIT_K == 1 (partials stay fp32).
With SPLIT_K = 1 and stride_ck = 0 the kernel computes what SGLang's does. The helper the kernel calls
(write_zeros_to_output) is copied unchanged.
"""
from __future__ import annotations

import ast
import builtins
import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.errors import AstraError

KERNEL_FILE = "kernels/ops/moe/fused_moe_triton_kernels.py"
KERNEL = "fused_moe_kernel"
HELPERS = ("write_zeros_to_output",)
LAUNCHER = "invoke_fused_moe_kernel"
TRANSFORM = "splitk"
VERSION = 1
"""Bumped with any change to the transform: part of every generated file's cache key."""
PARAMS = (
    "a_ptr", "a_desc", "b_ptr", "b_desc", "bias_ptr", "c_ptr", "a_scale_ptr", "b_scale_ptr", "topk_weights_ptr",
    "sorted_token_ids_ptr", "expert_ids_ptr", "num_tokens_post_padded_ptr", "add_mask_ptr", "N", "K", "EM",
    "num_valid_tokens", "stride_am", "stride_ak", "stride_be", "stride_bk", "stride_bn", "stride_bias_e",
    "stride_bias_n", "stride_cm", "stride_cn", "stride_asm", "stride_ask", "stride_bse", "stride_bsk", "stride_bsn",
    "group_n", "group_k", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "MUL_ROUTED_WEIGHT",
    "top_k", "compute_type", "use_fp8_w8a8", "use_int8_w8a8", "use_int8_w8a16", "per_channel_quant", "even_Ks",
    "c_sorted", "filter_expert", "swap_ab", "FUSE_ADD_TO_OUTPUT", "MASK_OUTPUT", "FUSE_SUM_ALL_REDUCE",
    "LORA_PRESERVE_BASE", "ROUTER_TOPK")
"""SGLang 0.5.17's kernel parameters: the launcher (splitk_launch) passes every one by name."""
ADDED = ("stride_ck", "SPLIT_K")
LAUNCHER_PARAMS = (
    "A", "B", "bias", "C", "A_scale", "B_scale", "B_zp", "topk_weights", "topk_ids", "sorted_token_ids",
    "expert_ids", "num_tokens_post_padded", "mul_routed_weight", "top_k", "config", "compute_type", "use_fp8_w8a8",
    "use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "per_channel_quant", "block_shape", "a_use_tma",
    "b_use_tma", "c_sorted", "filter_expert", "fuse_sum_all_reduce", "router_topk", "fuse_add_to_output",
    "add_output_mask", "mask_output", "lora_preserve_base")
"""invoke_fused_moe_kernel's parameters the replacement launcher reads (by name; SGLang 0.5.17's)."""
FREE_NAMES = {"tl", "triton", *HELPERS}
"""Module-level names the kernel may use besides builtins: all of them are in the generated module."""


class SourceMismatch(AstraError):
    """The installed source is not the one the transform was written against."""


@dataclass(frozen=True)
class KernelSource:
    """The parts of SGLang's kernel file the variant is made of, as found in one file."""

    path: Path
    kernel: ast.FunctionDef
    helpers: tuple[ast.FunctionDef, ...]
    launcher_params: tuple[str, ...]
    text: str
    """The source text of the kernel, its helpers and its launcher, as they are in the file."""

    @property
    def source_hash(self) -> str:
        """What a variant (and every figure measured with it) is valid for: these functions' text."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def _mismatch(path: Path, what: str) -> SourceMismatch:
    return SourceMismatch(f"SGLang's {KERNEL} in {path} no longer matches the {TRANSFORM} transform: {what}")


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _params(fn: ast.FunctionDef) -> tuple[str, ...]:
    return tuple(a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs)


def read(path: Path) -> KernelSource:
    """The kernel, its helpers and its launcher's parameters from `path`, checked to be what the transform and
    the replacement launcher expect (SourceMismatch naming the first difference otherwise)."""
    path = Path(path)
    try:
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
    except (OSError, SyntaxError) as exc:
        raise AstraError(f"cannot read SGLang's fused MoE kernels {path}: {exc}") from None
    found = _functions(tree)
    for name in (KERNEL, *HELPERS, LAUNCHER):
        if name not in found:
            raise _mismatch(path, f"no function {name}")
    kernel = found[KERNEL]
    if _params(kernel) != PARAMS:
        extra = sorted(set(_params(kernel)) ^ set(PARAMS))
        raise _mismatch(path, f"its parameters differ ({', '.join(extra) or 'order'})")
    missing = [p for p in LAUNCHER_PARAMS if p not in _params(found[LAUNCHER])]
    if missing:
        raise _mismatch(path, f"{LAUNCHER} has no parameter {', '.join(missing)}")
    free = free_names(kernel) - FREE_NAMES - set(dir(builtins))
    if free:
        raise _mismatch(path, f"it uses module names the variant would not have: {', '.join(sorted(free))}")
    segments = "\n".join(ast.get_source_segment(text, found[n], padded=True) or "" for n in (KERNEL, *HELPERS, LAUNCHER))
    return KernelSource(path, kernel, tuple(found[n] for n in HELPERS), _params(found[LAUNCHER]), segments)


def free_names(fn: ast.FunctionDef) -> set[str]:
    """Names `fn` reads that it neither takes nor assigns: module globals or builtins."""
    bound = set(_params(fn))
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def _sites(root: ast.AST, text: str) -> list[tuple[list, int]]:
    """(body, index) of every statement under `root` whose source is `text` (formatting aside)."""
    out = []
    for node in ast.walk(root):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                out += [(body, i) for i, stmt in enumerate(body)
                        if isinstance(stmt, ast.stmt) and ast.unparse(stmt) == text]
    return out


def _one(root: ast.AST, text: str, path: Path) -> tuple[list, int]:
    sites = _sites(root, text)
    if len(sites) != 1:
        raise _mismatch(path, f"`{text.splitlines()[0]}` found {len(sites)} times, expected once")
    return sites[0]


def _stmts(code: str) -> list[ast.stmt]:
    return ast.parse(code).body


def transform(source: KernelSource) -> ast.FunctionDef:
    """The kernel with SPLIT_K (see the module docstring); `source.kernel` is left as it was."""
    kernel, path = copy.deepcopy(source.kernel), source.path
    kernel.args.args += [ast.arg("stride_ck"), ast.arg("SPLIT_K", annotation=ast.parse("tl.constexpr").body[0].value)]
    body, i = _one(kernel, "pid = tl.program_id(axis=0)", path)
    body[i + 1:i + 1] = _stmts("pid_k = tl.program_id(axis=1)\nc_ptr += pid_k * stride_ck")
    loops = [n for n in ast.walk(kernel) if isinstance(n, ast.For) and ast.unparse(n.target) == "k_start"]
    if len(loops) != 1 or ast.unparse(loops[0].iter) != "range(0, K, BLOCK_SIZE_K)":
        raise _mismatch(path, "the K loop is not one `for k_start in range(0, K, BLOCK_SIZE_K)`")
    loop = loops[0]
    loop.iter = ast.parse("range(pid_k * BLOCK_SIZE_K, K, BLOCK_SIZE_K * SPLIT_K)").body[0].value
    for ptr, stride in (("a_ptrs", "stride_ak"), ("b_ptrs", "stride_bk")):
        body, i = _one(loop, f"{ptr} += BLOCK_SIZE_K * {stride}", path)
        body[i] = _stmts(f"{ptr} += BLOCK_SIZE_K * SPLIT_K * {stride}")[0]
    body, i = _one(kernel, ast.unparse(loop), path)
    body[i:i] = _stmts("if a_desc is None:\n    a_ptrs += pid_k * BLOCK_SIZE_K * stride_ak\n"
                       "if b_desc is None:\n    b_ptrs += pid_k * BLOCK_SIZE_K * stride_bk")
    body, i = _one(kernel, "if bias_ptr is not None:\n    accumulator += bias", path)
    body[i].body = _stmts("if pid_k == 0:\n    accumulator += bias")
    body, i = _one(kernel, "accumulator = accumulator.to(compute_type)", path)
    body[i] = _stmts("if SPLIT_K == 1:\n    accumulator = accumulator.to(compute_type)")[0]
    return ast.fix_missing_locations(kernel)


def render(source: KernelSource, kernel: ast.FunctionDef, sglang_version: str = "") -> str:
    """The variant module's text: Triton's imports, the helpers unchanged, the kernel given."""
    import jinja2

    from astra_sglang.paths import templates_dir

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "triton")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("moe_variant.py.j2").render(
        origin=source.path.name + (f" of SGLang {sglang_version}" if sglang_version else ""),
        source_hash=source.source_hash, transform=TRANSFORM, version=VERSION,
        helpers=[ast.unparse(h) for h in source.helpers], kernel=ast.unparse(kernel))
