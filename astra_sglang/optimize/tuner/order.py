"""The order a config space is screened in, so that the best come early: what must come first (the op's own
pick: the bar every config is held to, screened whatever the rules below say), then the seeds (configs tuned elsewhere, trusted as they are), then the
rest by a cost model's predicted time. Configs that cannot run are dropped with the reason (`infeasible`), and
so are those the model puts past `prune_factor` x its best prediction (hopeless: a wasted compile and replay
each); every dropped config is listed with why, so a benchmark can check the rule against a full screening.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Iterable, TypeVar

C = TypeVar("C")


@dataclass
class Ordered(Generic[C]):
    configs: list[C]
    """To screen, in this order."""
    codes: list[str]
    seeds: int
    """How many of `configs` (after the first) are seeds."""
    predicted: dict[str, float] = field(default_factory=dict)
    """Config code -> the cost model's prediction (its unit)."""
    pruned: dict[str, str] = field(default_factory=dict)
    """Config code -> why it is not screened."""


def order(first: Iterable[C], seeds: Iterable[C], space: Iterable[C], cost: Callable[[C], float],
          infeasible: Callable[[C], str | None], code: Callable[[C], str],
          prune_factor: float | None = None) -> Ordered[C]:
    predicted: dict[str, float] = {}
    pruned: dict[str, str] = {}
    out: list[C] = []
    seen: set[str] = set()

    def take(config: C, check: bool = True) -> str | None:
        key = code(config)
        if key in seen:
            return None
        seen.add(key)
        why = infeasible(config) if check else None
        if why:
            pruned[key] = why
            return None
        predicted[key] = cost(config)
        return key

    for config in first:
        if take(config, check=False):
            out.append(config)
    heads = len(out)
    for config in seeds:
        if take(config):
            out.append(config)
    count = len(out) - heads
    rest = [(predicted[key], key, config) for config in space if (key := take(config))]
    rest.sort(key=lambda t: (t[0], t[1]))
    floor = min(predicted.values(), default=0.0)
    for value, key, config in rest:
        if prune_factor is not None and floor > 0 and value > prune_factor * floor:
            pruned[key] = f"cost model: {value / floor:.1f}x the best prediction (> {prune_factor:g}x)"
        else:
            out.append(config)
    return Ordered(configs=out, codes=[code(c) for c in out], seeds=count, predicted=predicted, pruned=pruned)
