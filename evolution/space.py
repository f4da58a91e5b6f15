"""Search spaces: what the loop searches over, behind one small protocol.

The engine, the store, lineage and the meta-policy are the same code for every space; a
space only says how to make, vary, name and price its genomes:

    initial(size, rng)          the generation-0 genomes
    sample(rng)                 one random genome (the `random` strategy's proposal)
    operators                   names of its mutation operators (the meta-policy's arms)
    mutate(genome, op, rng)     -> Child (genome, op, change record) or raise Discard
    crossover(a, b, rng)        -> Child or raise Discard
    parse(text) / key(genome)   the stored canonical text and the canonical key (its id)
    context(parent, change)     the region type an operator touched, for credit
    cost_metrics(genome)        exact costs known without training (merged into metrics)
    violation(genome)           why a genome breaks a hard constraint, or None
    tasks_valid(tasks)          raise ValueError for a task this space cannot evaluate

A genome object has `.id` (hex canonical key), `.to_yaml()` and `.sequence_view()`.

`DogmaSpace` wraps the DOGMA genome operators, repair and seeds; `evolution.nb201` adapts
NAS-Bench-201 (a table space evaluated by lookup).
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from evolution.operators import MUTATIONS, Child, Discard, vary
from evolution.repair import repair
from evolution.seeds import initial_population, random_genome
from genome import Genome
from phenotype import account


class SearchSpace(Protocol):
    name: str
    operators: tuple[str, ...]
    crossover_op: str

    def initial(self, size: int, rng: random.Random) -> list[Any]: ...
    def sample(self, rng: random.Random) -> Any: ...
    def mutate(self, genome: Any, op: str, rng: random.Random) -> Child: ...
    def crossover(self, a: Any, b: Any, rng: random.Random) -> Child: ...
    def parse(self, text: str) -> Any: ...
    def key(self, genome: Any) -> str: ...
    def context(self, parent: Any, change: dict[str, Any] | None) -> str: ...
    def cost_metrics(self, genome: Any) -> dict[str, float]: ...
    def violation(self, genome: Any) -> str | None: ...


class DogmaSpace:
    """DOGMA genomes: region-structured, repaired after every variation, priced exactly."""

    name = "dogma"
    operators = tuple(sorted(MUTATIONS))
    crossover_op = "homologous_crossover"

    def __init__(
        self, pinned: dict[str, Any], seq_len: int, max_params: int, max_state_bytes: int | None = None
    ):
        self.pinned, self.seq_len = pinned, seq_len
        self.max_params, self.max_state_bytes = max_params, max_state_bytes

    def _repair(self, doc: dict[str, Any]) -> dict[str, Any]:
        return repair(doc, self.pinned)

    def initial(self, size: int, rng: random.Random) -> list[Genome]:
        return initial_population(size, rng, self.pinned, self.max_params)

    def sample(self, rng: random.Random) -> Genome:
        return random_genome(rng, self.pinned, self.max_params)

    def mutate(self, genome: Genome, op: str, rng: random.Random) -> Child:
        return vary(op, [genome], rng, self._repair)

    def crossover(self, a: Genome, b: Genome, rng: random.Random) -> Child:
        return vary(self.crossover_op, [a, b], rng, self._repair)

    def parse(self, text: str) -> Genome:
        return Genome.from_yaml(text)

    def key(self, genome: Genome) -> str:
        return genome.id

    def context(self, parent: Genome, change: dict[str, Any] | None) -> str:
        """The type of region the change touched: structural, promoter, regulatory, coding
        (a crossover touches the whole genome)."""
        if not change or change.get("op") == self.crossover_op:
            return "genome"
        op, location = change.get("op"), str(change.get("location", ""))
        if op == "promoter_change":
            return "promoter"
        if location.startswith("s."):
            return "structural"
        if "->" in location:
            return "regulatory"
        rid = location.split("/")[0].split(".")[0]
        types = {r.id: r.type for r in parent.regions}
        return types.get(rid, "coding")

    def cost_metrics(self, genome: Genome) -> dict[str, float]:
        acct = account(genome, self.seq_len)
        return {
            "params": acct.params,
            "flops_per_token": acct.flops_per_token,
            "state_bytes": acct.state_bytes_per_token * self.seq_len + acct.state_bytes_fixed,
        }

    def violation(self, genome: Genome) -> str | None:
        costs = self.cost_metrics(genome)
        if costs["params"] > self.max_params:
            return f"{costs['params']:,} parameters over the budget {self.max_params:,}"
        if self.max_state_bytes is not None and costs["state_bytes"] > self.max_state_bytes:
            return f"{costs['state_bytes']:,} state bytes over the budget {self.max_state_bytes:,}"
        return None


__all__ = ["Child", "Discard", "DogmaSpace", "InProcessPool", "SearchSpace"]


class InProcessPool:
    """Evaluates DOGMA requests one by one in this process (no Ray): for small benchmarks
    and tests. Same protocol as `evaluation.EvaluationPool.evaluate`."""

    def __init__(self) -> None:
        self.requests = 0

    def __enter__(self) -> InProcessPool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def evaluate(self, requests: list[Any], on_result: Any = None) -> list[Any]:
        from evaluation import evaluate

        out = []
        for request in requests:
            self.requests += 1
            result = evaluate(request)
            out.append(result)
            if on_result:
                on_result(result)
        return out
