"""Every next step `onboard` prints runs as printed on a machine without a GPU: it succeeds, or stops with one
line saying a GPU is needed -- never a missing kernel or source, a KeyError or a traceback. Ops the project has
never seen, read from source as next to CPU torch (stand-ins of flashinfer and sgl_kernel), one of them with its
original found in the package's headers (so `extract` and the tuner's step are printed too)."""
from __future__ import annotations

import re
import shlex
import shutil

import pytest
from click.testing import CliRunner
from onboard_support import STANDINS, calls_file

from astra_sglang.cli import main

NEEDS_GPU = re.compile(r"no CUDA (GPU|device)")
NEVER = ("not found", "KeyError", "Traceback", "names no sources", "no built-in kernel", "does not support")
OPS = [("flashinfer.norm:layernorm", "layernorm", []), ("flashinfer.norm:rmsnorm", "rmsnorm", ["--name", "fi_rmsnorm"]),
       ("sgl_kernel:sgl_per_token_quant_fp8", "sgl_per_token_quant_fp8", []),
       ("flashinfer.sampling:top_k_renorm_probs", "top_k_renorm_probs", [])]


def steps(output: str) -> list[list[str]]:
    lines = output.split("\nnext:\n", 1)[1].splitlines()
    return [shlex.split(line.split("  #", 1)[0].strip().replace("MODEL", "o4-mini"))[1:] for line in lines
            if line.strip().startswith("astra-sglang ")]


@pytest.mark.parametrize("entry, calls, extra", OPS, ids=[o[1] for o in OPS])
def test_every_printed_step_runs_or_says_it_needs_a_gpu(home, monkeypatch, entry, calls, extra):
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.delenv("ASTRA_STANDIN_IMPORTS", raising=False)  # as next to CPU torch: read from source
    monkeypatch.setenv("OPENAI_API_KEY", "none")  # `--llm`: no request is made before the start is evaluated
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = CliRunner().invoke(main, ["onboard", entry, "--shapes", calls_file(calls), *extra])
    assert out.exit_code == 0, out.output
    commands = steps(out.output)
    assert [c[0] for c in commands][:2] == ["kernels", "bench"] and ["optimize"] == commands[-1][:1]
    if calls == "rmsnorm" and shutil.which("nvcc"):  # its original is in the stand-in's headers: extracted
        assert ["extract", "fi_rmsnorm"] in commands and ["optimize", "fi_rmsnorm"] in commands
    for command in commands:
        done = CliRunner().invoke(main, command)
        text = done.output
        assert not any(word in text for word in NEVER), (command, text)
        if done.exit_code:
            last = text.strip().splitlines()[-1]
            assert last.startswith("error: ") and NEEDS_GPU.search(last), (command, text)
            assert not isinstance(done.exception, Exception) or isinstance(done.exception, SystemExit), text
