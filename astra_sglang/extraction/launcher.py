"""The generic launcher: `astra_launch` derived from libclang's view of the source's own host entry.

A host entry is a host function whose body launches the kernel (a `<<<...>>>` call, `cudaLaunchKernelEx`,
or any reference to it), e.g. flashinfer's `norm::RMSNorm<T>(T* input, T* weight, T* output, uint32_t
batch_size, uint32_t d, uint32_t stride_input, ...)`. Each of its parameters is mapped to the spec by name
and type -- pointers to tensor arguments (`output` is the spec's `out`), integers to dims (`batch_size` is
`tokens`) or to a tensor's row stride (`stride_input`), floats to scalars, `enable_pdl` off, the stream
to the harness's stream -- and its `typename` template parameters to the op's dtype. The launcher then
calls the entry unchanged, so grid/block logic stays the original's. Where a parameter maps to nothing
(tvm-ffi or torch tensors, strings) no launcher is derived and the per-(source, op) template is used.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from clang.cindex import CursorKind

from astra_sglang.errors import AstraError
from astra_sglang.extraction import hostcode
from astra_sglang.extraction.units import Parsed
from astra_sglang.specs.records import KernelSpec

# Names sources give the spec's dims (normalized: lower case, no underscores).
DIM_ALIASES = {
    "tokens": ("batchsize", "numtokens", "seqlen", "rows", "numrows", "m"),
    "d": ("hidden", "hiddensize", "hiddendim", "dim", "n", "cols"),
    "heads": ("numheads",),
    "headdim": ("headsize",),
}
_REFS = (CursorKind.DECL_REF_EXPR, CursorKind.OVERLOADED_DECL_REF, CursorKind.MEMBER_REF_EXPR)
TENSOR_ALIASES = {"out": ("output", "o", "dst"), "input": ("in", "x", "src")}
CTYPES = {  # the element types each source kind's code names the op's dtypes with
    "sglang": {"float32": "fp32_t", "float16": "fp16_t", "bfloat16": "bf16_t"},
    "default": {"float32": "float", "float16": "half", "bfloat16": "nv_bfloat16"},
}


@dataclass
class HostEntry:
    """What the launcher needs to know about the entry, as libclang sees it."""

    name: str
    """Qualified name to call it by."""
    params: list[tuple[str, str]]
    """(name, type spelling) in order."""
    type_params: list[str]
    """Its `typename` template parameters (all bound to the op's element type)."""
    returns_error: bool
    """Returns cudaError_t (else the launcher asks cudaGetLastError)."""


@dataclass
class GenericLauncher:
    entry: HostEntry
    args: list[str]
    """One C++ expression per entry parameter; T_ stands for the element type."""
    tensors: list[str]
    scalars: list[str]
    dims: dict[str, str] = field(default_factory=dict)
    """Each spec dim: the tensor expression it is read from."""
    fixed_dtype: dict[str, str] = field(default_factory=dict)
    """Tensors whose dtype is fixed (float32) rather than the op's T."""


def _norm(name: str) -> str:
    return name.lower().replace("_", "")


def find_entry(parsed: Parsed, kernel: str, name: str = "") -> HostEntry:
    """The host entry: `name` if the spec gives one, else the host function in the parsed files that
    references `kernel` (the one with the fewest parameters when several do)."""
    found = []
    for unit, tops in parsed.cursors.items():
        # static launch methods of a struct (SGLang JIT's ActivationKernel<T, kUsePDL>::launch) count too
        curs = [m for c in tops for m in ([c] + ([ch for ch in c.get_children() if ch.kind in hostcode.FUNCTIONS]
                                                 if c.kind in hostcode.CLASSES else []))]
        for cur in curs:
            if not hostcode.is_host_only(cur, parsed.texts[unit.file].text) or not cur.is_definition():
                continue
            if name and not _qualified(cur).endswith(name) and cur.spelling != name:
                continue
            if name or any(n.kind in _REFS and n.spelling == kernel for n in cur.walk_preorder()):
                found.append(cur)
    if not found:
        raise AstraError(f"no host entry launches {kernel}" + (f" (looked for {name})" if name else ""))
    def params_of(c):  # get_arguments() is empty for function templates
        return [(a.spelling, a.type.spelling) for a in c.get_children() if a.kind == CursorKind.PARM_DECL]

    cur = min(found, key=lambda c: len(params_of(c)))
    params = params_of(cur)
    types = [c.spelling for c in cur.get_children() if c.kind == CursorKind.TEMPLATE_TYPE_PARAMETER]
    if any(c.kind in (CursorKind.TEMPLATE_NON_TYPE_PARAMETER, CursorKind.TEMPLATE_TEMPLATE_PARAMETER)
           for c in cur.get_children()):
        raise AstraError(f"host entry {cur.spelling} has non-type template parameters: no generic launcher")
    return HostEntry(_qualified(cur), params, types, cur.result_type.spelling.endswith("cudaError_t"))


def _qualified(cur) -> str:
    parts, p = [cur.spelling], cur.semantic_parent
    while p is not None and (p.kind == CursorKind.NAMESPACE or p.kind in hostcode.CLASSES):
        if p.spelling:
            parts.insert(0, p.spelling)
        p = p.semantic_parent
    return "::".join(parts)


def derive(spec: KernelSpec, entry: HostEntry) -> GenericLauncher:
    """Map every entry parameter to the spec; AstraError naming the first one that maps to nothing."""
    tensors = [a for a in spec.arguments if a.kind == "tensor"]
    scalars = [a.name for a in spec.arguments if a.kind == "scalar"]
    by_name = {}
    for i, a in enumerate(tensors):
        for alias in (a.name, *TENSOR_ALIASES.get(a.name, ())):
            by_name.setdefault(_norm(alias), (i, a))
    dims: dict[str, str] = {}
    for a in tensors:
        for axis, dim in enumerate(a.shape):
            if isinstance(dim, str) and re.fullmatch(r"\w+", dim):
                dims.setdefault(dim, f"{a.name}.shape[{axis}]")
    launcher = GenericLauncher(entry, [], [a.name for a in tensors], scalars, dims,
                               {a.name: "float32" for a in tensors if a.dtype == "float32"})
    for pname, ptype in entry.params:
        launcher.args.append(_map_param(pname, ptype, entry, by_name, dims, scalars))
    return launcher


def _map_param(pname: str, ptype: str, entry: HostEntry, by_name: dict, dims: dict[str, str],
               scalars: list[str]) -> str:
    key, base = _norm(pname), re.sub(r"\bconst\b|[*&]", "", ptype).strip()
    if ptype.replace(" ", "") in ("cudaStream_t", "cudaStream_t&"):
        return "stream"
    if "*" in ptype and _norm(pname) in by_name:
        _, arg = by_name[key]
        elem = "T_" if base in entry.type_params else base
        if arg.dtype == "float32" and elem != "float":
            raise AstraError(f"{pname}: {ptype} but the spec's {arg.name} is float32")
        return f"static_cast<{elem}*>({arg.name}.data)"
    if base == "bool" and key in ("enablepdl", "usepdl", "pdl"):
        return "false"  # the harness launches plainly on its stream
    if base in ("float", "double") and pname in scalars:
        return f"static_cast<{base}>(scalars[{scalars.index(pname)}])"
    if base in ("uint32_t", "int32_t", "int64_t", "uint64_t", "int", "unsigned int", "size_t"):
        m = re.fullmatch(r"stride_?(\w+)", pname)
        if m and _norm(m.group(1)) in by_name:
            return f"static_cast<{base}>({by_name[_norm(m.group(1))][1].name}.stride[0])"
        for dim, expr in dims.items():
            if key == _norm(dim) or key in DIM_ALIASES.get(_norm(dim), ()):
                return f"static_cast<{base}>({expr})"
    raise AstraError(f"host entry {entry.name}: parameter {pname} ({ptype}) maps to no spec argument")


TEMPLATE = "generic_host_entry.cu.j2"


def render(spec: KernelSpec, kind: str, g: GenericLauncher, abi_dtype: dict[str, str]) -> str:
    import jinja2

    from astra_sglang.paths import templates_dir

    def dim_expr(dim) -> str:  # "2*d" -> "2*(input.shape[1])"
        if isinstance(dim, int):
            return str(dim)
        return re.sub(r"[A-Za-z_]\w*", lambda m: f"({g.dims[m.group()]})" if m.group() in g.dims else m.group(),
                      dim) if dim not in g.dims else g.dims[dim]

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "launchers")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["eq0"] = lambda expr: f"{expr} == 0"
    first_t = next((t for t in g.tensors if t not in g.fixed_dtype), g.tensors[0])
    return env.get_template(TEMPLATE).render(spec=spec, g=g, dim_expr=dim_expr, first_t=first_t,
                                             abi_dtype=abi_dtype, ctypes=CTYPES.get(kind, CTYPES["default"]))
