"""The evolutionary loop: seed, evaluate, select, vary, commit — one generation at a time.

The driver is the only writer. Generation g is computed from the population committed at
g-1 and a random stream derived from (run seed, g), and committed in one transaction
(births, evaluations, lineage, members, operator credit, elite archive), so a run killed
at any point resumes from its last committed generation (`Engine.resume`).

One loop for every search space (`evolution.space`: DOGMA genomes, NAS-Bench-201 cells)
and every strategy (`evolution.strategies`: nsga2, regularized, random). The pool is
pluggable: anything with `evaluate(requests, on_result)` (Ray's `EvaluationPool`, the
in-process `evolution.nb201.TableEvaluator`).

Seed policy (explicit, `RunConfig.seed_policy`):
- "genome" (default): the training seed of an evaluation is derived from (genome id,
  task) alone, so the same genome on the same task and fidelity has the same natural key
  in every run, and a result stored by any run is reused (a cache hit, not an
  evaluation; the row is copied into this run with `metrics["cached_from"]`).
- "run": derived from (run seed, genome id): every run re-trains its genomes under its
  own seeds (independent noise per run; only same-run reuse).

Multi-fidelity (`min_steps`): children are trained at `min_steps` first; the best
`promote` fraction (NSGA-II order on the low-fidelity objectives, so Pareto-aware) is
trained at `steps`. Every evaluation row records its fidelity; survivors are drawn from
full-fidelity individuals first.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from deap import tools

from evaluation import EvalRequest, EvalResult, get_task
from evaluation.tasks import derive_seed  # the one seed derivation: tasks' data streams too
from evolution.export import WEIGHTS_ARTIFACT
from evolution.operators import Discard
from evolution.policy import OperatorPolicy, outcome
from evolution.selection import assign_rank_and_crowding, pareto_front
from evolution.space import DogmaSpace
from evolution.strategies import make_strategy
from evolution.types import Candidate, individual_class
from store import (
    ArchiveIn,
    EvaluationIn,
    GenomeIn,
    IndividualIn,
    LineageIn,
    Store,
    by_id,
    by_slot,
)

FAILED_COST = 1e18  # finite: crowding distances subtract objective values
OBJECTIVE_CHOICES = ("quality", "params", "state_bytes", "flops", "latency")
SPACES = ("dogma", "nb201")


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run; stored with it so `resume` needs nothing else."""

    population: int = 64
    generations: int = 2  # generations of offspring after the seeds (fits 10 min on 2 cores)
    steps: int = 200  # training steps per evaluation (the full fidelity)
    task: str = "mqar"  # one task or a comma list (fitness: the per-task mean)
    seed: int = 0
    max_params: int = 250_000  # hard constraint, applied before selection
    crossover_rate: float = 0.2
    timeout_s: float = 60.0  # per candidate: slower ones are recorded as "timeout" failures
    workers: int | None = None
    ray_address: str | None = None
    space: str = "dogma"  # dogma | nb201
    strategy: str = "nsga2"  # nsga2 | regularized | random
    objectives: tuple[str, ...] = ("quality", "params")
    max_state_bytes: int | None = None  # hard constraint (inference state at the task's context)
    sample_size: int = 3  # regularized: tournament sample S
    batch: int | None = None  # children per generation (default: population)
    max_evaluations: int | None = None  # budget of real evaluations (cache hits are free)
    min_steps: int | None = None  # multi-fidelity: first training budget of every child
    promote: float = 0.25  # multi-fidelity: fraction promoted to `steps`
    seed_policy: str = "genome"  # genome | run (see the module docstring)
    memory_from: str | None = None  # start from that run's operator credit and elites
    archive_size: int = 8
    policy_floor: float = 0.05

    def __post_init__(self) -> None:
        objectives = tuple(self.objectives)
        object.__setattr__(self, "objectives", objectives)
        if not objectives or objectives[0] != "quality" or len(set(objectives)) != len(objectives):
            raise ValueError("objectives must start with quality and not repeat")
        bad = [o for o in objectives if o not in OBJECTIVE_CHOICES]
        if bad:
            raise ValueError(f"unknown objective {bad[0]!r}; choose from {OBJECTIVE_CHOICES}")
        if self.space not in SPACES:
            raise ValueError(f"space must be one of {SPACES}, not {self.space!r}")
        if self.seed_policy not in ("genome", "run"):
            raise ValueError("seed_policy must be 'genome' or 'run'")
        if self.min_steps is not None and not 1 <= self.min_steps < self.steps:
            raise ValueError("min_steps must be at least 1 and below steps")

    @property
    def tasks(self) -> list[str]:
        return [t.strip() for t in self.task.split(",") if t.strip()]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["objectives"] = list(self.objectives)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class GenerationReport:
    generation: int
    evaluated: int  # children trained here (at least one new evaluation)
    cached: int  # children whose every result was reused
    failed: int
    discarded: list[str] = field(default_factory=list)
    best_accuracy: float = 0.0
    requests: int = 0  # real evaluations (one per task and fidelity)
    hits: int = 0  # results reused instead of evaluated
    promoted: int = 0
    births: int = 0


Event = Callable[[str, dict[str, Any]], None]

OBJECTIVE_METRICS = {
    "params": ("params",),
    "state_bytes": ("state_bytes",),
    "flops": ("flops_per_token",),
    "latency": ("infer_latency_ms", "latency"),
}


def _objective(metrics: dict[str, Any], objective: str) -> float:
    for key in OBJECTIVE_METRICS[objective]:
        if key in metrics:
            return float(metrics[key])
    return FAILED_COST


class Engine:
    """Runs one search against a store and an evaluation pool.

    `pool` has `evaluate(requests, on_result) -> list[EvalResult]`.
    `on_event(kind, data)` receives progress: "generation", "result", "committed".
    """

    def __init__(
        self,
        config: RunConfig,
        store: Store,
        pool: Any,
        run_id: str | None = None,
        on_event: Event | None = None,
    ):
        self.config, self.store, self.pool = config, store, pool
        self.tasks = config.tasks
        if not self.tasks:
            raise ValueError("no task given")
        self.space = self._make_space()
        self.strategy = make_strategy(config.strategy, config.sample_size)
        self.Individual = individual_class(len(config.objectives))
        self.weights = (1.0,) + (-1.0,) * (len(config.objectives) - 1)
        self.on_event = on_event or (lambda kind, data: None)
        self.run_id = run_id or store.create_run(config.to_dict(), config.seed, config.task)
        self.reports: list[GenerationReport] = []
        self.policy = OperatorPolicy(
            self.space.operators + (self.space.crossover_op,), floor=config.policy_floor
        )
        self.archive: dict[str, tuple[Any, dict[str, Any]]] = {}  # genome id -> (genome, metrics)
        self.history: list[tuple[int, Candidate]] = []  # (evaluations so far, child), in order
        self.spent = 0  # real evaluations of this run
        self._elites: list[Any] = []
        self.seen: set[str] = set()  # genome ids born in this run: children must be new
        if run_id is None and config.memory_from:
            self._inherit(config.memory_from)

    def _make_space(self) -> Any:
        cfg = self.config
        if cfg.space == "nb201":
            from evolution.nb201 import DATASETS, NB201Space

            for t in self.tasks:
                if t not in DATASETS:
                    raise ValueError(f"nb201 tasks are datasets {DATASETS}, not {t!r}")
            for o in cfg.objectives:
                if o in ("flops", "state_bytes"):
                    raise ValueError(f"nb201 has no {o} objective")
            if cfg.max_state_bytes is not None:
                raise ValueError("nb201 has no state bytes constraint")
            return NB201Space()
        tasks = [get_task(t) for t in self.tasks]
        self.seq_len = max(t.seq_len for t in tasks)
        self.pinned = {"vocab": max(t.vocab_size for t in tasks), "max_len": self.seq_len}
        return DogmaSpace(self.pinned, self.seq_len, cfg.max_params, cfg.max_state_bytes)

    @property
    def task(self) -> Any:  # kept for callers of the single-task engine
        return get_task(self.tasks[0])

    # -- public ---------------------------------------------------------------------------
    def run(self) -> list[Candidate]:
        """Run (or continue) to the configured generations or budget; return the population."""
        record = self.store.get_run(self.run_id)
        start = record.last_generation + 1 if record else 0
        population: list[Candidate] = []
        if start > 0:
            population = self._load_population()
            self.seen = {rec.genome_id for rec in self.store.individuals(self.run_id)}
            self.policy.inherit(self.store.policy(self.run_id), cap=float("inf"))
            self.policy.changed = set()
            for a in self.store.archive(self.run_id):
                self.archive[a.genome_id] = (self.space.parse(a.yaml), dict(a.metrics))
            self.spent = self._spent_so_far()
        stalled = 0
        for generation in range(start, self.config.generations + 1):
            if self._budget_left() <= 0 or stalled >= 5:
                break  # budget spent, or the search proposes nothing new any more
            population = self._generation(generation, population)
            stalled = stalled + 1 if self.reports[-1].births == 0 else 0
        self.store.set_run_status(self.run_id, "finished")
        return population

    @classmethod
    def resume(
        cls, run_id: str, store: Store, pool: Any, on_event: Event | None = None, **overrides: Any
    ) -> Engine:
        record = store.get_run(run_id)
        if record is None:
            raise KeyError(f"no run {run_id!r} in this store")
        config = RunConfig.from_dict({**record.config, **overrides})
        store.set_run_status(run_id, "running")
        return cls(config, store, pool, run_id=run_id, on_event=on_event)

    # -- seeds, fitness -------------------------------------------------------------------
    def seed_for(self, genome_id: str, task: str) -> int:
        if self.config.seed_policy == "run":
            if task == self.config.task:
                return derive_seed(self.config.seed, genome_id)
            return derive_seed(self.config.seed, genome_id, task)
        return derive_seed("eval", genome_id, task)

    def fitness(self, ind: Candidate) -> tuple[float, ...]:
        n = len(self.config.objectives)
        if ind.status != "ok" or getattr(ind, "violation", None):
            return (0.0,) + (FAILED_COST,) * (n - 1)
        return (float(ind.metrics.get("accuracy", 0.0)),) + tuple(
            _objective(ind.metrics, o) for o in self.config.objectives[1:]
        )

    def _budget_left(self) -> float:
        if self.config.max_evaluations is None:
            return math.inf
        return self.config.max_evaluations - self.spent

    def _new(self, genome: Any, generation: int, slot: int) -> Candidate:
        ind = self.Individual(genome)
        ind.generation, ind.seed = generation, self.seed_for(genome.id, self.config.task)
        ind.age = generation * 1_000_000 + slot
        ind.violation = self.space.violation(genome)
        return ind

    # -- one generation -------------------------------------------------------------------
    def _generation(self, generation: int, parents: list[Candidate]) -> list[Candidate]:
        rng = random.Random(derive_seed(self.config.seed, "generation", generation))
        report = GenerationReport(generation, 0, 0, 0)
        budget = self._budget_left()
        if generation == 0:
            size = int(min(self.config.population, budget))
            genomes = self._seeds(size, rng)
            births = [(g, None, None, []) for g in genomes]
        else:
            n = int(min(self.config.batch or self.config.population, budget))
            births = self._offspring(parents, rng, report, n)
        children = []
        for slot, (genome, op, change, mates) in enumerate(births):
            self.seen.add(genome.id)
            ind = self._new(genome, generation, slot)
            ind.op, ind.change, ind.parents = op, change, mates
            ind.parent_ids = [m.id for m in mates]
            if op is not None and mates:
                ind.context = f"{self.config.task}/{self.space.context(mates[0].genome, change)}"
            children.append(ind)
        report.births = len(children)
        self.on_event(
            "generation", {"generation": generation, "births": len(children), "discarded": report.discarded}
        )
        full = self._evaluate(children, parents, report)
        self._credit(children)
        population = self._survivors(parents, children, full)
        self._commit(generation, children, population)
        report.best_accuracy = max((i.fitness.values[0] for i in population), default=0.0)
        self.reports.append(report)
        self.on_event("committed", {"generation": generation, "report": report, "population": population})
        return population

    def _seeds(self, size: int, rng: random.Random) -> list[Any]:
        out, seen = [], set()
        for g in self._elites[:size]:
            if g.id not in seen:
                out.append(g)
                seen.add(g.id)
        for g in self.space.initial(size, rng):
            if len(out) >= size:
                break
            if g.id not in seen and self.space.violation(g) is None:
                out.append(g)
                seen.add(g.id)
        tries = 0
        while len(out) < size and tries < 50 * size:
            tries += 1
            g = self.space.sample(rng)
            if g.id not in seen and self.space.violation(g) is None:
                out.append(g)
                seen.add(g.id)
        return out

    def _offspring(
        self, parents: list[Candidate], rng: random.Random, report: GenerationReport, n: int
    ) -> list[tuple[Any, Any, Any, list]]:
        births: list[tuple[Any, Any, Any, list]] = []
        attempts = 0
        if not self.strategy.breeds:
            while len(births) < n and attempts < 50 * n:
                attempts += 1
                g = self.space.sample(rng)
                if (
                    self.space.violation(g) is None
                    and g.id not in self.seen
                    and all(g.id != b[0].id for b in births)
                ):
                    births.append((g, None, None, []))
            return births
        self.strategy.prepare(parents)
        while len(births) < n and attempts < 20 * max(n, 1):
            attempts += 1
            (a,) = self.strategy.mates(parents, 1, rng)
            try:
                if rng.random() < self.config.crossover_rate and len(parents) > 1:
                    (b,) = self.strategy.mates(parents, 1, rng)
                    mates = [a, b]
                    child = self.space.crossover(a.genome, b.genome, rng)
                else:
                    mates = [a]
                    op = self.policy.choose(self.config.task, rng)
                    if op == self.space.crossover_op:
                        op = self.space.operators[rng.randrange(len(self.space.operators))]
                    child = self.space.mutate(a.genome, op, rng)
            except Discard as e:
                report.discarded.append(str(e))
                continue
            if child.genome.id in self.seen or any(child.genome.id == b[0].id for b in births):
                report.discarded.append(f"{child.op}: child seen before in this run")
                continue
            reason = self.space.violation(child.genome)
            if reason is not None:
                report.discarded.append(f"{child.op}: child {reason}")
                continue
            births.append((child.genome, child.op, child.change, mates))
        return births

    # -- evaluation -----------------------------------------------------------------------
    def _evaluate(
        self, children: list[Candidate], parents: list[Candidate], report: GenerationReport
    ) -> set[int]:
        """Evaluate children (multi-fidelity when configured); return ids of the children
        whose metrics are at full fidelity."""
        cfg = self.config
        todo = [c for c in children if not c.violation]
        for c in children:
            if c.violation:
                c.status, c.metrics = "invalid", {"violation": c.violation}
        if cfg.min_steps is None or cfg.space != "dogma":
            fidelity = 200 if cfg.space == "nb201" else cfg.steps
            self._evaluate_at(todo, fidelity, report, final=True)
            promoted = todo
        else:
            self._evaluate_at(todo, cfg.min_steps, report, final=False)
            ok = [c for c in todo if c.status == "ok"]
            for c in ok:
                c.fitness.values = self.fitness(c)
            k = min(len(ok), math.ceil(cfg.promote * len(todo))) if ok else 0
            promoted = tools.selNSGA2(ok, k) if k else []
            report.promoted = len(promoted)
            self._evaluate_at(promoted, cfg.steps, report, final=True)
        for ind in children:
            ind.fitness.values = self.fitness(ind)
        for ind in children:
            if ind.status == "ok":
                self.history.append((ind.spent_at, ind))
        report.failed += sum(c.status not in ("ok", None) for c in children)
        return {id(c) for c in promoted} | {id(c) for c in children if c.violation}

    def _lookup(self, key: tuple[str, str, int | str, int]) -> tuple[Any, bool]:
        """A stored result for the key: (record, stored_in_this_run) or (None, False)."""
        genome_id, task, fidelity, seed = key
        rec = self.store.find_evaluation(genome_id, task, fidelity, seed, run_id=self.run_id)
        if rec is not None:
            return rec, True
        rec = self.store.find_evaluation(genome_id, task, fidelity, seed, run_id=None)
        return rec, False

    def _evaluate_at(
        self, children: list[Candidate], fidelity: int, report: GenerationReport, final: bool
    ) -> None:
        cfg = self.config
        per_child: dict[int, dict[str, tuple[str, dict[str, Any]]]] = {}
        pending: dict[tuple, list[Candidate]] = {}
        requested: dict[int, bool] = {}
        for ind in children:
            per_child[id(ind)] = {}
            for task in self.tasks:
                key = (ind.genome.id, task, fidelity, self.seed_for(ind.genome.id, task))
                if key in pending:
                    pending[key].append(ind)
                    continue
                rec, here = self._lookup(key)
                ind.spent_at = self.spent
                if rec is not None:
                    report.hits += 1
                    metrics = {k: v for k, v in rec.metrics.items() if k != "cached_from"}
                    per_child[id(ind)][task] = (rec.status, metrics)
                    if not here:  # reused from another run: copy the row, marked
                        ind.cached_rows.append(
                            EvaluationIn(
                                ind.genome.id,
                                task,
                                fidelity,
                                key[3],
                                rec.status,
                                {**metrics, "cached_from": rec.id},
                                rec.reason,
                                0.0,
                            )
                        )
                else:
                    pending[key] = [ind]
                    requested[id(ind)] = True
        requests = [
            EvalRequest(
                genome_yaml=inds[0].genome.to_yaml(),
                genome_id=key[0],
                task=key[1],
                fidelity=fidelity,
                seed=key[3],
                timeout_s=cfg.timeout_s,
                return_weights=final and cfg.space == "dogma" and key[1] == self.tasks[0],
            )
            for key, inds in pending.items()
        ]
        done = 0

        def on_result(result: EvalResult) -> None:
            nonlocal done
            done += 1
            self.on_event("result", {"done": done, "total": len(requests), "result": result})

        results = self.pool.evaluate(requests, on_result=on_result) if requests else []
        by_key = {(r.genome_id, r.task, r.fidelity, r.seed): r for r in results}
        for key, inds in pending.items():
            result = by_key[key]
            self.spent += 1
            report.requests += 1
            inds[0].results.append(result)  # the one evaluation row; copies reuse it
            if result.weights is not None:
                inds[0].weights = result.weights
            for ind in inds:
                ind.spent_at = self.spent
                per_child[id(ind)][key[1]] = (result.status, dict(result.metrics))
        for ind in children:
            if requested.get(id(ind)):
                report.evaluated += 1
            else:
                report.cached += 1
            status, metrics = self._combine(per_child[id(ind)])
            ind.status, ind.metrics, ind.fidelity = status, metrics, fidelity
            ind.metrics.update(self.space.cost_metrics(ind.genome))
            if len(self.tasks) > 1:  # the run's own row: the per-task mean
                ind.cached_rows.append(
                    EvaluationIn(
                        ind.genome.id,
                        cfg.task,
                        fidelity,
                        ind.seed,
                        status,
                        metrics,
                        None if status == "ok" else "a task failed",
                        0.0,
                    )
                )

    def _combine(self, results: dict[str, tuple[str, dict[str, Any]]]) -> tuple[str, dict]:
        if len(self.tasks) == 1:
            return results[self.tasks[0]][0], dict(results[self.tasks[0]][1])
        statuses = [results[t][0] for t in self.tasks]
        status = next((s for s in statuses if s != "ok"), "ok")
        metrics = dict(results[self.tasks[0]][1])
        per_task = {t: float(results[t][1].get("accuracy", 0.0)) for t in self.tasks}
        metrics["accuracy"] = sum(per_task.values()) / len(per_task)
        metrics["per_task_accuracy"] = per_task
        return status, metrics

    # -- credit, survivors, archive -------------------------------------------------------
    def _credit(self, children: list[Candidate]) -> None:
        for ind in children:
            if ind.op is None or not ind.parents or ind.context is None:
                continue
            success = outcome(
                ind.fitness.values,
                [p.fitness.values for p in ind.parents],
                self.weights,
                ok=ind.status == "ok",
            )
            self.policy.record(ind.op, ind.context, success)

    def _survivors(
        self, parents: list[Candidate], children: list[Candidate], full: set[int]
    ) -> list[Candidate]:
        k = self.config.population
        low = [c for c in children if id(c) not in full]
        chosen = self.strategy.survivors(parents, [c for c in children if id(c) in full], k)
        if len(chosen) < k and low:  # fill with low-fidelity children only when short
            assign_rank_and_crowding(low)
            chosen += sorted(low, key=lambda i: (i.rank, -i.fitness.crowding_dist))[: k - len(chosen)]
            assign_rank_and_crowding(chosen)
        return chosen

    def _archive_update(self, children: list[Candidate]) -> tuple[list[ArchiveIn], list[str]]:
        before = set(self.archive)
        for c in children:
            if c.status == "ok" and c.fidelity == self._full_fidelity():
                self.archive.setdefault(c.genome.id, (c.genome, dict(c.metrics)))
        ranked = sorted(
            self.archive.items(),
            key=lambda kv: (-float(kv[1][1].get("accuracy", 0.0)), float(kv[1][1].get("params", 0.0)), kv[0]),
        )
        self.archive = dict(ranked[: self.config.archive_size])
        added = [ArchiveIn(gid, self.archive[gid][1]) for gid in self.archive if gid not in before]
        removed = sorted(before - set(self.archive))
        return added, removed

    def _full_fidelity(self) -> int:
        return 200 if self.config.space == "nb201" else self.config.steps

    def _inherit(self, source_run: str) -> None:
        if self.store.get_run(source_run) is None:
            raise KeyError(f"no run {source_run!r} to take memory from")
        self.policy.inherit(self.store.policy(source_run))
        for a in self.store.archive(source_run):
            try:
                genome = self.space.parse(a.yaml)
            except (ValueError, KeyError) as e:  # another space's elites do not fit here
                raise ValueError(
                    f"run {source_run}'s elites are not {self.space.name} genomes: {e}"
                ) from None
            if self.space.violation(genome) is None:
                self._elites.append(genome)

    # -- store ----------------------------------------------------------------------------
    def _commit(self, generation: int, children: list[Candidate], population: list[Candidate]) -> None:
        genomes = {
            c.genome.id: GenomeIn(c.genome.id, c.genome.to_yaml(), c.genome.sequence_view()) for c in children
        }
        individuals = [
            IndividualIn(slot, c.genome.id, c.seed, c.op, c.change) for slot, c in enumerate(children)
        ]
        evaluations = []
        for slot, c in enumerate(children):
            for r in c.results:
                evaluations.append(
                    EvaluationIn(
                        r.genome_id,
                        r.task,
                        r.fidelity,
                        r.seed,
                        r.status,
                        {**r.metrics, **self.space.cost_metrics(c.genome)},
                        r.reason,
                        r.wall_seconds,
                        by_slot(slot),
                    )
                )
            evaluations += [
                EvaluationIn(
                    e.genome_id,
                    e.task,
                    e.fidelity,
                    e.seed,
                    e.status,
                    e.metrics,
                    e.reason,
                    e.wall_seconds,
                    by_slot(slot),
                )
                for e in c.cached_rows
            ]
        lineage = [
            LineageIn(slot, by_id(pid), c.op, c.change)
            for slot, c in enumerate(children)
            for pid in c.parent_ids
        ]
        slot_of = {id(c): slot for slot, c in enumerate(children)}
        members = [by_slot(slot_of[id(p)]) if id(p) in slot_of else by_id(p.id) for p in population]
        archive, removed = self._archive_update(children)
        for gid in {a.genome_id for a in archive} - set(genomes):
            g = self.archive[gid][0]
            genomes[gid] = GenomeIn(gid, g.to_yaml(), g.sequence_view())
        ids = self.store.commit_generation(
            self.run_id,
            generation,
            genomes=list(genomes.values()),
            individuals=individuals,
            evaluations=evaluations,
            lineage=lineage,
            members=members,
            policy=self.policy.rows(),
            archive=archive,
            archive_remove=removed,
        )
        for slot, c in enumerate(children):
            c.id = ids[slot]
            c.parents = []  # credit is given: do not keep ancestors alive in memory
        # Weights of the newly born survivors, for export. Written after the generation's
        # transaction: a crash in between only costs a replay when that one is exported.
        for ind in population:
            if id(ind) in slot_of and ind.weights is not None:
                self.store.put_artifact(self.run_id, ind.id, WEIGHTS_ARTIFACT, ind.weights)
            ind.weights = None  # stored or not needed: do not hold them in memory
        for c in children:
            c.weights = None

    def _record_metrics(self, rec: Any) -> tuple[str | None, dict[str, Any], Any]:
        """The run-task evaluation of a stored individual at its highest fidelity."""
        rows = [e for e in rec.evaluations if e.task == self.config.task]
        if not rows:
            return None, {}, None
        best = max(rows, key=lambda e: (e.fidelity if isinstance(e.fidelity, int) else 0, e.id))
        return best.status, dict(best.metrics or {}), best.fidelity

    def _load_population(self) -> list[Candidate]:
        population = []
        for rec in self.store.population(self.run_id):
            ind = self.Individual(self.space.parse(rec.yaml))
            ind.id, ind.generation, ind.seed = rec.id, rec.generation, rec.seed
            ind.age = rec.generation * 1_000_000 + rec.slot
            ind.violation = self.space.violation(ind.genome)
            ind.status, ind.metrics, ind.fidelity = self._record_metrics(rec)
            ind.metrics.pop("cached_from", None)
            ind.fitness.values = self.fitness(ind)
            population.append(ind)
        assign_rank_and_crowding(population)
        return population

    def _spent_so_far(self) -> int:
        return sum(
            1
            for rec in self.store.individuals(self.run_id)
            for e in rec.evaluations
            if e.individual_id == rec.id
            and "cached_from" not in (e.metrics or {})
            and (len(self.tasks) == 1 or e.task != self.config.task)
        )


def best_of(population: list[Candidate]) -> Candidate:
    """Highest quality, then lowest costs."""
    return min(population, key=lambda i: (-i.fitness.values[0], *i.fitness.values[1:]))


__all__ = ["Engine", "GenerationReport", "RunConfig", "best_of", "derive_seed", "pareto_front"]
