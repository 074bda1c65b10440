"""Per kernel instantiation: do two builds compile to the same SASS? The check that a kernel or header change
left the generated code alone (a timed number stays valid for an unchanged instantiation). CPU only; needs
cuobjdump on PATH (a CUDA toolkit's, or the bin folder of the `nvidia-cuda-cuobjdump` wheel).

Usage:
    python3 benchmarks/sass_diff.py NEW OLD [-D NAME=VALUE] [--old-define NAME=VALUE] [--grep TEXT]
NEW / OLD: a file, or GIT_REV:PATH (read with `git show`, and built with that revision's harness_templates/
headers, so a change to the shared header is compared too), e.g.
    python3 benchmarks/sass_diff.py patches/silu_and_mul/kernel.cu cacc5fc:patches/silu_and_mul/kernel.cu
Prints one line per kernel (same / differs / only in one build) and the counts. `--rename REGEX=TEXT` rewrites
NEW's kernel names before matching, for a build that gained a template parameter, e.g. merge's ORDER:
    python3 benchmarks/sass_diff.py patches/merge_attn_states_lse/kernel.cu \
        4b56011:patches/merge_attn_states_lse/kernel.cu --grep ELi1EEEv --rename "ELi1EEEv=EEEv"
"""
import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

from astra_sglang.harness import build


def git_text(rev: str, path: str) -> str:
    text = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
    if text.returncode != 0:
        raise SystemExit(f"sass_diff: git show {rev}:{path}: {text.stderr.strip()[:200]}")
    return text.stdout


def source(spec: str, folder: Path, name: str) -> tuple[Path, Path | None]:
    """The file to build and, for GIT_REV:PATH, a folder with that revision's project headers."""
    if Path(spec).is_file():
        return Path(spec), None
    if ":" not in spec:
        raise SystemExit(f"sass_diff: no such file or GIT_REV:PATH: {spec}")
    rev, path = spec.split(":", 1)
    out = folder / name
    out.write_text(git_text(rev, path))
    headers = folder / f"{name}.headers"
    headers.mkdir()
    for header in build.HEADERS:
        (headers / header).write_text(git_text(rev, f"harness_templates/{header}"))
    return out, headers


def sass(path: Path, defines: dict[str, str], headers: Path | None = None) -> dict[str, list[str]]:
    if headers is not None:  # the build reads its headers (and keys its cache) through templates_dir()
        with mock.patch.object(build, "templates_dir", lambda: headers):
            return sass(path, defines)
    result = build.build_library(path, defines)
    if not result.ok:
        raise SystemExit(f"sass_diff: build of {path} failed: {result.log[-300:]}")
    return parse(subprocess.run(["cuobjdump", "-sass", result.library], capture_output=True, text=True,
                                check=True).stdout)


def parse(dump: str) -> dict[str, list[str]]:
    """Kernel (anonymous-namespace hash removed: it differs per file) -> its instructions, without addresses
    and encodings."""
    kernels = {}
    for m in re.finditer(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", dump, re.S):
        name = re.sub(r"_GLOBAL__N__\w+?_kernel_cu_[0-9a-f]+", "", m.group(1))
        kernels[name] = [line.split("*/", 1)[1].split(";")[0].strip() for line in m.group(2).splitlines()
                         if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
    return kernels


def rename(name: str, rules: list[str]) -> str:
    for rule in rules:
        pattern, text = rule.split("=", 1)
        name = re.sub(pattern, text, name)
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("new")
    ap.add_argument("old")
    ap.add_argument("-D", dest="defines", action="append", default=[], help="NAME=VALUE for the NEW build")
    ap.add_argument("--old-define", action="append", default=[], help="NAME=VALUE for the OLD build")
    ap.add_argument("--grep", default="", help="only kernels whose mangled name contains this (NEW's name)")
    ap.add_argument("--rename", action="append", default=[],
                    help="REGEX=TEXT applied to NEW's kernel names; OLD's kernels are then listed only where they match")
    args = ap.parse_args()
    if not shutil.which("cuobjdump"):
        raise SystemExit("sass_diff: cuobjdump not on PATH (CUDA toolkit, or the nvidia-cuda-cuobjdump wheel)")
    with tempfile.TemporaryDirectory() as tmp:
        new_path, new_headers = source(args.new, Path(tmp), "new.cu")
        new = sass(new_path, dict(d.split("=", 1) for d in args.defines), new_headers)
        old_path, old_headers = source(args.old, Path(tmp), "old.cu")
        old = sass(old_path, dict(d.split("=", 1) for d in args.old_define), old_headers)
    new = {name: code for name, code in new.items() if args.grep in name}
    new = {rename(name, args.rename): code for name, code in new.items()}
    counts = {"same": 0, "differs": 0, "only in one build": 0}
    for name in sorted(set(new) | ({n for n in old if args.grep in n} if not args.rename else set())):
        verdict = ("only in one build" if name not in new or name not in old
                   else "same" if new[name] == old[name] else "differs")
        counts[verdict] += 1
        print(f"{verdict:17s} {name}")
    print(", ".join(f"{v} {k}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
