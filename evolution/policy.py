"""Meta-policy memory: which operators work, learned from each child against its parents.

Credit is kept per (operator, context), the context being "task/region type" (the region
the operator touched, e.g. `mqar/coding`, `cifar10/node3`). A child succeeds (1) when it
Pareto-dominates a parent (DEAP's `Fitness.dominates`), half-succeeds (0.5) when no
parent dominates it (a new trade-off), and fails (0) when dominated or failed; with one
objective that is a fitness gain over the best parent (ties earn 0.5).

Operator probabilities follow the credit per task (summed over region types): probability
matching on the posterior mean (s + 1) / (t + 2), sharpened by `power`, with a floor so
that no operator ever dies. Rows are absolute values and go into the store in the
generation's transaction (`rows()` -> PolicyIn).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from deap import base

from dogma_evolve.store import PolicyIn


def outcome(child: base.Fitness, parents: Iterable[base.Fitness], ok: bool = True) -> float:
    """Credit of a child against its parents, from DEAP fitnesses (`deap.base.Fitness`,
    whose weights say which objectives are maximised): 1 when it dominates a parent, 0.5
    when no parent dominates it either (incomparable or equal to each: a new trade-off),
    0 when a parent dominates it or it failed."""
    if not ok:
        return 0.0
    best = 0.0
    for parent in parents:
        if child.dominates(parent):
            return 1.0
        if not parent.dominates(child):
            best = 0.5
    return best


@dataclass
class OperatorPolicy:
    operators: tuple[str, ...]
    floor: float = 0.05  # each operator's minimum share of the probability
    power: float = 2.0  # >1 sharpens towards operators with more credit
    credit: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    changed: set[tuple[str, str]] = field(default_factory=set)

    def record(self, operator: str, context: str, success: float) -> None:
        entry = self.credit.setdefault((operator, context), [0.0, 0.0])
        entry[0] += success
        entry[1] += 1.0
        self.changed.add((operator, context))

    def probabilities(self, task: str) -> dict[str, float]:
        prefix = task + "/"
        totals = {op: [0.0, 0.0] for op in self.operators}
        for (op, context), (s, t) in self.credit.items():
            if op in totals and context.startswith(prefix):
                totals[op][0] += s
                totals[op][1] += t
        score = {op: ((s + 1) / (t + 2)) ** self.power for op, (s, t) in totals.items()}
        norm = sum(score.values())
        k = len(self.operators)
        floor = min(self.floor, 1.0 / k)
        return {op: floor + (1 - k * floor) * score[op] / norm for op in self.operators}

    def choose(self, task: str, rng: random.Random) -> str:
        probs = self.probabilities(task)
        x, acc = rng.random(), 0.0
        for op in self.operators:
            acc += probs[op]
            if x < acc:
                return op
        return self.operators[-1]

    def inherit(self, rows: Iterable[object], cap: float = 50.0) -> None:
        """Start from another run's credit, scaled down to at most `cap` trials per row so
        that this run's own evidence can overrule it."""
        for row in rows:
            s, t = float(row.successes), float(row.trials)  # type: ignore[attr-defined]
            scale = min(1.0, cap / t) if t else 1.0
            self.credit[(row.operator, row.context)] = [s * scale, t * scale]  # type: ignore[attr-defined]
            self.changed.add((row.operator, row.context))  # type: ignore[attr-defined]

    def rows(self, only_changed: bool = True) -> list[PolicyIn]:
        keys = sorted(self.changed if only_changed else self.credit)
        self.changed = set()
        return [PolicyIn(op, ctx, *self.credit[(op, ctx)]) for op, ctx in keys]


def top_operators(rows: Iterable[object], n: int = 5) -> list[dict[str, float | str]]:
    """Operators by success rate over all contexts (for `evolve runs` / `evolve audit`)."""
    totals: dict[str, list[float]] = {}
    for row in rows:
        entry = totals.setdefault(row.operator, [0.0, 0.0])  # type: ignore[attr-defined]
        entry[0] += row.successes  # type: ignore[attr-defined]
        entry[1] += row.trials  # type: ignore[attr-defined]
    ranked = sorted(totals.items(), key=lambda kv: -(kv[1][0] + 1) / (kv[1][1] + 2))
    return [
        {"operator": op, "successes": round(s, 1), "trials": int(t), "rate": round(s / t, 3) if t else 0.0}
        for op, (s, t) in ranked[:n]
    ]
