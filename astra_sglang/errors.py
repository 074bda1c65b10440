"""One exception type for every user-facing failure: the CLI prints its message on one line and exits 1."""


class AstraError(Exception):
    """A clear, one-line, user-facing error (unknown kernel, missing source, no GPU, failing build...)."""
