"""Prompt rendering (jinja2 templates in harness_templates/prompts/) and the ask-parse-retry exchange.

Every template has a `system` and a `user` block. `converse` sends them, parses the answer with the
role's parser and, when the parser raises ParseError or UnsafeCode, feeds the message back to the model
(feedback.j2) for `retries` more tries; the whole exchange lands in the step's Transcript.
"""
from __future__ import annotations

import functools
from typing import Callable, TypeVar

import jinja2

from astra_sglang.harness.safety import UnsafeCode
from astra_sglang.optimize.agents.failures import RequestRejected
from astra_sglang.optimize.agents.parse import ParseError
from astra_sglang.optimize.agents.protocols import Model
from astra_sglang.optimize.records import Message, Transcript
from astra_sglang.paths import templates_dir

T = TypeVar("T")


@functools.cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "prompts")),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=False, autoescape=False)


def render(template: str, **context) -> list[Message]:
    """The template's system and user blocks as chat messages (an empty system block is left out)."""
    tmpl = _env().get_template(template)
    ctx = tmpl.new_context(context)
    system = "".join(tmpl.blocks["system"](ctx)).strip()
    user = "".join(tmpl.blocks["user"](ctx)).strip()
    return ([Message(role="system", content=system)] if system else []) + [Message(role="user", content=user)]


def completion_prompt(messages: list[Message]) -> str:
    """Our prompt format for endpoints without a chat template (completion.j2)."""
    return _env().get_template("completion.j2").render(messages=messages) + "\n"


@functools.cache
def abi_header() -> str:
    return (templates_dir() / "astra_abi.h").read_text()


@functools.cache
def device_header() -> str:
    """Helpers a kernel may include: conversions, one-access vector loads/stores, PDL, warp sum, launch."""
    return (templates_dir() / "astra_device.cuh").read_text()


class StepFailed(Exception):
    """The model never produced a usable answer in this step (after the feedback retries)."""

    def __init__(self, error: str, transcript: Transcript):
        super().__init__(error)
        self.transcript = transcript


def converse(model: Model, messages: list[Message], parse: Callable[[str], T], retries: int,
             transcript: Transcript, code: bool = False, tag: str = "") -> T:
    """Ask, parse, and on a typed parse/safety error feed the reason back; raise StepFailed at the end."""
    messages = list(messages)
    transcript.messages.extend(messages)
    for attempt in range(retries + 1):
        try:
            reply = model.complete(messages, tag=tag)
        except RequestRejected as exc:  # this prompt, not the endpoint: the step fails, the run goes on
            transcript.errors.append(str(exc))
            raise StepFailed(str(exc), transcript) from exc
        transcript.usage = transcript.usage + reply.usage
        answer = Message(role="assistant", content=reply.content)
        messages.append(answer)
        transcript.messages.append(answer)
        try:
            return parse(reply.content)
        except (ParseError, UnsafeCode) as exc:
            transcript.errors.append(str(exc))
            if attempt == retries:
                raise StepFailed(str(exc), transcript) from exc
            feedback = render("feedback.j2", error=str(exc), code=code)
            messages += feedback
            transcript.messages.extend(feedback)
    raise AssertionError("unreachable")
