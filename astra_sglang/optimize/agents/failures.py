"""How an LLM endpoint fails, apart from the client (optimize/agents/llm.py), so that the prompt layer can tell a
rejected request from a dead endpoint without importing the client."""
from __future__ import annotations

from astra_sglang.errors import AstraError


class LLMError(AstraError):
    """The endpoint kept failing (after retries) or answered nothing usable."""


class RequestRejected(LLMError):
    """The endpoint refused this one request for a reason of its own (its prompt does not fit the model's
    context): the step fails, the run goes on."""
