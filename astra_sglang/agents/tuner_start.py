"""The tuner's start kernel taken from the extracted original: extract the op, derive its knobs.

So an op is tunable with no hand-written kernel: `optimize OP --tuner --from-extracted` (or the default
where the op has no knobbed kernel of ours) extracts SGLang's / flashinfer's / sgl-kernel's own kernel into
RUN_DIR/extracted/, derives the knobs of its launch path (extraction/knobgen.py) into knobbed.cu beside
it, and tunes that. `--from DIR` naming an earlier extraction (its provenance.json) derives the same way.
"""
from __future__ import annotations

from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.specs.records import KernelSpec

AUTO = "auto"
"""--from-extracted without a value: the first of the spec's sources found installed."""


def is_extraction(path: Path) -> bool:
    """An extracted kernel.cu (provenance.json beside it) that declares no knobs of its own."""
    return (Path(path).parent / "provenance.json").is_file() and "astra:knob" not in Path(path).read_text()


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
