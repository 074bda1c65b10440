"""A stand-in SGLang server for the A/B tests: a real process on loopback answering /health, /server_info
(its KV pool = its port, so each server is told apart) and /generate (output_ids = [port, prompt length])."""
from __future__ import annotations

import socket
import textwrap

import pytest

SERVER = textwrap.dedent('''
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    PORT = int(sys.argv[1])
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self._send({"max_total_num_tokens": PORT} if self.path == "/server_info" else {})
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self._send({"text": body["text"][::-1], "output_ids": [PORT, len(body["text"])]})
    HTTPServer(("127.0.0.1", PORT), H).serve_forever()
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair() -> int:
    """A free port whose successor is free too (the paired A/B's B listens on port + 1)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    pytest.skip("no two adjacent free ports")
