"""A kernel source with its local quoted includes inlined: the one text that is hashed and compiled.

The build compiles a copy of the source in a scratch folder (harness/build.py), where nvcc's search for
`#include "x.cuh"` beside the including file finds nothing. Inlining, rather than adding the source's folder
to the include path, keeps two things true: the build reads only the scratch copy and the project's own
headers, and the build cache's key, a hash of the compiled text, changes whenever an included file does
(an -I path would leave a changed header behind a cached library, and keying on every file it might reach
means knowing the preprocessor's answer first).

As the preprocessor would: a quoted include naming a file beside its includer (a path relative to the
includer's folder) is replaced by that file's text, recursively; any other include is left for the include
path (the project's headers, system ones). A file holding `#pragma once` is inlined once; an include of a file
still being inlined is dropped (an include guard would drop it too). `#line` directives around each inlined
file keep compiler messages naming the file and line they come from, and the including file's own lines.
"""
from __future__ import annotations

import re
from pathlib import Path

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"(?P<name>[^"\n]+)"')
_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once\b.*$", re.M)
MAIN = "kernel.cu"
"""The name the compiled copy has: the source's own lines keep it in compiler messages (harness/linemap.py)."""


def expand(source: Path) -> str:
    """`source`'s text, every local quoted include inlined (unchanged where it has none)."""
    source = Path(source)
    return _Expander(source.parent.resolve()).text(source.resolve(), MAIN)


class _Expander:
    def __init__(self, root: Path):
        self.root = root
        self.once: set[Path] = set()
        self.open: list[Path] = []

    def _name(self, path: Path) -> str:
        """How messages name an inlined file: relative to the source's folder where it lies below it."""
        name = str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)
        return name.replace("\\", "\\\\")  # a string literal in `#line`

    def text(self, path: Path, name: str) -> str:
        """`path`'s text with its local includes inlined; `name`: how `#line` names it."""
        raw = path.read_text(errors="replace")
        if _ONCE.search(raw):
            self.once.add(path)
        self.open.append(path)
        lines = raw.split("\n")  # the preprocessor's lines (str.splitlines also splits at \f, \v, ...)
        lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
        for number, line in enumerate(lines, start=1):
            match = _INCLUDE.match(line)
            target = (path.parent / match["name"]).resolve() if match else None
            if target is not None and target.is_file():  # else for the include path (project's, system)
                lines[number - 1] = self._inline(target, number, name)
        self.open.pop()
        out = "".join(lines)
        # Inlined, a header's `#pragma once` would stand in the main file (a warning, and ignored there).
        return _ONCE.sub("", out) if self.open else out

    def _inline(self, target: Path, number: int, name: str) -> str:
        if target in self.open or target in self.once:
            return f"// {self._name(target)}: already included\n"
        body = self.text(target, self._name(target))
        if body and not body.endswith("\n"):
            body += "\n"
        return f'#line 1 "{self._name(target)}"\n{body}#line {number + 1} "{name}"\n'
