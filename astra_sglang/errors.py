"""One exception type for every user-facing failure: the CLI prints its message on one line and exits 1; and
one line for any exception a run records and carries on past (`describe`)."""


class AstraError(Exception):
    """A clear, one-line, user-facing error (unknown kernel, missing source, no GPU, failing build...)."""


def describe(exc: BaseException) -> str:
    """One line for a failure: its type, its first line and, where the message runs on (Triton's compile errors
    point at the source first), its last."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    if len(lines) > 1 and lines[-1] != text:
        text = f"{text} ... {lines[-1]}"
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
