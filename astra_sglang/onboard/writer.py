"""`astra-sglang onboard`: from an op's entry point and recorded calls, a spec and its adapter module in the user
folder, checked on CPU as far as CPU can check them.

Everything is written into a scratch folder inside the user folder first and checked from there; only a spec
that loads and passes the CPU check is moved into place (the module first, the spec last), so a failed onboard
leaves nothing behind and an earlier spec of the name stays as it was until the new one is good.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import jinja2
import torch

from astra_sglang.errors import AstraError
from astra_sglang.onboard import dims as plan
from astra_sglang.onboard import guess
from astra_sglang.onboard.llm_reference import MODULE_PREFIX, model_for, write_reference
from astra_sglang.onboard.reference import Reference, find_reference, user_reference
from astra_sglang.onboard.signature import Param, params_of
from astra_sglang.onboard.sources import extract_first, flashinfer_source
from astra_sglang.onboard.specfile import rewrite
from astra_sglang.onboard.static import Signature, live_signature, static_signature
from astra_sglang.paths import home_dir, templates_dir, user_ops_dir, user_specs_dir
from astra_sglang.specs import registry
from astra_sglang.specs.calls import CallRecord



@dataclass
class OnboardResult:
    """What `onboard` wrote, guessed, checked and left for the first GPU run (what its report prints)."""

    name: str
    spec_path: Path
    module_path: Path
    reference: Reference
    signature: Signature
    params: list[Param]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    checks: list[str]
    pending: list[str]
    import_note: str = ""
    """Why the op's module was read from source instead of imported ("" where it imported)."""
    sources: list[str] = field(default_factory=list)
    """The source kinds its original was found and extracted from (the spec's [sources])."""


def load_entry(entry: str) -> tuple[ModuleType | None, Signature, str]:
    """(the module where it imports, else None; the op's signature; why the import failed, or "")."""
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise AstraError(f"bad entry point {entry!r}: write MODULE:FUNCTION, e.g. "
                         "sglang.srt.layers.activation:gelu_and_mul")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure: read the source instead, and say why
        why = f"{type(exc).__name__}: {exc}".splitlines()[0]
        try:
            return None, static_signature(module_name, attr), why
        except AstraError as static:
            raise AstraError(f"cannot import {module_name} ({why}), and {static}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        try:  # a name bound only on CUDA (`if _is_cuda: def f`) is still in the source
            return module, static_signature(module_name, attr), f"{module_name} binds no {attr} here"
        except AstraError:
            raise AstraError(f"{module_name} has no function {attr!r}") from None
    sig = live_signature(fn)
    if not sig.params:  # a wrapper taking (*args, **kwargs): the definition in the module's source says more
        try:
            return module, static_signature(module_name, attr), f"{module_name}.{attr} is a wrapper with no signature"
        except AstraError:
            pass
    return module, sig, ""


def load_calls(path: Path) -> list[CallRecord]:
    """Recorded calls: a JSON list of {"tensors": {arg: {"shape": [...], "dtype": "..."}}, "scalars": {...},
    "returns": [...]}, each checked (specs/calls.py: one line naming the call and field of the first that is not
    one)."""
    from astra_sglang.specs.calls import load_calls as checked

    return checked(path)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "onboard")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["toml"] = lambda v: json.dumps(v) if not isinstance(v, bool) else str(v).lower()
    env.filters["toml_table"] = lambda d: "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.items()) + " }"
    return env


def default_name(module: str, attr: str) -> str:
    """The function's name, or, where the tool ships a spec of that name, the package's and the function's
    (flashinfer.norm:rmsnorm -> flashinfer_rmsnorm): a user spec of a shipped name would replace the shipped op."""
    from astra_sglang.paths import specs_dir

    return f"{module.split('.')[0]}_{attr}" if (specs_dir() / f"{attr}.toml").is_file() else attr


def call_convention(sig: Signature, params: list[Param]) -> tuple[list[str], list[str]]:
    """(positional, keyword): the spec arguments the op takes, positionally while they come in its own order
    without a gap, by name after the first parameter the spec leaves out (and the keyword-only ones)."""
    included = {p.name for p in params if not p.returned}
    positional, keyword, gap = [], [], False
    for p in sig.params:
        if p.name not in included:
            gap = True
        elif p.keyword or gap:
            keyword.append(p.name)
        else:
            positional.append(p.name)
    return positional, keyword


def _tolerances(params: list[Param], dtypes: list[str]) -> dict[str, tuple[float, float]]:
    needed = {d if p.dtype == "T" else p.dtype for p in params if p.kind == "tensor" and p.role != "in"
              for d in dtypes}
    return {d: guess.TOLERANCES[d] for d in guess.TOLERANCES if d in needed or d in dtypes}


def _place(name: str, spec_text: str, modules: dict[str, str], params: list[Param], dtypes: list[str],
           shapes: list[tuple[int, ...]], live: bool):
    """Write the spec and its modules (name -> text) into a scratch folder in the user folder, check them there
    (CPU), then move them into place, the spec last; nothing is left behind where the check fails."""
    from astra_sglang.onboard.checks import cpu_check

    home = home_dir()
    home.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".onboard-", dir=home))
    try:
        (scratch / f"{name}.toml").write_text(spec_text)
        for module, text in modules.items():
            (scratch / f"{module}.py").write_text(text)
        checked = cpu_check(scratch / f"{name}.toml", scratch, shapes, dtypes, live=live)
        if checked.runs_in:  # the op runs in more dtypes than the calls recorded: all of them are checked
            checked.done.append(f"the op also runs in {', '.join(checked.runs_in)} on CPU: added to dtypes")
            more = dtypes + checked.runs_in
            rewrite(scratch / f"{name}.toml", [("", "dtypes", more)]
                    + [("tolerance", d, {"atol": t[0], "rtol": t[1]}) for d, t in _tolerances(params, more).items()])
        if torch.cuda.is_available():  # the first GPU run now, on the scratch files: a spec placed is checked
            _gpu_run(scratch, name, checked)
        for folder, file in [*((user_ops_dir(), f"{m}.py") for m in modules), (user_specs_dir(), f"{name}.toml")]:
            folder.mkdir(parents=True, exist_ok=True)
            os.replace(scratch / file, folder / file)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for module in modules:  # imported from the scratch folder by the check
            sys.modules.pop(module, None)
    registry.reload()
    return checked


def _gpu_run(scratch: Path, name: str, checked) -> None:
    from astra_sglang.onboard.gpu_check import first_gpu_run
    from astra_sglang.specs.registry import load_spec_file

    path = scratch / f"{name}.toml"
    lines: list[str] = []
    sys.path.insert(0, str(scratch))
    try:
        first_gpu_run(load_spec_file(path), path, lines.append)
    finally:
        sys.path.remove(str(scratch))
    checked.done += [f"first GPU run: {line.strip()}" for line in lines[1:]]
    checked.pending.clear()


def onboard(entry: str, calls: list[CallRecord], *, name: str | None = None, model: dict | None = None,
            force: bool = False, source: str = "", reference: str | None = None, reference_llm: str | None = None,
            llm=None) -> OnboardResult:
    """`reference`: the user's torch reference (MODULE:FUNC); `reference_llm`: a model name whose testing agent
    writes one (`llm`: that model, else the OpenAI-compatible endpoint's)."""
    module, sig, why = load_entry(entry)
    module_name, _, attr = entry.partition(":")
    name = name or default_name(module_name, attr)
    spec_path = user_specs_dir() / f"{name}.toml"
    if spec_path.exists() and not force:
        raise AstraError(f"{spec_path} exists: pass --force to replace it")
    params = params_of(sig, calls)
    dtypes = guess.assign_dtypes(params, calls)
    dims = plan.plan_dims(params, calls, model)
    guess.assign_inits(params, calls, dtypes[0])
    arguments = [p.name for p in params]
    modules: dict[str, str] = {}
    if reference and reference_llm:
        raise AstraError("--reference and --reference-llm both name a reference: give one")
    if reference_llm:
        model = llm or model_for(reference_llm)
        modules[f"{MODULE_PREFIX}{name}"] = write_reference(model, entry, name, sig, params)
        ref = Reference("llm", f"{MODULE_PREFIX}{name}:reference", f"written by the testing agent ({model.name})")
    else:
        ref = (user_reference(reference, arguments) if reference
               else find_reference(module, module_name, attr, arguments))
    positional, keyword = call_convention(sig, params)
    module_file = f"astra_user_{name}"
    call = f"{module_file}:op"
    proposed = "" if ref.is_oracle else (f"{module_file}:reference" if ref.kind.startswith("native") else ref.target)
    ref_module, _, ref_attr = ref.target.partition(":")
    module_text = _env().get_template("ops.py.j2").render(
        name=name, entry=entry, module=module_name, attr=attr, args=arguments, positional=positional,
        keyword=keyword, returned=[p.name for p in sorted(params, key=lambda p: p.returns_at) if p.returns_at >= 0],
        oracle=ref.is_oracle, kind=ref.kind, note=ref.note,
        ref_module=ref_module, ref_attr=ref_attr,
        inputs=[p.name for p in params if p.kind == "tensor" and p.role != "out"])
    sources = flashinfer_source(module_name, attr)
    spec_text = _env().get_template("spec.toml.j2").render(
        entry=entry, source=source, name=name, summary=f"{entry} (onboarded; describe what it computes)",
        dims=dims.dims, dtypes=dtypes, reference=proposed or call, reference_dtype="op" if ref.is_oracle else "float64",
        reference_note=ref.note, constraints=[f"{d} >= 1" for d in dims.dims], arguments=params,
        tolerance=_tolerances(params, dtypes), model_dims=dims.model_dims, shapes=[list(s) for s in dims.shapes],
        call=call, proposed=proposed, proposed_note="" if ref.is_oracle else ref.note, module=module_name, attr=attr,
        sources=sources)
    checked = _place(name, spec_text, {module_file: module_text, **modules}, params, dtypes, dims.shapes,
                     live=module is not None)
    dtypes = dtypes + checked.runs_in
    if sources:  # its original through the generic launcher: the first kernel, where that derivation works
        kernel, said = extract_first(name, next(iter(sources)))
        checked.done.append(said) if kernel else checked.pending.append(f"no extraction: {said}"[:240])
        if kernel is None:  # `extract` and the tuner would fail the same way: the spec names no source
            rewrite(spec_path, [], drop=tuple(f"sources.{k}" for k in sources))
            sources = {}
        registry.reload()
    return OnboardResult(name, spec_path, user_ops_dir() / f"{module_file}.py", ref, sig, params, dtypes, dims.shapes,
                     checked.done, checked.pending, why, list(sources))
