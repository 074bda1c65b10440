"""A fake OpenAI-compatible server on loopback (stdlib http.server in a thread) for the agent tests.

It serves POST /v1/chat/completions with scripted actions, so the real `openai` client is exercised end
to end: an answer with given usage counts, an HTTP error (429 with Retry-After, 500), or a stall past
the client's timeout followed by an answer.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Union


@dataclass
class Answer:
    text: str
    prompt_tokens: int = 1000
    completion_tokens: int = 500


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
         "CodingAgent": "coding", "CUDA performance engineer": "single"}


def role_of(body: dict) -> str:
    system = next((m["content"] for m in body.get("messages", []) if m["role"] == "system"), "")
    return next((role for marker, role in ROLES.items() if marker in system), "other")


class RoleScript:
    """Answers per role, in order; a role whose script is used up repeats its `default` (or fails 500)."""

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
        return self.defaults.get(role, Fail(500))


class FakeOpenAI:
    def __init__(self, responder: Callable[[dict], Action]):
        self.responder = responder
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                with fake.lock:
                    fake.requests.append(body)
                    action = fake.responder(body)
                if isinstance(action, str):
                    action = Answer(action)
                if isinstance(action, Stall):
                    time.sleep(action.seconds)
                    action = action.then
                if isinstance(action, Fail):
                    headers = {"retry-after": str(action.retry_after)} if action.retry_after is not None else {}
                    return self._send(action.status, {"error": {"message": f"scripted {action.status}",
                                                                "type": "scripted"}}, headers)
                self._send(200, {
                    "id": f"chatcmpl-{len(fake.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": action.text}}],
                    "usage": {"prompt_tokens": action.prompt_tokens, "completion_tokens": action.completion_tokens,
                              "total_tokens": action.prompt_tokens + action.completion_tokens}})

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
