"""Parity that can fail: the top-k logprobs of the first decode positions of fixed prompts, from both servers.

Greedy tokens alone see nothing with dummy weights (every output on both servers is the same two-token
alternation, H100, 2026-11-25) and little with real ones. Each server answers SGLang's native /generate with
`return_logprob`, `top_logprobs_num` and `logprob_start_len`; the comparison walks each prompt's positions up to
the first where the greedy tokens part (after it the contexts differ) and reports:
- the largest |difference| of a logprob of the same token among A's top k (nats), against the A/A's own (two
  unpatched servers, or A against itself across starts) or, where that is 0 or absent, against `tolerance`;
- a systematic shift: per rank of the top k, the mean difference over every compared position over its
  standard error. A kernel that rounds differently moves logprobs both ways; a wrong one (a norm that scales
  its output by 1.01) moves them one way at every position. On a small bf16 Llama on CPU the first gave the
  largest |t| 1.3-2.2 and the second 22-30, where their largest |difference| was only 2-4x apart
  (tests/serving/logprob_stand_in.py, 3 weight seeds);
- token agreement, as a second line.
A 1% error in a single layer's input norm moves logprobs no more than a correct kernel's rounding does (same CPU
model): no end-to-end check sees it; the harness's fp64 reference does.
"""
from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from astra_sglang.errors import AstraError

PROMPTS = 8
TOKENS = 16
TOP_K = 5
TOLERANCE = 0.1
"""nats: the largest |difference| a patch may show where the A/A shows none, a bound for gross errors (on the
CPU stand-in a correct kernel's rounding moved top logprobs by up to 0.008, a 1% scale of the norms by 0.015):
the systematic shift is what catches the subtle ones."""
T_LIMIT = 6.0
AA_FACTOR = 2.0
"""A patch may differ from A by this many times the A/A's own difference."""


class Answer(BaseModel):
    """One server's answer to one prompt: its greedy tokens and, per position, the top k (token, logprob)."""
    tokens: list[int]
    top: list[list[tuple[int, float]]]


def prompts(count: int = PROMPTS, vocab: int = 32000, seed: int = 0) -> list[list[int]]:
    """Fixed token-id prompts of several lengths (16 to 177 tokens), ids clear of the low special ones."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(16 + 23 * i)] for i in range(count)]


def payload(ids: list[int], tokens: int = TOKENS, top_k: int = TOP_K) -> dict:
    """POST /generate body: greedy, exactly `tokens` new tokens, the top k logprobs of each output position."""
    return {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": tokens, "ignore_eos": True},
            "return_logprob": True, "top_logprobs_num": top_k, "logprob_start_len": -1}


def parse(reply) -> Answer:
    """An SGLang /generate reply (meta_info.output_token_logprobs / output_top_logprobs: [logprob, id, text])."""
    reply = reply[0] if isinstance(reply, list) else reply
    meta = (reply or {}).get("meta_info") or {}
    chosen, top = meta.get("output_token_logprobs"), meta.get("output_top_logprobs")
    if not chosen or top is None:
        raise AstraError("the server returned no output logprobs (return_logprob / top_logprobs_num unsupported?)")
    return Answer(tokens=[int(e[1]) for e in chosen],
                  top=[[(int(e[1]), float(e[0])) for e in (pos or [])] for pos in top])


def probe(post, ids_list: list[list[int]], tokens: int = TOKENS, top_k: int = TOP_K) -> list[Answer]:
    """Every prompt's answer; post(body) sends one /generate request and returns the decoded JSON."""
    return [parse(post(payload(ids, tokens, top_k))) for ids in ids_list]


@dataclass
class ParityDiff:
    """B against A over one or more pairs of probes."""
    positions: int = 0
    max_abs: float = 0.0
    where: tuple[int, int, int] | None = None
    """(pair, prompt, position) of the largest difference."""
    missing: int = 0
    """Tokens of A's top k not in B's top k at a compared position (their difference is not known)."""
    ranks: list[list[float]] = field(default_factory=list)
    prompts: int = 0
    identical: int = 0
    """Prompts whose greedy tokens agree at every position."""
    diverged: list[tuple[int, int, int]] = field(default_factory=list)
    """(pair, prompt, first position where the tokens part)."""

    @property
    def bias_t(self) -> float:
        """The largest |mean / standard error| of the differences at one rank of the top k (0 with no spread
        information; inf where every difference at a rank is the same nonzero value)."""
        best = 0.0
        for diffs in self.ranks:
            if len(diffs) < 3:
                continue
            mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
            t = abs(mean) / (sd / math.sqrt(len(diffs))) if sd > 0 else (math.inf if mean else 0.0)
            best = max(best, t)
        return best


def compare(pairs: list[tuple[list[Answer], list[Answer]]]) -> ParityDiff:
    """B's answers against A's, pair by pair (each pair: A's and B's answers to the same prompts)."""
    out = ParityDiff()
    for n, (a_answers, b_answers) in enumerate(pairs):
        for i, (a, b) in enumerate(zip(a_answers, b_answers)):
            out.prompts += 1
            for pos, (a_top, b_top) in enumerate(zip(a.top, b.top)):
                out.positions += 1
                theirs = dict(b_top)
                for rank, (token, lp) in enumerate(a_top):
                    if token not in theirs:
                        out.missing += 1
                        continue
                    diff = theirs[token] - lp
                    while len(out.ranks) <= rank:
                        out.ranks.append([])
                    out.ranks[rank].append(diff)
                    if abs(diff) > out.max_abs:
                        out.max_abs, out.where = abs(diff), (n, i, pos)
                if pos >= len(a.tokens) or pos >= len(b.tokens) or a.tokens[pos] != b.tokens[pos]:
                    out.diverged.append((n, i, pos))
                    break
            else:
                out.identical += a.tokens == b.tokens
    return out


@dataclass(frozen=True)
class ParityVerdict:
    ok: bool
    lines: list[str]


def judge(diff: ParityDiff, aa: ParityDiff | None = None, tolerance: float = TOLERANCE,
          t_limit: float = T_LIMIT) -> ParityVerdict:
    """Whether B's logprobs stay within what the A/A shows (or the tolerance where it shows nothing)."""
    if not diff.positions:
        return ParityVerdict(False, ["no positions compared: no parity probe of both arms"])
    own = f"the A/A's own {aa.max_abs:.4f}" if aa is not None else "no A/A"
    limit = max(AA_FACTOR * aa.max_abs, tolerance) if aa is not None else tolerance
    t_cap = max(AA_FACTOR * aa.bias_t, t_limit) if aa is not None else t_limit
    where = "" if diff.where is None else f" (prompt {diff.where[1] + 1}, position {diff.where[2] + 1})"
    ok_abs, ok_t = diff.max_abs <= limit, diff.bias_t <= t_cap
    lines = [f"logprobs: largest |difference| {diff.max_abs:.4f} nats{where} over {diff.positions} positions x "
             f"top {len(diff.ranks)}; {own}; limit {limit:.4f}: {'ok' if ok_abs else 'FAIL'}",
             f"systematic shift: largest |t| of a rank's mean difference {diff.bias_t:.1f}, limit {t_cap:.1f}: "
             f"{'ok' if ok_t else 'FAIL'}"]
    parted = ", ".join(f"prompt {i + 1} at position {p + 1}" for _, i, p in diff.diverged[:4])
    lines.append(f"tokens: {diff.identical} of {diff.prompts} prompts identical" + (f"; parted: {parted}" if parted
                                                                                    else ""))
    if diff.missing:
        lines.append(f"{diff.missing} top-k tokens of A missing from B's top k at compared positions")
    return ParityVerdict(ok_abs and ok_t, lines)


def read_probes(path: Path) -> list[dict]:
    """parity.jsonl: one row per server start ({period, arm, gpu_index, answers})."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def answers(row: dict) -> list[Answer]:
    return [Answer.model_validate(a) for a in row["answers"]]


def pairs_of(probes: list[dict]) -> tuple[list[tuple[list[Answer], list[Answer]]], list[tuple[list[Answer], list[Answer]]]]:
    """(B against A of the same period, else the nearest earlier A; A against A's first start) from parity rows."""
    a_rows = [r for r in probes if r["arm"] == "A"]
    ab, aa = [], []
    for row in (r for r in probes if r["arm"] == "B"):
        same = [r for r in a_rows if r["period"] == row["period"]]
        before = [r for r in a_rows if r["period"] < row["period"]]
        ref = (same or before[-1:] or a_rows[:1])
        if ref:
            ab.append((answers(ref[0]), answers(row)))
    aa = [(answers(a_rows[0]), answers(r)) for r in a_rows[1:]]
    return ab, aa
