"""A stand-in SGLang server that serves real logprobs: a small bf16 Llama-shaped model (random weights, std
0.02, RMSNorm weights near 1) on CPU, answering /health, /server_info and the native /generate with
`return_logprob` / `top_logprobs_num` as SGLang does (meta_info.output_token_logprobs, output_top_logprobs).

Its norms are where a patch would act; MODE picks them:
  ref            torch's RMSNorm: fp32 math, the normed value rounded to bf16, times the bf16 weight (SGLang's
                 forward_native)
  alt            a correct kernel that rounds otherwise: fp64 math and the weight applied before one rounding
  wrong-fused    every fused_add_rmsnorm (every norm but layer 0's input norm, the final norm included) scales
                 its output by 1.01: what tests/fixtures/wrong-patches does on the GPU
  wrong-rmsnorm  only the rmsnorm (layer 0's input norm) scales by 1.01

Run: python logprob_stand_in.py PORT MODE [SEED]; or import `Model` and call `generate` in-process.
"""
from __future__ import annotations

import json
import math
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch

HIDDEN, INTER, VOCAB, LAYERS, HEADS = 128, 384, 1000, 2, 4
DT = torch.bfloat16
MODES = ("ref", "alt", "wrong-fused", "wrong-rmsnorm")


def norm_ref(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(DT) * w


def norm_alt(x, w, eps=1e-5):
    xd = x.double()
    return (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()).to(DT)


def norm_scaled(x, w, eps=1e-5):
    return (norm_ref(x, w, eps).float() * 1.01).to(DT)


class Model:
    def __init__(self, mode: str = "ref", seed: int = 0):
        if mode not in MODES:
            raise SystemExit(f"mode must be one of {MODES}")
        g = torch.Generator().manual_seed(seed)
        w = lambda *s: (torch.randn(*s, generator=g) * 0.02).to(DT)  # noqa: E731
        n = lambda: (1 + torch.randn(HIDDEN, generator=g) * 0.1).to(DT)  # noqa: E731
        self.layers = [dict(qkv=w(3 * HIDDEN, HIDDEN), o=w(HIDDEN, HIDDEN), gu=w(2 * INTER, HIDDEN),
                            down=w(HIDDEN, INTER), n1=n(), n2=n()) for _ in range(LAYERS)]
        self.emb, self.head, self.final = w(VOCAB, HIDDEN), w(VOCAB, HIDDEN), n()
        base = norm_alt if mode == "alt" else norm_ref
        self.rmsnorm = norm_scaled if mode == "wrong-rmsnorm" else base
        self.fused = norm_scaled if mode == "wrong-fused" else base

    def logprobs(self, ids: list[int]) -> torch.Tensor:
        x = self.emb[torch.tensor(ids)]
        t = len(ids)
        mask = torch.full((t, t), float("-inf")).triu(1)
        for k, layer in enumerate(self.layers):
            h = (self.rmsnorm if k == 0 else self.fused)(x, layer["n1"])
            q, kk, v = ((m.view(t, HEADS, -1).transpose(0, 1).float())
                        for m in (h @ layer["qkv"].T).split(HIDDEN, -1))
            att = torch.softmax(q @ kk.transpose(1, 2) / math.sqrt(HIDDEN // HEADS) + mask, -1) @ v
            x = x + att.transpose(0, 1).reshape(t, HIDDEN).to(DT) @ layer["o"].T
            gate, up = (self.fused(x, layer["n2"]) @ layer["gu"].T).split(INTER, -1)
            x = x + (torch.nn.functional.silu(gate.float()) * up.float()).to(DT) @ layer["down"].T
        return torch.log_softmax((self.fused(x, self.final) @ self.head.T).float()[-1], -1)

    def generate(self, body: dict) -> dict:
        """SGLang's /generate reply for a greedy request of input_ids (output logprobs, top k per position)."""
        ids, params = list(body["input_ids"]), body.get("sampling_params", {})
        k = int(body.get("top_logprobs_num") or 0)
        chosen, top = [], []
        for _ in range(int(params.get("max_new_tokens", 16))):
            lp = self.logprobs([i % VOCAB for i in ids])
            best = torch.topk(lp, max(k, 1))
            token = int(best.indices[0])
            chosen.append([float(lp[token]), token, None])
            top.append([[float(v), int(i), None] for v, i in zip(best.values[:k], best.indices[:k])])
            ids.append(token)
        meta = {"output_token_logprobs": chosen} | ({"output_top_logprobs": top} if body.get("return_logprob")
                                                    else {})
        return {"text": "", "output_ids": [c[1] for c in chosen], "meta_info": meta}


def serve(port: int, model: Model) -> None:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send({"max_total_num_tokens": port, "version": "0.5.17-logprob-stand-in"}
                       if self.path == "/server_info" else {})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self._send(model.generate(body) if self.path == "/generate" else {})

    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), Model(sys.argv[2] if len(sys.argv) > 2 else "ref",
                                  int(sys.argv[3]) if len(sys.argv) > 3 else 0))
