"""The README's serving rows, from the summary.json of each serving run a results folder lists in its
`serving.jsonl` (one line per run: summary, what, against, date, gpu, commit, command). Every row carries its
design, its units and timed rounds, and its interval as the run labelled it; an A/A row its pass or fail, an
A/B row its parity verdict. Read by benchmarks/summarize.py."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.serving.summary import RunSummary

BEGIN, END = "<!-- serving: written by benchmarks/summarize.py -->", "<!-- /serving -->"


@dataclass(frozen=True)
class ServingRow:
    what: str
    against: str
    summary: RunSummary
    folder: str
    date: str
    gpu: str
    commit: str
    command: str

    @property
    def throughput(self):
        return next((m for m in self.summary.metrics if m.key == "output_throughput"), None)

    @property
    def design(self) -> str:
        s = self.summary
        where = f"{len(s.gpus)} GPUs" if s.design == "crossover" else "1 GPU"
        unit = "period" if s.design == "crossover" else "start"
        return f"{s.design} ({where}), {s.periods_done} {unit}{'' if s.periods_done == 1 else 's'}"

    @property
    def check(self) -> str:
        s = self.summary
        if s.control:
            return "A/A rule: pass" if s.aa_ok else "A/A rule: fail (" + "; ".join(s.aa_reasons) + ")"
        if s.parity is None:
            return "parity: not probed"
        return f"parity: {'ok' if s.parity.ok else 'FAIL'} (largest logprob difference {s.parity.max_abs:.3f})"


def load(results: Path) -> list[ServingRow]:
    """Every dated folder's serving runs, newest folder first."""
    rows = []
    for folder in sorted((p for p in results.iterdir() if (p / "serving.jsonl").is_file()), reverse=True):
        for line in (folder / "serving.jsonl").read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            path = folder / entry.pop("summary")
            rows.append(ServingRow(summary=RunSummary.model_validate_json(path.read_text()),
                                   folder=str(path.parent.relative_to(results.parent.parent)), **entry))
    return rows
