"""A fake OpenAI-compatible server on loopback (stdlib http.server in a thread) for the agent tests.

It serves POST /v1/chat/completions and /v1/completions with scripted actions (and GET /health and /v1/models,
as SGLang's server does, for scripts that wait for it), so the real `openai`
client is exercised end to end: an answer with given usage counts (cached prompt tokens included), an
HTTP error (429 with Retry-After, 500), or a stall past the client's timeout followed by an answer. A
`Server` describes which protocol the endpoint speaks, to play the servers the client must survive:
SGLang serving a model with a plain tokenizer (no chat template: 400 on chat, completions work), a
model without a system role, a server that refuses `max_completion_tokens`, one that ignores or refuses
`n`, a small context window (SGLang's 400 with the token counts), one that sends no usage, and one that
refuses `reasoning_effort`.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Literal, Union


@dataclass
class Answer:
    text: str
    prompt_tokens: int = 1000
    completion_tokens: int = 500
    cached_tokens: int = 0


@dataclass
class Fail:
    status: int = 429
    retry_after: float | None = None


@dataclass
class Stall:
    seconds: float
    then: Answer = field(default_factory=lambda: Answer("late"))


Action = Union[Answer, Fail, Stall, str]
ROLES = {"TestingAgent": "testing", "ProfilingAgent": "profiling", "PlanningAgent": "planning",
         "CodingAgent": "coding", "CUDA performance engineer": "single", "ReflectionAgent": "reflection",
         "MemoryAgent": "memory"}
# What SGLang 0.5.17 answers on chat when the tokenizer has no chat template (transformers' ValueError, as 400)
NO_TEMPLATE = ("Cannot use chat template functions because tokenizer.chat_template is not set and no template "
               "argument was passed! For information about writing templates and setting the "
               "tokenizer.chat_template attribute, please see the documentation at "
               "https://huggingface.co/docs/transformers/main/en/chat_templating")


@dataclass
class Server:
    """The protocol the fake endpoint speaks (the defaults: everything OpenAI's does)."""

    chat_template: bool = True
    system_role: bool = True
    max_completion_tokens: bool = True
    n: Literal["yes", "ignore", "refuse"] = "yes"
    context_len: int | None = None
    """Prompt words + requested tokens above this: SGLang's 400 naming both counts."""
    usage: bool = True
    """False: answers carry no usage (some servers send none)."""
    reasoning_effort: bool = True
    """False: a request with `reasoning_effort` is refused (a model or server that knows no such argument)."""


def head(body: dict) -> str:
    """The start of the prompt: where the role's system text sits (as a message, folded or in a prompt)."""
    if "prompt" in body:
        return str(body["prompt"])[:400]
    messages = body.get("messages") or [{}]
    return str(messages[0].get("content", ""))[:400]


def role_of(body: dict) -> str:
    text = head(body)
    return next((role for marker, role in ROLES.items() if marker in text), "other")


def words(body: dict) -> int:
    text = body.get("prompt") or " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    return len(str(text).split())


class RoleScript:
    """Answers per role, in order; a role whose script is used up repeats its `default` (or fails 500). A
    default may be a function of the request body (a fresh answer each time)."""

    def __init__(self, scripts: dict[str, list[Action]], defaults: dict[str, Action] | None = None):
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.defaults = defaults or {}
        self.seen: list[str] = []

    def __call__(self, body: dict) -> Action:
        role = role_of(body)
        self.seen.append(role)
        queue = self.scripts.get(role, [])
        if queue:
            return queue.pop(0)
        default = self.defaults.get(role, Fail(500))
        return default(body) if callable(default) else default


class FakeOpenAI:
    def __init__(self, responder: Callable[[dict], Action], server: Server | None = None):
        self.responder, self.kind = responder, server or Server()
        self.requests: list[dict] = []
        self.refused: list[str] = []
        """Why each 400 was given (protocol refusals), in order."""
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output clean
                pass

            def do_GET(self) -> None:  # what a script asks SGLang's server before it sends requests
                if self.path == "/health":
                    return self._send(200, {})
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": "dummy", "object": "model"}]})
                self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                chat = self.path.endswith("/chat/completions")
                if not chat and not self.path.endswith("/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                refusal = fake.refusal(body, chat)
                if refusal:
                    with fake.lock:
                        fake.refused.append(refusal)
                    # SGLang's error shape: a flat object, not OpenAI's {"error": {...}}
                    return self._send(400, {"object": "error", "message": refusal, "type": "BadRequest", "code": 400})
                with fake.lock:
                    fake.requests.append(body)
                    n = int(body.get("n") or 1) if fake.kind.n == "yes" else 1
                    actions = [fake.responder(body) for _ in range(n)]
                actions = [Answer(a) if isinstance(a, str) else a for a in actions]
                for i, action in enumerate(actions):
                    if isinstance(action, Stall):
                        time.sleep(action.seconds)
                        actions[i] = action.then
                failed = next((a for a in actions if isinstance(a, Fail)), None)
                if failed is not None:
                    headers = {"retry-after": str(failed.retry_after)} if failed.retry_after is not None else {}
                    return self._send(failed.status, {"error": {"message": f"scripted {failed.status}",
                                                                "type": "scripted"}}, headers)
                self._send(200, fake.payload(body, actions, chat))

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def refusal(self, body: dict, chat: bool) -> str:
        k = self.kind
        if chat and not k.chat_template:
            return NO_TEMPLATE
        if chat and not k.system_role and any(m.get("role") == "system" for m in body.get("messages", [])):
            return "System role not supported"
        if chat and not k.max_completion_tokens and "max_completion_tokens" in body:
            return "Unrecognized request argument supplied: max_completion_tokens"
        if not k.reasoning_effort and "reasoning_effort" in body:
            return "Unrecognized request argument supplied: reasoning_effort"
        if k.n == "refuse" and int(body.get("n") or 1) > 1:
            return "n > 1 is not supported by this model"
        cap = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if k.context_len is not None and words(body) >= k.context_len:
            return (f"The input ({words(body)} tokens) is longer than the model's context length "
                    f"({k.context_len} tokens).")
        if k.context_len is not None and words(body) + cap > k.context_len:
            return (f"Requested token count exceeds the model's maximum context length of {k.context_len} tokens. "
                    f"You requested a total of {words(body) + cap} tokens: {words(body)} tokens from the input "
                    f"messages and {cap} tokens for the completion. Please reduce the number of tokens in the "
                    "input messages or the completion to fit within the limit.")
        return ""

    def payload(self, body: dict, answers: list[Answer], chat: bool) -> dict:
        first = answers[0]
        prompt = first.prompt_tokens
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        completion = sum(min(a.completion_tokens, cap or a.completion_tokens) for a in answers)  # never past the cap
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": first.cached_tokens}}
        if chat:
            choices = [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": a.text}}
                       for i, a in enumerate(answers)]
        else:
            choices = [{"index": i, "finish_reason": "stop", "text": a.text, "logprobs": None}
                       for i, a in enumerate(answers)]
        return {"id": f"cmpl-{len(self.requests)}", "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": body.get("model", "fake"), "choices": choices,
                **({"usage": usage} if self.kind.usage else {})}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def roles(self) -> list[str]:
        return [role_of(r) for r in self.requests]

    def __enter__(self) -> "FakeOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
