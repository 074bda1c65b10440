"""`onboard --reference-llm MODEL`: the testing agent, shown the op's source and the spec's arguments, writes the
torch reference; it is proposed like the user's (run on CPU before anything is written, accepted on the GPU once it
agrees with the op). A scripted model stands in for the endpoint."""
from __future__ import annotations

import tomllib

import pytest
from onboard_support import calls_file

from astra_sglang.errors import AstraError
from astra_sglang.onboard import writer
from astra_sglang.optimize.agents.scripted import ScriptedModel
from astra_sglang.onboard.writer import load_calls
from astra_sglang.specs.calls import CallRecord

LAYERNORM = '''Here it is.
```python
import torch


def reference(input, gemma, beta, eps, out):
    x = input.double()
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    out.copy_((x - mean) / torch.sqrt(var + eps) * gemma + beta)
```
'''


def calls(name: str) -> list[CallRecord]:
    from pathlib import Path

    return load_calls(Path(calls_file(name)))


def test_the_agents_reference_is_proposed_after_it_runs_on_cpu(standins, home):
    model = ScriptedModel([LAYERNORM], name="scripted")
    done = writer.onboard("flashinfer.norm:layernorm", calls("layernorm"), reference_llm="scripted", llm=model)
    spec = tomllib.loads(done.spec_path.read_text())
    assert spec["reference"] == "astra_user_ref_layernorm:reference" and spec["reference_dtype"] == "float64"
    assert spec["onboard"]["proposed_note"] == "written by the testing agent (scripted)"
    assert (home / "ops" / "astra_user_ref_layernorm.py").read_text().count("def reference(") == 1
    assert any("reference runs at 1x4096 (fp64, CPU)" in line for line in done.checks)
    if standins == "live":  # the stand-in op runs on CPU: the agent's reference already agrees with it there
        assert any("agreeing with the reference" in line for line in done.checks)
    prompt = model.calls[0][-1].content
    assert "def layernorm(" in prompt and "`out`: out tensor" in prompt
    assert "`gemma`: in tensor, dtype float32" in prompt


@pytest.mark.parametrize("answer, message", [
    ("no code at all", "holds no Python block defining reference"),
    ("```python\ndef other(input):\n    pass\n```", "holds no Python block defining reference"),
    ("```python\ndef reference(input, gemma, beta, eps, out):\n    raise RuntimeError('nope')\n```",
     "fails at 1x4096 on CPU: RuntimeError: nope"),
])
def test_an_unusable_answer_is_one_line_and_leaves_nothing(standins, home, answer, message):
    with pytest.raises(AstraError, match=message):
        writer.onboard("flashinfer.norm:layernorm", calls("layernorm"), reference_llm="scripted",
                       llm=ScriptedModel([answer]))
    assert not list(home.rglob("*.py")) and not list(home.rglob("*.toml"))
