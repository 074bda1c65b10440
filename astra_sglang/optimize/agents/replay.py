"""A template-generated model: every role of the agent loop played without an external LLM, so the loop's
throughput and its share of good candidates can be measured reproducibly (benchmarks/search_bench.py).

The coder's answers are knob variants of the op's shipped kernel: its default entry replaced by one that
calls `astra_launch_cfg` with one configuration, so each variant is a distinct, honest kernel (it passes
the safety check like an LLM's answer) that really builds and times differently. Some answers are
deliberately bad: one in `wrong_every` returns before launching (its outputs stay poisoned, the harness
must call it incorrect) and one in `broken_every` does not compile; a repair is answered with a variant
that is neither. Which answer a request gets is a hash of the prompt and of how often that prompt was
asked, so it does not depend on which thread asks first. The planner names variants on the first parent
it is offered; the TestingAgent adds no shapes; the ProfilingAgent defers to the rule-based facts. Use
with ScriptedModel(KernelReplay(spec), latency_s=L) for an endpoint's latency.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter

from astra_sglang.errors import AstraError
from astra_sglang.kernels.knobs import configs, parse_knobs, strip_dispatch
from astra_sglang.kernels.variants import materialize
from astra_sglang.optimize.records import Message
from astra_sglang.patchset.store import PatchStore
from astra_sglang.paths import patches_dir
from astra_sglang.specs.records import KernelSpec

ENTRY = "ASTRA_ENTRY {"
WRONG = "  return ASTRA_OK;  // deliberately wrong: returns before launching anything\n"
BROKEN = "  undefined_replay_symbol();  // deliberately broken: does not compile\n"


def without_default_entry(source: str) -> str:
    """The kernel without its `#ifndef ASTRA_NO_DEFAULT_ENTRY ... #endif` block (nested #if's included)."""
    lines = source.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if re.match(r"\s*#\s*ifndef\s+ASTRA_NO_DEFAULT_ENTRY\b", ln))
    depth = 0
    for end in range(start, len(lines)):
        depth += bool(re.match(r"\s*#\s*if", lines[end])) - bool(re.match(r"\s*#\s*endif", lines[end]))
        if depth == 0:
            return "".join(lines[:start] + lines[end + 1:])
    raise AstraError("unbalanced #ifndef ASTRA_NO_DEFAULT_ENTRY block")


def variants(spec: KernelSpec, limit: int = 48) -> list[str]:
    """The shipped kernel pinned to each of (up to `limit`) knob configurations."""
    # the shipped set only: a measurement of the loop that does not depend on this machine's user folder
    entry = PatchStore(patches_dir()).find(spec.name)
    if entry is None or not entry.kernel_path.is_file():
        raise AstraError(f"{spec.name}: no shipped kernel to make variants of")
    kernel = materialize(entry.kernel_path.resolve(), dict(entry.manifest.defines), spec.name)
    source = strip_dispatch(kernel.read_text())
    knobs = parse_knobs(source)
    if not knobs or "ASTRA_NO_DEFAULT_ENTRY" not in source:
        raise AstraError(f"{spec.name}: the shipped kernel exposes no knobs")
    body = without_default_entry(source).rstrip() + "\n\n"
    return [f"{body}// replayed variant: {', '.join(f'{k.name}={v}' for k, v in zip(knobs, config))}\n"
            f"{ENTRY}\n  return astra_launch_cfg<{', '.join(map(str, config))}>(tensors, num_tensors, scalars, "
            "num_scalars, stream);\n}\n" for config in configs(knobs, limit)]


def _mutate(source: str, line: str) -> str:
    at = source.rindex(ENTRY) + len(ENTRY)
    return source[:at] + "\n" + line + source[at:]


class KernelReplay:
    """A ScriptedModel script (messages -> answer) for every role."""

    def __init__(self, spec: KernelSpec, wrong_every: int = 4, broken_every: int = 6, limit: int = 48):
        self.variants, self.wrong_every, self.broken_every = variants(spec, limit), wrong_every, broken_every
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _pick(self, messages: list[Message]) -> int:
        prompt = "\n".join(m.content for m in messages)
        with self._lock:
            self._seen[prompt] += 1
            occurrence = self._seen[prompt]
        return int(hashlib.sha256(f"{occurrence}\n{prompt}".encode()).hexdigest(), 16)

    def __call__(self, messages: list[Message]) -> str:
        head = messages[0].content[:400]
        if "TestingAgent" in head:
            return '```json\n{"shapes": [], "trials": 3, "rationale": "the suite already covers the edges"}\n```'
        if "ProfilingAgent" in head:
            return "- the rule-based facts above say where the time goes"
        if "PlanningAgent" in head:
            return self._plans(messages[-1].content)
        h = self._pick(messages)
        source = self.variants[h % len(self.variants)]
        if len(messages) <= 2:  # a first draft (a repair continues the conversation)
            if (h // 7) % self.broken_every == 0:
                source = _mutate(source, BROKEN)
            elif (h // 11) % self.wrong_every == 0:
                source = _mutate(source, WRONG)
        return f"Here is the kernel.\n\n```cuda\n{source}```\n"

    def _plans(self, prompt: str) -> str:
        wanted = int(m.group(1)) if (m := re.search(r"at most (\d+) plans", prompt)) else 1
        offered = re.search(r'"parent" is one of: ([^.\n]+)\.', prompt)
        parent = offered.group(1).split(",")[0].strip() if offered else ""
        plans = [{"parent": parent, "plan": f"{i + 1}. Try another launch configuration of the knobs (variant "
                                            f"family {i + 1}), keeping the vectorized path."} for i in range(wanted)]
        return "```json\n" + json.dumps({"plans": plans}) + "\n```"
