"""DEAP types, created once at import (pickling and Ray need module-level classes).

An individual is a genome in the population with its store id and evaluation; its
fitness is (quality ↑, parameters ↓). DEAP's convention holds: an invalid fitness means
"not evaluated yet", which is what makes caching and resume cheap.
"""

from __future__ import annotations

from typing import Any

from deap import base, creator

from genome import Genome

OBJECTIVES = ("accuracy", "params")
WEIGHTS = (1.0, -1.0)


class Candidate:
    """A genome in the population; `fitness` is attached by the DEAP creator."""

    fitness: Any

    def __init__(self, genome: Genome):
        self.genome = genome
        self.id: int | None = None          # store id, once committed
        self.generation: int = 0
        self.seed: int = 0
        self.status: str | None = None      # evaluation status, None = not evaluated
        self.metrics: dict[str, Any] = {}
        self.op: str | None = None          # how it was born (None for seeds)
        self.change: dict[str, Any] | None = None
        self.parent_ids: list[int] = []
        self.result: Any = None             # its EvalResult when evaluated in this process
        self.weights: bytes | None = None   # trained weights (safetensors) until committed

    def __repr__(self) -> str:
        return f"Individual(id={self.id}, genome={self.genome.id[:12]}, status={self.status})"


if not hasattr(creator, "FitnessQualityCost"):
    creator.create("FitnessQualityCost", base.Fitness, weights=WEIGHTS)
    creator.create("Individual", Candidate, fitness=creator.FitnessQualityCost)

Individual = creator.Individual
