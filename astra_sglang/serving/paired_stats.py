"""Row helpers of `ab --paired` (both servers up at once on one GPU, rounds AB BA ...): each round's A and B
values, the per-round table, each arm's KV pool, which server started first. The paired design's interval
(a t over rounds, which leaves out the start-to-start variance) is serving/design_stats.py's.
"""
from __future__ import annotations


def round_values(rows: list[dict], key: str) -> list[tuple[int, str, float, float]]:
    """(round, order, A's value, B's value) of every paired round that has the metric on both arms."""
    by_round: dict[int, dict[str, dict]] = {}
    for row in rows:
        if row.get("paired") and key in row.get("metrics", {}):
            by_round.setdefault(row["run"], {})[row["arm"]] = row
    return [(run, arms["B"].get("order", ""), arms["A"]["metrics"][key], arms["B"]["metrics"][key])
            for run, arms in sorted(by_round.items()) if "A" in arms and "B" in arms]


def round_table(rows: list[dict], metrics) -> list[dict]:
    """Rows of the per-round table: round, order, and each metric's change B vs A in % (None where missing)."""
    cells = {key: {run: (order, (b - a) / a * 100) for run, order, a, b in round_values(rows, key) if a}
             for key, *_ in metrics}
    runs = sorted({run for c in cells.values() for run in c})
    return [dict(run=run, order=next(c[run][0] for c in cells.values() if run in c),
                 pcts=[cells[key][run][1] if run in cells[key] else None for key, *_ in metrics]) for run in runs]
def kv_pools(rows: list[dict]) -> dict[str, int | None]:
    """Each arm's KV pool in tokens (from its first paired row): pools of different sizes confound the A/B."""
    pools: dict[str, int | None] = {}
    for row in rows:
        if row.get("paired"):
            pools.setdefault(row["arm"], row.get("kv_tokens"))
    return pools


def started_first(rows: list[dict]) -> str | None:
    """The arm whose server started first (the other sized its pools and settings from what was left), or None."""
    return next((row["arm"] for row in rows if row.get("paired") and row.get("started_first")), None)
