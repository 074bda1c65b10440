"""A stand-in SGLang server for the A/B and profile tests: a real process on loopback answering /health,
/server_info (its KV pool = its port, so each server is told apart), /model_info, /generate (output_ids =
[port, prompt length]) and SGLang's /start_profile.

argv: PORT [MODE [TRACE]]. MODE profile (the default): /start_profile answers like SGLang and, a moment
later, writes TRACE (a prepared trace file) into the request's output_dir under SGLang's file name
(`<profile_id>-TP-0[-DECODE].trace.json.gz`), as its scheduler does after num_steps steps; no-profile: the
endpoint is missing (404); crash: /start_profile answers, then the server dies before writing anything;
crash-second: the first recording is written, the second kills the server."""
from __future__ import annotations

import random
import socket
import textwrap

import pytest

SERVER = textwrap.dedent('''
    import json, os, shutil, sys, threading, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    PORT = int(sys.argv[1])
    MODE = sys.argv[2] if len(sys.argv) > 2 else "profile"
    TRACE = sys.argv[3] if len(sys.argv) > 3 else None
    STARTS = []
    def write_trace(body):
        time.sleep(0.3)
        stage = "-DECODE" if body.get("profile_by_stage") else ""
        name = f"{body['profile_id']}-TP-0{stage}.trace.json.gz"
        os.makedirs(body["output_dir"], exist_ok=True)
        shutil.copyfile(TRACE, os.path.join(body["output_dir"], name + ".tmp"))
        os.replace(os.path.join(body["output_dir"], name + ".tmp"), os.path.join(body["output_dir"], name))
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def _send(self, body, code=200):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code); self.send_header("Content-Length", str(len(data))); self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            if self.path == "/server_info":
                return self._send({"max_total_num_tokens": PORT, "version": "0.5.17-stand-in"})
            self._send({"model_path": "stand-in-model"} if self.path == "/model_info" else {})
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/start_profile":
                if MODE == "no-profile":
                    return self._send({"detail": "Not Found"}, 404)
                self._send("Start profiling.\\n")
                STARTS.append(body)
                if MODE == "crash" or (MODE == "crash-second" and len(STARTS) > 1):
                    threading.Timer(0.2, lambda: os._exit(3)).start()
                elif TRACE:
                    threading.Thread(target=write_trace, args=(body,), daemon=True).start()
                return
            self._send({"text": body["text"][::-1], "output_ids": [PORT, len(body["text"])]})
    HTTPServer(("127.0.0.1", PORT), H).serve_forever()
''')


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999): a port the kernel hands out (bind to 0) can be taken
    as the source port of a client's connection before the stand-in server binds it ("Address already in use")."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        if _bindable(port):
            return port
    pytest.skip("no free port in 20000-32000")


def free_port_pair() -> int:
    """A free port whose successor is free too (the paired A/B's B listens on port + 1)."""
    for _ in range(50):
        port = free_port()
        if _bindable(port + 1):
            return port
    pytest.skip("no two adjacent free ports")
