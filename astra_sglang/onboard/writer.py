"""`astra-sglang onboard`: from an op's entry point and recorded calls, a spec (and, where the reference is
SGLang's, a small reference module) in the user folder, then a CPU check of all of it."""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import jinja2
import torch

from astra_sglang.errors import AstraError
from astra_sglang.onboard.reference import Reference, find_reference
from astra_sglang.onboard.signature import Param, params_of, plan_dims
from astra_sglang.patching.recorder import CallRecord
from astra_sglang.paths import templates_dir, user_ops_dir, user_specs_dir

TOLERANCES = {"bfloat16": (1.6e-2, 1.6e-2), "float16": (2e-3, 2e-3), "float32": (1e-5, 1e-5)}
PROBE_DTYPES = ("bfloat16", "float16", "float32")


@dataclass
class Onboarded:
    name: str
    spec_path: Path
    reference: Reference
    reference_path: Path | None
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    checks: list[str]


def load_entry(entry: str):
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise AstraError(f"bad entry point {entry!r}: write MODULE:FUNCTION, e.g. sglang.srt.layers.activation:gelu_and_mul")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see, in one line
        raise AstraError(f"cannot import {module_name}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise AstraError(f"{module_name} has no function {attr!r}")
    return module, fn


def load_calls(path: Path) -> list[CallRecord]:
    """Recorded calls: a JSON list of {"tensors": {arg: {"shape": [...], "dtype": "..."}}, "scalars": {...}},
    each checked (specs/calls.py: one line naming the call and field of the first that is not one)."""
    from astra_sglang.specs.calls import load_calls as checked

    return checked(path)


def _probe(fn, params: list[Param], call: CallRecord, dtypes: list[str]) -> list[str]:
    """The dtypes the op runs with on CPU at the recorded shape; [] where it runs on none (a CUDA-only op)."""
    ok = []
    for dtype in dtypes:
        args, kwargs = [], {}
        for p in params:
            if p.kind == "scalar":
                value = call.scalars.get(p.name, p.default)
            elif p.name in call.tensors:
                t = call.tensors[p.name]
                value = torch.randn(t.shape).to(getattr(torch, dtype if p.dtype == "T" else p.dtype))
            else:
                value = None
            if p.keyword:
                kwargs[p.name] = value
            else:
                args.append(value)
        try:
            fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - not runnable in this dtype here
            continue
        ok.append(dtype)
    return ok


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "onboard")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["toml"] = lambda v: json.dumps(v) if not isinstance(v, bool) else str(v).lower()
    env.filters["toml_table"] = lambda d: "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.items()) + " }"
    return env


def onboard(entry: str, calls: list[CallRecord], *, name: str | None = None, model: dict | None = None,
            force: bool = False, source: str = "") -> Onboarded:
    from astra_sglang.specs import registry

    module, fn = load_entry(entry)
    attr = entry.partition(":")[2]
    name = name or attr
    params = params_of(fn)
    first = calls[0]
    for p in params:  # fixed dtypes: arguments whose recorded dtype differs from the first float tensor's
        if p.kind == "tensor" and p.name in first.tensors:
            p.dtype = first.tensors[p.name].dtype
    recorded = [p.dtype for p in params if p.kind == "tensor" and p.dtype in TOLERANCES]
    t_dtype = recorded[0] if recorded else "float32"
    for p in params:
        if p.kind == "tensor" and p.dtype == t_dtype:
            p.dtype = "T"
    plan = plan_dims(params, calls, model)
    dtypes = _probe(fn, params, first, list(PROBE_DTYPES)) or [t_dtype]
    ref = find_reference(module, attr)
    spec_path = user_specs_dir() / f"{name}.toml"
    if spec_path.exists() and not force:
        raise AstraError(f"{spec_path} exists: pass --force to replace it")
    ref_path = None
    reference = ref.target
    if ref.kind != "astra":
        ref_path = user_ops_dir() / f"astra_user_{name}.py"
        ref_path.parent.mkdir(parents=True, exist_ok=True)
        ref_module, _, ref_attr = ref.target.partition(":")
        ref_path.write_text(_env().get_template("reference.py.j2").render(
            name=name, note=ref.note, kind=ref.kind, module=ref_module, attr=ref_attr,
            args=[p.name for p in params], inputs=[p.name for p in params if p.role != "out" and p.kind == "tensor"],
            outputs=[p.name for p in params if p.role == "out"] or [p.name for p in params if p.kind == "tensor"],
            keyword=[p.name for p in params if p.keyword]))
        reference = f"astra_user_{name}:reference"
    constraints = [f"{d} >= 1" for d in plan.dims]
    text = _env().get_template("spec.toml.j2").render(
        entry=entry, source=source, name=name, summary=f"{entry} (onboarded; describe what it computes)",
        dims=plan.dims, dtypes=dtypes, reference=reference, reference_note=ref.note, constraints=constraints,
        arguments=params, tolerance={d: TOLERANCES[d] for d in dtypes if d in TOLERANCES},
        model_dims=plan.model_dims, shapes=[list(s) for s in plan.shapes], module=module.__name__, attr=attr)
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(text)
    registry.reload()
    checks = cpu_check(name, plan.shapes, dtypes)
    return Onboarded(name, spec_path, ref, ref_path, dtypes, plan.shapes, checks)


def cpu_check(name: str, shapes: list[tuple[int, ...]], dtypes: list[str]) -> list[str]:
    """The spec loads, the reference runs on the smallest shape (fp64), and its targets exist; AstraError with
    the first failure, else what was checked."""
    from astra_sglang.extraction.static_targets import static_check
    from astra_sglang.harness.inputs import allocate, fill
    from astra_sglang.patchset.manifest import Target
    from astra_sglang.specs.registry import get_spec

    spec = get_spec(name)
    done = [f"spec loads ({len(spec.arguments)} arguments, dims {'x'.join(spec.dims)})"]
    shape = min(shapes, key=lambda s: spec.call_bytes(s, dtypes[0])) if shapes else None
    if shape is None:
        raise AstraError(f"{name}: no complete shape in the recorded calls")
    args = fill(spec, allocate(spec, shape, dtypes[0], "cpu", guard=False), torch.Generator().manual_seed(0))
    ref = args.upcast()
    try:
        spec.reference_fn()(*ref.call_args(spec))
    except Exception as exc:  # noqa: BLE001
        raise AstraError(f"{name}: the reference {spec.reference} fails at {'x'.join(map(str, shape))} on CPU: "
                         f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    unwritten = [a.name for a, t in zip(spec.tensor_args, ref.tensors) if a.role == "out"
                 and t.dtype.is_floating_point and bool(t.isnan().any())]
    if unwritten:
        raise AstraError(f"{name}: the reference leaves {', '.join(unwritten)} unwritten: check the roles")
    done.append(f"reference runs at {'x'.join(map(str, shape))} (fp64, CPU)")
    for t in spec.sglang_targets:
        status = static_check(Target(t.module, t.attr)).status
        done.append(f"target {t.module}:{t.attr}: {status}")
    return done
