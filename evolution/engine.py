"""The evolutionary loop: seed, evaluate on Ray, select, vary, commit — one generation at a time.

The driver is the only writer. Generation g is computed from the population committed at
g-1 and a random stream derived from (run seed, g), and committed in one transaction, so a
run killed at any point resumes from its last committed generation and replays exactly
what an uninterrupted run would have done (`Engine.resume`).

Seeds are derived, never global: the training seed of an individual comes from (run seed,
genome id), so the same genome gets the same seed within a run and its evaluation can be
reused (a cache hit) instead of repeated.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from evaluation import EvalRequest, EvalResult, get_task
from evolution.export import WEIGHTS_ARTIFACT
from evolution.operators import MUTATIONS, Child, Discard, vary
from evolution.repair import repair
from evolution.seeds import initial_population
from evolution.selection import assign_rank_and_crowding, pareto_front, survivors, tournament
from evolution.types import Individual
from genome import Genome
from phenotype import account
from store import EvaluationIn, GenomeIn, IndividualIn, LineageIn, Store, by_id, by_slot

FAILED_COST = 1e18  # finite: crowding distances subtract objective values


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run; stored with it so `resume` needs nothing else."""

    population: int = 64
    generations: int = 3          # generations of offspring after the initial one
    steps: int = 200              # training steps per evaluation (the fidelity)
    task: str = "mqar"
    seed: int = 0
    max_params: int = 250_000     # hard constraint, applied before selection
    crossover_rate: float = 0.2
    timeout_s: float = 300.0      # per candidate
    workers: int | None = None
    ray_address: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts: stable across processes and Python versions."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class GenerationReport:
    generation: int
    evaluated: int
    cached: int
    failed: int
    discarded: list[str] = field(default_factory=list)
    best_accuracy: float = 0.0


Event = Callable[[str, dict[str, Any]], None]


def _fitness(status: str | None, metrics: dict[str, Any], max_params: int) -> tuple[float, float]:
    if status != "ok" or metrics.get("params", 0) > max_params:
        return (0.0, FAILED_COST)
    return (float(metrics["accuracy"]), float(metrics["params"]))


class Engine:
    """Runs one evolutionary search against a store and an evaluation pool.

    `pool` has `evaluate(requests, on_result) -> list[EvalResult]` (evaluation.EvaluationPool).
    `on_event(kind, data)` receives progress: "generation", "result", "committed".
    """

    def __init__(self, config: RunConfig, store: Store, pool: Any, run_id: str | None = None,
                 on_event: Event | None = None):
        self.config, self.store, self.pool = config, store, pool
        self.task = get_task(config.task)
        self.pinned = {"vocab": self.task.vocab_size, "max_len": self.task.seq_len}
        self.on_event = on_event or (lambda kind, data: None)
        self.run_id = run_id or store.create_run(config.to_dict(), config.seed, config.task)
        self.reports: list[GenerationReport] = []

    # -- public ---------------------------------------------------------------------------
    def run(self) -> list[Individual]:
        """Run (or continue) to the configured number of generations; return the population."""
        record = self.store.get_run(self.run_id)
        start = record.last_generation + 1 if record else 0
        population = self._load_population() if start > 0 else []
        for generation in range(start, self.config.generations + 1):
            population = self._generation(generation, population)
        self.store.set_run_status(self.run_id, "finished")
        return population

    @classmethod
    def resume(cls, run_id: str, store: Store, pool: Any, on_event: Event | None = None,
               **overrides: Any) -> Engine:
        record = store.get_run(run_id)
        if record is None:
            raise KeyError(f"no run {run_id!r} in this store")
        config = RunConfig.from_dict({**record.config, **overrides})
        store.set_run_status(run_id, "running")
        return cls(config, store, pool, run_id=run_id, on_event=on_event)

    # -- one generation -------------------------------------------------------------------
    def _generation(self, generation: int, parents: list[Individual]) -> list[Individual]:
        rng = random.Random(derive_seed(self.config.seed, "generation", generation))
        report = GenerationReport(generation, 0, 0, 0)
        if generation == 0:
            genomes = initial_population(self.config.population, rng, self.pinned,
                                         self.config.max_params)
            births = [(g, None, None, []) for g in genomes]
        else:
            births = self._offspring(parents, rng, report)
        children = []
        for genome, op, change, parent_ids in births:
            ind = Individual(genome)
            ind.generation, ind.seed = generation, derive_seed(self.config.seed, genome.id)
            ind.op, ind.change, ind.parent_ids = op, change, parent_ids
            children.append(ind)
        self.on_event("generation", {"generation": generation, "births": len(children),
                                     "discarded": report.discarded})
        self._evaluate(children, parents, report)
        population = survivors(parents + children, self.config.population)
        self._commit(generation, children, population)
        report.best_accuracy = max((i.fitness.values[0] for i in population), default=0.0)
        self.reports.append(report)
        self.on_event("committed", {"generation": generation, "report": report,
                                    "population": population})
        return population

    def _offspring(self, parents: list[Individual], rng: random.Random,
                   report: GenerationReport) -> list[tuple[Genome, str, dict, list[int]]]:
        assign_rank_and_crowding(parents)
        ops = sorted(MUTATIONS)
        births = []
        attempts = 0
        while len(births) < self.config.population and attempts < 20 * self.config.population:
            attempts += 1
            a = tournament(parents, rng)
            if rng.random() < self.config.crossover_rate:
                b = tournament(parents, rng)
                op, mates = "homologous_crossover", [a, b]
            else:
                op, mates = rng.choice(ops), [a]
            try:
                child: Child = vary(op, [m.genome for m in mates], rng,
                                    lambda doc: repair(doc, self.pinned))
            except Discard as e:
                report.discarded.append(str(e))
                continue
            if account(child.genome, self.task.seq_len).params > self.config.max_params:
                report.discarded.append(f"{op}: child over the parameter budget")
                continue
            births.append((child.genome, child.op, child.change, [m.id for m in mates]))
        return births

    def _evaluate(self, children: list[Individual], parents: list[Individual],
                  report: GenerationReport) -> None:
        known = {p.genome.id: p for p in parents if p.status is not None}
        pending: dict[str, list[Individual]] = {}
        for ind in children:
            hit = known.get(ind.genome.id) or self._stored(ind)
            if hit is not None:
                ind.status, ind.metrics = hit.status, dict(hit.metrics)
                report.cached += 1
            else:
                pending.setdefault(ind.genome.id, []).append(ind)
        requests = [EvalRequest(genome_yaml=inds[0].genome.to_yaml(), genome_id=gid,
                                task=self.config.task, fidelity=self.config.steps,
                                seed=inds[0].seed, timeout_s=self.config.timeout_s,
                                return_weights=True)
                    for gid, inds in pending.items()]
        done = 0

        def on_result(result: EvalResult) -> None:
            nonlocal done
            done += 1
            self.on_event("result", {"done": done, "total": len(requests), "result": result})

        results = self.pool.evaluate(requests, on_result=on_result) if requests else []
        for result in results:
            inds = pending[result.genome_id]
            inds[0].result = result  # the one evaluation row; the other copies reuse it
            for ind in inds:
                ind.status, ind.metrics = result.status, dict(result.metrics)
                ind.weights = result.weights
            report.evaluated += 1
            report.failed += result.status != "ok"
        for ind in children:
            ind.fitness.values = _fitness(ind.status, ind.metrics, self.config.max_params)

    def _stored(self, ind: Individual) -> Any:
        record = self.store.find_evaluation(ind.genome.id, self.config.task, self.config.steps,
                                            ind.seed, run_id=self.run_id)
        return record

    def _commit(self, generation: int, children: list[Individual],
                population: list[Individual]) -> None:
        genomes = {c.genome.id: GenomeIn(c.genome.id, c.genome.to_yaml(), c.genome.sequence_view())
                   for c in children}
        individuals = [IndividualIn(slot, c.genome.id, c.seed, c.op, c.change)
                       for slot, c in enumerate(children)]
        evaluations = [
            EvaluationIn(c.genome.id, self.config.task, self.config.steps, c.seed, c.status,
                         c.metrics, c.result.reason, c.result.wall_seconds, by_slot(slot))
            for slot, c in enumerate(children) if c.result is not None]
        lineage = [LineageIn(slot, by_id(pid), c.op, c.change)
                   for slot, c in enumerate(children) for pid in c.parent_ids]
        slot_of = {id(c): slot for slot, c in enumerate(children)}
        members = [by_slot(slot_of[id(p)]) if id(p) in slot_of else by_id(p.id)
                   for p in population]
        ids = self.store.commit_generation(
            self.run_id, generation, genomes=list(genomes.values()), individuals=individuals,
            evaluations=evaluations, lineage=lineage, members=members)
        for slot, c in enumerate(children):
            c.id = ids[slot]
        # Weights of the newly born survivors, for export. Written after the generation's
        # transaction: a crash in between only costs a replay when that one is exported.
        for ind in population:
            if id(ind) in slot_of and ind.weights is not None:
                self.store.put_artifact(self.run_id, ind.id, WEIGHTS_ARTIFACT, ind.weights)
            ind.weights = None  # stored or not needed: do not hold them in memory

    def _load_population(self) -> list[Individual]:
        population = []
        for rec in self.store.population(self.run_id):
            ind = Individual(Genome.from_yaml(rec.yaml))
            ind.id, ind.generation, ind.seed = rec.id, rec.generation, rec.seed
            ind.status = rec.status
            ind.metrics = dict(rec.metrics or {})
            ind.fitness.values = _fitness(ind.status, ind.metrics, self.config.max_params)
            population.append(ind)
        assign_rank_and_crowding(population)
        return population


def best_of(population: list[Individual]) -> Individual:
    """Highest quality, then fewest parameters."""
    return min(population, key=lambda i: (-i.fitness.values[0], i.fitness.values[1]))


__all__ = ["Engine", "GenerationReport", "RunConfig", "best_of", "derive_seed", "pareto_front"]
