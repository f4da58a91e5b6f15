"""The protocols the engine is written against: a genome and a search space.

The engine, the store, lineage and the meta-policy are the same code for every space; a
space says how to make, vary, name, price and evaluate its genomes, and which run
settings make sense for it. The engine never names a space: it takes the class from
`evolution.spaces.registry.SPACES` by the run's `space` setting.

The pool that evaluates candidates is `evaluation.protocol.Pool`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

if TYPE_CHECKING:
    from dogma_evolve.evaluation.protocol import Pool
    from dogma_evolve.evolution.config import RunConfig


class Discard(Exception):
    """The operator cannot act on this genome (for example no second base to delete)."""


class Genotype(Protocol):
    """What the engine and the store need of a genome of any space."""

    @property
    def id(self) -> str:
        """Hex canonical key: equal genomes, equal ids."""
        ...

    def to_yaml(self) -> str:
        """The stored canonical text (`SearchSpace.parse` reads it back)."""
        ...

    def sequence_view(self) -> str:
        """A one-line human-readable view."""
        ...


@dataclass(frozen=True)
class Unit:
    """One part of a genome as `evolve blame` follows it through the lineage: a DOGMA region
    (its bases by index, the edges into it as ``(kind, source id)``) or a NAS-Bench-201 edge.
    ``form`` is what must be equal in a parent for the unit to be inherited unchanged."""

    id: str
    type: str
    form: Any  # JSON-like
    bases: tuple[Any, ...] = ()
    edges_in: tuple[tuple[str, str], ...] = ()

    def base_label(self, index: int) -> str:
        base = self.bases[index]
        return f"{base['base']}:{base['kind']}" if isinstance(base, dict) else str(base)


@dataclass
class Child:
    """A valid child genome (of any space), the operator that made it and what changed."""

    genome: Genotype
    op: str
    change: dict[str, Any]


class SearchSpace(Protocol):
    """A search space. Genome arguments are the space's own genome type (hence `Any`).

    Set-up (class level, so a configuration is checked before anything is built):
        pin_tasks(task, recorded)   the run's comma list of tasks with each user's own task
                                    pinned, and their records (`evaluation.tasks.pin_tasks`:
                                    imports the code); a space without user tasks returns
                                    them as given
        check_config(config)        raise ValueError for settings this space cannot honour
        from_config(config)         the space for a run
    Evaluation:
        full_fidelity(steps)        the fidelity of a final evaluation
        supports_multi_fidelity     whether a cheaper first evaluation (`min_steps`) means
                                    anything
        keeps_weights               whether final evaluations train weights worth storing
                                    (for `evolve export`)
        local_pool()                a pool that evaluates this space in this process (a
                                    table look-up), or None: train on an `EvaluationPool`
    Genomes:
        initial(size, rng)          the generation-0 genomes
        sample(rng)                 one random genome (the `random` strategy's proposal)
        operators / crossover_op    names of its variation operators (the meta-policy's arms)
        mutate(genome, op, rng)     -> Child (genome, op, change record) or raise Discard
        crossover(a, b, rng)        -> Child or raise Discard
        parse(text) / key(genome)   the stored canonical text and the canonical key (its id);
                                    `parse` returns the genome as stored (never re-spelled),
                                    so a stored genome keeps its stored id
        canonical(genome)           the one spelling of the model `genome` builds (genomes
                                    that build the same model get one id); the engine
                                    applies it to every genome it births, before the
                                    "seen in this run" check
        prefilter(genome)           why the genome cannot beat chance by construction, or
                                    None; the engine stores such a child as `filtered` and
                                    never trains it (no evaluation spent)
        context(parent, change)     the region type an operator touched, for credit
        cost_metrics(genome)        exact costs known without training (merged into metrics)
        violation(genome)           why a genome breaks a hard constraint, or None
        features(genome)            cheap numeric features (the surrogate's inputs)
        family(genome)              a short name of its design family (diversity reports)
        niche(genome)               the stratum a first stage ranks within: promotion keeps
                                    places for niches the first stage's order leaves out
                                    (`evaluating.with_niches`); one value for a space whose
                                    candidates all compare alike
    """

    name: str
    operators: tuple[str, ...]
    crossover_op: str
    keeps_weights: bool
    supports_multi_fidelity: bool

    @classmethod
    def pin_tasks(
        cls, task: str, recorded: Mapping[str, Mapping[str, Any]]
    ) -> tuple[str, dict[str, dict[str, Any]]]: ...
    @classmethod
    def check_config(cls, config: RunConfig) -> None: ...
    @classmethod
    def from_config(cls, config: RunConfig) -> Self: ...
    def full_fidelity(self, steps: int) -> int: ...
    def local_pool(self) -> Pool | None: ...
    def initial(self, size: int, rng: random.Random) -> Sequence[Genotype]: ...
    def sample(self, rng: random.Random) -> Genotype: ...
    def mutate(self, genome: Any, op: str, rng: random.Random) -> Child: ...
    def crossover(self, a: Any, b: Any, rng: random.Random) -> Child: ...
    def parse(self, text: str) -> Genotype: ...
    @classmethod
    def units(cls, text: str) -> tuple[Unit, ...]: ...
    def key(self, genome: Any) -> str: ...
    def canonical(self, genome: Any) -> Genotype: ...
    def prefilter(self, genome: Any) -> str | None: ...
    def context(self, parent: Any, change: dict[str, Any] | None) -> str: ...
    def cost_metrics(self, genome: Any) -> dict[str, float]: ...
    def violation(self, genome: Any) -> str | None: ...
    def features(self, genome: Any) -> dict[str, float]: ...
    def family(self, genome: Any) -> str: ...
    def niche(self, genome: Any) -> str: ...


__all__ = ["Genotype", "SearchSpace"]
