"""A torch reference written by the testing agent (an LLM) for an op that has none: `onboard --reference-llm MODEL`.

The agent is shown the op's source and the spec's arguments (roles, dtypes, shapes) and answers with a module
defining `reference(...)` in float64. Like any proposed reference it must run on CPU and write every output before
the spec is written, and it is accepted only once it agrees with the op on the GPU (the first GPU run). The module
is the model's code, run in this process by the CPU check: ask a model you trust.
"""
from __future__ import annotations

import ast

from astra_sglang.errors import AstraError
from astra_sglang.onboard.signature import Param
from astra_sglang.onboard.static import Signature

MODULE_PREFIX = "astra_user_ref_"


def _module(text: str) -> str:
    """The answer's last ```python block that defines `reference`; AstraError where there is none."""
    from astra_sglang.optimize.agents.parse import fenced_blocks

    blocks, _ = fenced_blocks(text)
    code = [body for lang, body in blocks if lang in ("python", "py", "")]
    for body in reversed(code):
        try:
            tree = ast.parse(body)
        except SyntaxError:
            continue
        if any(isinstance(n, ast.FunctionDef) and n.name == "reference" for n in tree.body):
            return body.rstrip() + "\n"
    raise AstraError("the testing agent's answer holds no Python block defining reference(...): try again, or pass "
                     "--reference MODULE:FUNC")


def write_reference(model, entry: str, name: str, sig: Signature, params: list[Param]) -> str:
    """The module text the agent wrote for `name` (one request)."""
    from astra_sglang.optimize.agents.prompts import render

    messages = render("onboard_reference.j2", entry=entry, name=name, source=sig.source or sig.name,
                      arguments=params)
    reply = model.complete(messages, tag="onboard-reference")
    header = f'"""The reference of `{name}` ({entry}), written by the testing agent ({model.name}) for `onboard`."""\n'
    return header + _module(reply.content)


def model_for(name: str):
    """The OpenAI-compatible endpoint's model (OPENAI_BASE_URL / OPENAI_API_KEY, as `optimize --llm` reaches it)."""
    from astra_sglang.optimize.agents.llm import OpenAIModel
    from astra_sglang.optimize.records import LLMConfig

    return OpenAIModel(LLMConfig(model=name))
