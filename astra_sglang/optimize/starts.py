"""The kernel a run starts from: the LLM loop's (`start_source`) and the built-in tuner's (`tuner_start`).

The tuner searches `// astra:knob` parameters, so its start must declare some. Without --from it starts from the
patch `launch` serves for the op (the user folder's over the shipped one: `PatchStore.layers`), then our own
first kernel, then the op's original, extracted: `optimize OP --tuner --from-extracted` (or the default where
the op has no knobbed kernel of ours) extracts SGLang's / flashinfer's / sgl-kernel's own kernel into
RUN_DIR/extracted/, derives the knobs of its launch path (extraction/knobgen.py) into knobbed.cu beside it, and
tunes that. `--from DIR` naming an earlier extraction (its provenance.json) derives the same way.
"""
from __future__ import annotations

from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.kernels.variants import cached_source, first_kernel, materialize
from astra_sglang.patchset.store import PatchStore
from astra_sglang.paths import extracted_kernel
from astra_sglang.specs.records import KernelSpec

AUTO = "auto"
"""--from-extracted without a value: the first of the spec's sources found installed."""
KNOB = "astra:knob"


FROM_NOTHING = "astra:from-nothing"
"""Marks the skeleton an onboarded op's LLM run starts from: it declines every shape."""


def from_nothing(spec: KernelSpec) -> Path:
    """The start of an onboarded op that has no kernel: a skeleton describing the spec that declines every shape
    (so SGLang's op serves them all until the agents write one); cached by its text."""
    import jinja2

    from astra_sglang.paths import templates_dir

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "onboard")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    text = env.get_template("from_nothing.cu.j2").render(spec=spec, entry=spec.onboard.entry if spec.onboard else "")
    return cached_source(text, spec.name, "from-nothing")


def start_source(spec: KernelSpec, given: str | None) -> Path:
    """--from FILE, --from DIR (its kernel.cu, or its only .cu file), our own first kernel, or, for an onboarded
    op, its extracted original, else the skeleton the agents write a kernel into (`from_nothing`)."""
    if given is None:
        path, defines = first_kernel(spec.name)
        if not path.is_file() and spec.onboard is not None:
            found = extracted_kernel(spec)  # its original, where `onboard` (or `extract`) extracted it
            return found[0] if found else from_nothing(spec)
        if not path.is_file():
            raise AstraError(f"no built-in kernel for {spec.name}: pass --from DIR|FILE (see `extract`)")
        return materialize(path, defines, spec.name)  # a sibling op's kernel: its defines written in
    path = Path(given)
    if path.is_dir():
        if (path / "kernel.cu").is_file():
            return path / "kernel.cu"
        found = sorted(path.glob("*.cu"))
        if len(found) != 1:
            raise AstraError(f"{given}: expected kernel.cu or exactly one .cu file, found {len(found)}")
        return found[0]
    if not path.is_file():
        raise AstraError(f"{given}: no such file or directory")
    return path


def tuner_start(spec: KernelSpec, start: str | None, extracted: str | None = None, run_dir: Path | None = None,
                echo=print, patches: PatchStore | None = None) -> Path:
    """--from-extracted: the op's original, extracted and knobbed. --from an extraction: its derived knobs;
    --from another kernel: that kernel. Otherwise the first patch of the op's layers (`patches`, default: the
    user folder's over the shipped set) with knobs (a patch that builds a sibling's file gets that file with its
    defines written in), else our first kernel where it has knobs, else the extracted original."""
    work = Path(run_dir or Path("runs") / f"{spec.name}-start")
    if extracted is not None:
        return extracted_start(spec, work, extracted, echo)
    if start is not None:
        path = start_source(spec, start)
        return knobbed_start(path, echo) if is_extraction(path) else path
    for entry in (patches or PatchStore()).layers(spec.name):
        kernel = entry.kernel_path.resolve()
        if kernel.is_file() and KNOB in kernel.read_text():
            echo(f"tuning from {entry.describe()}: {kernel}")
            return materialize(kernel, dict(entry.manifest.defines), spec.name)
        echo(f"{entry.describe()} declares no `// {KNOB}` to tune: not its start")
    own, defines = first_kernel(spec.name)
    if own.is_file() and KNOB in own.read_text():
        return materialize(own, defines, spec.name)
    if spec.onboard is not None and not spec.sources:
        raise AstraError(f"no kernel with knobs for {spec.name} to tune, and onboard found no source of its "
                         f"original to extract: `optimize {spec.name} --llm MODEL` writes kernels from the spec, "
                         "or pass --from FILE")
    echo(f"no hand-written kernel with knobs for {spec.name}: tuning its extracted original")
    return extracted_start(spec, work, None, echo)


def is_extraction(path: Path) -> bool:
    """An extracted kernel.cu (provenance.json beside it) that declares no knobs of its own."""
    return (Path(path).parent / "provenance.json").is_file() and KNOB not in Path(path).read_text()


def knobbed_start(kernel_cu: Path, echo=print) -> Path:
    """knobbed.cu derived from `kernel_cu`; one-line AstraError where its launch path has no knob."""
    from astra_sglang.extraction.knobgen import write_knobbed

    path, derivation = write_knobbed(kernel_cu)
    line = derivation.summary(str(kernel_cu))
    if path is None:
        raise AstraError(line)
    echo(line)
    return path


def extracted_start(spec: KernelSpec, run_dir: Path, source: str | None = AUTO, echo=print) -> Path:
    """Extract `spec`'s original (from `source`, or where installed) into RUN_DIR/extracted, knobbed."""
    import shutil

    from astra_sglang.extraction.pipeline import extract

    result = extract(spec.name, None if source in (None, AUTO) else source, Path(run_dir) / "extracted",
                     check=shutil.which("nvcc") is not None)
    echo(f"extracted {spec.name} from {result.source_kind} {result.version}: {result.kernel_cu}")
    return knobbed_start(result.kernel_cu, echo)
