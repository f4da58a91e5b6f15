"""The DOGMA search space: region-structured genomes, varied by `operators`, repaired by
`repair`, seeded by `seeds`, described to the surrogate by `features`.

It follows `evolution.spaces.contract.SearchSpace` (the members are listed there) and is
registered in `evolution.spaces.registry.SPACES` as `dogma`. The command line lists the
spaces through that registry, so this module stays light: what needs torch (seeds,
accounting) is imported on first use.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dogma_evolve.evolution.spaces.contract import Child, Discard, Unit
from dogma_evolve.evolution.spaces.dogma import guards
from dogma_evolve.evolution.spaces.dogma.identity import canonical, relabelling
from dogma_evolve.evolution.spaces.dogma.operators import MUTATIONS, vary
from dogma_evolve.evolution.spaces.dogma.repair import repair
from dogma_evolve.genome import Genome

if TYPE_CHECKING:
    from dogma_evolve.evaluation.protocol import Pool
    from dogma_evolve.evolution.config import RunConfig


class DogmaSpace:
    """DOGMA genomes: region-structured, repaired after every variation, priced exactly.

    Candidates are trained for `steps` (the full fidelity) on the run's tasks; the
    vocabulary and context length are pinned to the largest over the tasks.
    """

    name = "dogma"
    operators = tuple(sorted(MUTATIONS))
    crossover_op = "homologous_crossover"
    keeps_weights = True
    supports_multi_fidelity = True

    def __init__(
        self,
        pinned: dict[str, Any],
        seq_len: int,
        max_params: int,
        max_state_bytes: int | None = None,
        enabled: tuple[str, ...] = (),
    ):
        self.pinned, self.seq_len = pinned, seq_len
        self.max_params, self.max_state_bytes = max_params, max_state_bytes
        self.enabled = enabled  # the run's plugin kinds: drawn after the built-ins

    # -- set-up ---------------------------------------------------------------------------
    @classmethod
    def pin_tasks(
        cls, task: str, recorded: Mapping[str, Mapping[str, Any]]
    ) -> tuple[str, dict[str, dict[str, Any]]]:
        """Each user task imported, checked and pinned unless ``recorded`` holds it
        (`evaluation.tasks.pin_tasks`)."""
        from dogma_evolve.evaluation.tasks import pin_tasks

        return pin_tasks(task, recorded)

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Every task must be one `evaluation.get_task` knows (its ValueError otherwise); a
        user's task recorded in `config.task_code` is not imported again."""
        from dogma_evolve.evaluation.tasks import task_facts

        for task in config.tasks:
            task_facts(task, config.task_code)

    @classmethod
    def from_config(cls, config: RunConfig) -> DogmaSpace:
        from dogma_evolve.evaluation.tasks import task_facts

        tasks = [task_facts(t, config.task_code) for t in config.tasks]
        seq_len = max(t.seq_len for t in tasks)
        pinned = {"vocab": max(t.vocab_size for t in tasks), "max_len": seq_len}
        enabled = tuple(k for record in config.plugin_code.values() for k in record["kinds"])
        return cls(pinned, seq_len, config.max_params, config.max_state_bytes, enabled)

    def full_fidelity(self, steps: int) -> int:
        return steps

    def local_pool(self) -> Pool | None:
        return None  # candidates are trained: on Ray's EvaluationPool

    # -- genomes --------------------------------------------------------------------------
    def _repair(self, doc: dict[str, Any]) -> dict[str, Any]:
        return repair(doc, self.pinned)

    def initial(self, size: int, rng: random.Random) -> list[Genome]:
        from dogma_evolve.evolution.spaces.dogma.seeds import initial_population

        return initial_population(size, rng, self.pinned, self.max_params, self.enabled)

    def sample(self, rng: random.Random) -> Genome:
        from dogma_evolve.evolution.spaces.dogma.seeds import random_genome

        return random_genome(rng, self.pinned, self.max_params, enabled=self.enabled)

    def mutate(self, genome: Genome, op: str, rng: random.Random) -> Child:
        return self._canonical_child(vary(op, [genome], rng, self._repair, self.enabled), [genome])

    def crossover(self, a: Genome, b: Genome, rng: random.Random) -> Child:
        return self._canonical_child(vary(self.crossover_op, [a, b], rng, self._repair, self.enabled), [a, b])

    @staticmethod
    def _canonical_child(child: Child, parents: list[Genome]) -> Child:
        """The child in canonical form (`identity`). Its change record keeps the labels the
        operator wrote (the parents' region ids, the child's before renaming); when the
        renaming moved a label, `change["labels"]` maps each canonical id of the child to
        that label, so lineage tools can follow a region back to its parent. A child that
        builds its (only) parent's model is a Discard."""
        assert isinstance(child.genome, Genome)  # `vary` makes DOGMA genomes
        genome, labels = relabelling(child.genome)
        if len(parents) == 1 and genome.id == canonical(parents[0]).id:
            raise Discard(f"{child.op}: the child builds its parent's model")
        if genome.id == child.genome.id:
            return child
        moved = {new: old for new, old in labels.items() if new != old}
        change = {**child.change, "labels": moved} if moved else child.change
        return Child(genome, child.op, change)

    def parse(self, text: str) -> Genome:
        """A stored genome as it was stored: NOT canonicalised, so it keeps its stored id
        (resume and `--memory-from` elites; the engine canonicalises only what it births)."""
        return Genome.from_yaml(text)

    def canonical(self, genome: Genome) -> Genome:
        """The canonical spelling of the model `genome` builds (`identity.canonical`):
        region labels by position, no-op promoters dropped; region order kept."""
        return canonical(genome)

    def prefilter(self, genome: Genome) -> str | None:
        """Why `genome` cannot beat chance by construction (it is then `filtered`, never
        trained), or None: `guards.prefilter`."""
        return guards.prefilter(genome)

    @classmethod
    def units(cls, text: str) -> tuple[Unit, ...]:
        """Blame's units: each region with its canonical bases and the edges into it."""
        doc = Genome.from_yaml(text).to_dict()

        def edges_in(region_id: str) -> tuple[tuple[str, str], ...]:
            return tuple(sorted((e["kind"], e["source"]) for e in doc["edges"] if e["target"] == region_id))

        return tuple(
            Unit(
                id=r["id"],
                type=r["type"],
                form={"type": r["type"], "settings": r.get("settings", {})},
                bases=tuple(r.get("bases", ())),
                edges_in=tuple(
                    sorted((e["kind"], e["source"]) for e in doc["edges"] if e["target"] == r["id"])
                ),
            )
            for r in doc["regions"]
        )

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
        from dogma_evolve.phenotype import account

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

    def features(self, genome: Genome) -> dict[str, float]:
        from dogma_evolve.evolution.spaces.dogma.features import dogma_features

        return dogma_features(genome, self.seq_len)

    def family(self, genome: Genome) -> str:
        """The distinct sequence-mixer kinds of its expressed layers, e.g. `attention+mamba`
        (`mlp-only` without any)."""
        return block_family(genome)

    def niche(self, genome: Genome) -> str:
        """Where the model takes token order from: its `positions` and the kind of its
        first expressed sequence mixer, e.g. `learned:mla`, `none:lstm` (`none:-` without
        one). A child that changes it starts slower than its siblings at a first stage."""
        mixers = guards.expressed_mixers(genome)
        return f"{genome.structural['positions']}:{mixers[0].kind if mixers else '-'}"


def block_family(genome: Genome) -> str:
    """`kind+kind` of the distinct sequence mixers (T bases) of a genome, sorted."""
    kinds = sorted({b.gene.kind for r in genome.regions for b in r.bases if b.type == "T"})
    return "+".join(kinds) or "mlp-only"


__all__ = ["DogmaSpace", "block_family"]
