"""The objectives a run selects on (`RunConfig.objectives`, `evolve run --objectives`): one
table, `OBJECTIVES`, name -> how its value is read from an evaluation's metrics and which
way is better.

A fitness is (quality, cost, ...): the first objective, `quality`, is the only one
maximised; every further one is a cost, minimised. That is the sign `Objective.weight`
gives: DEAP's fitness classes carry the same weights (`evolution.types`: +1 for the first
value, -1 for each further one) and `selection` (`best_of` too) order by
(-quality, cost, ...), so a run's objectives are `quality` and then costs
(`check_objectives`). A value is read from the first of its metric names that the result
holds (a table space names latency `latency`, a trained candidate `infer_latency_ms`); a
cost that no metric gives is `FAILED_COST`, a quality that none gives is 0.

A run's default objectives are quality alone (`config.DEFAULT_OBJECTIVES`): selection
then orders by quality and breaks ties on the `params` and `state_bytes` metrics
(`selection.quality_key`), the costs being budgets (`max_params`, `max_state_bytes`), not
objectives; asking for costs (`--objectives quality,params`) selects with NSGA-II. The
front a run reports is (quality, params) from the metrics either way
(`selection.pareto_front`).

Plain data: `RunConfig` and the `evolve` parser read this table without loading torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAXIMISED, MINIMISED = 1.0, -1.0
FAILED_COST = 1e18  # finite: crowding distances subtract objective values


@dataclass(frozen=True)
class Objective:
    """One objective: the metrics it is read from (the first present) and its sign."""

    metrics: tuple[str, ...]
    weight: float  # MAXIMISED or MINIMISED, DEAP's fitness weight
    missing: float  # its value when the metrics hold none of its names

    def value(self, metrics: Mapping[str, Any]) -> float:
        """This objective read from an evaluation's metrics."""
        for key in self.metrics:
            if key in metrics:
                return float(metrics[key])
        return self.missing


#: every objective, in the order `--objectives`'s help lists them; the first is the quality
OBJECTIVES: dict[str, Objective] = {
    # normalised accuracy on the task(s); a table space's own score is its accuracy
    "quality": Objective(("quality", "accuracy"), MAXIMISED, 0.0),
    "params": Objective(("params",), MINIMISED, FAILED_COST),
    "state_bytes": Objective(("state_bytes",), MINIMISED, FAILED_COST),
    "flops": Objective(("flops_per_token",), MINIMISED, FAILED_COST),
    "latency": Objective(("infer_latency_ms", "latency"), MINIMISED, FAILED_COST),
}
QUALITY = "quality"  # the first objective of every run, the one maximised


def objective_value(metrics: Mapping[str, Any], objective: str) -> float:
    """`objective` read from metrics (the first of its metric names present)."""
    return OBJECTIVES[objective].value(metrics)


def quality_of(metrics: Mapping[str, Any]) -> float:
    """The fitness's quality: `quality` when the result has it, else `accuracy`."""
    return OBJECTIVES[QUALITY].value(metrics)


def check_objectives(objectives: Sequence[str]) -> None:
    """Refuse, in one line (`ValueError`), objectives that do not start with the quality,
    repeat one, or name one outside `OBJECTIVES`."""
    if not objectives or objectives[0] != QUALITY or len(set(objectives)) != len(objectives):
        raise ValueError(f"objectives must start with {QUALITY} and not repeat")
    bad = [o for o in objectives if o not in OBJECTIVES]
    if bad:
        raise ValueError(f"unknown objective {bad[0]!r}; choose from {tuple(OBJECTIVES)}")


def seeds_text(metrics: dict[str, Any]) -> str:
    """`` ± sd over n seeds`` of a quality confirmed under several seeds; "" for one."""
    seeds = metrics.get("quality_seeds") or []
    if len(seeds) < 2:
        return ""
    mean = sum(seeds) / len(seeds)
    sd = (sum((q - mean) ** 2 for q in seeds) / (len(seeds) - 1)) ** 0.5
    return f" ± {sd:.3f} (sd over {len(seeds)} seeds)"


__all__ = [
    "FAILED_COST",
    "MAXIMISED",
    "MINIMISED",
    "OBJECTIVES",
    "QUALITY",
    "Objective",
    "check_objectives",
    "objective_value",
    "quality_of",
    "seeds_text",
]
