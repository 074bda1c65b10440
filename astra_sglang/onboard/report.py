"""What `onboard` prints: the table of its guesses (one row per argument, with why), the checks done and left,
and the next commands, each of which runs as printed (tests/test_onboard_next.py runs them)."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from astra_sglang.onboard.guess import describe_init
from astra_sglang.onboard.writer import OnboardResult


def guesses(done: OnboardResult) -> Table:
    table = Table(title=f"{done.name}: what onboard guessed (fix a wrong row in {done.spec_path.name})")
    for col in ("argument", "role", "dims", "dtype", "init", "why"):
        table.add_column(col)
    for p in done.params:
        role = "scalar" if p.kind == "scalar" else p.role + (" (returned)" if p.returned else "")
        dims = f"dim {p.dim}" if p.dim else "" if p.kind == "scalar" else "[" + ", ".join(map(str, p.shape)) + "]"
        dtype = p.scalar_type if p.kind == "scalar" else p.dtype
        table.add_row(*map(escape, (p.name, role, dims, dtype, describe_init(p), p.why)))
    return table


def next_steps(done: OnboardResult, sources: list[str]) -> list[tuple[str, str]]:
    """(command, what it does) in the order to run them."""
    name = done.name
    steps = [(f"astra-sglang kernels {name}", "the spec as the tool reads it"),
             (f"astra-sglang bench {name}", "on a GPU: the first run checks the op (tolerance, reference) and writes "
                                            "it into the spec; then SGLang's op, checked and timed")]
    if sources:
        steps.append((f"astra-sglang extract {name}", f"its original kernel from {sources[0]}, as a harness"))
        steps.append((f"astra-sglang optimize {name}", "the built-in tuner, from the extracted original's knobs"))
    steps.append((f"astra-sglang optimize {name} --llm MODEL", "the agents write kernels from the spec and the "
                  "reference, " + ("starting from the extracted original" if sources else "from nothing")))
    return steps


def print_report(done: OnboardResult, sources: list[str], echo) -> None:
    console = Console(width=max(Console().width, 160))
    with console.capture() as captured:
        console.print(guesses(done))
    echo(captured.get().rstrip())
    echo(f"wrote {done.spec_path} and {done.module_path}")
    if done.import_note:
        echo(f"read {done.signature.origin}: {done.import_note}")
    echo(f"reference: {done.reference.target} ({done.reference.note})")
    echo(f"dtypes {', '.join(done.dtypes)}; {len(done.shapes)} recorded shapes")
    for line in done.checks:
        echo(f"  ok: {line}")
    for line in done.pending:
        echo(f"  to be checked at the first GPU run: {line}")
    width = max(len(c) for c, _ in next_steps(done, sources))
    echo("next:")
    for command, what in next_steps(done, sources):
        echo(f"  {command.ljust(width)}  # {what}")
