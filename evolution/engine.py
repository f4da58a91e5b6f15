"""The evolutionary loop: seed, evaluate, select, vary, commit — one generation at a time.

The driver is the only writer. Generation g is computed from the population committed at
g-1 and a random stream derived from (run seed, g), and committed in one transaction
(births, evaluations, lineage, members, operator credit, elite archive), so a run killed
at any point resumes from its last committed generation (`Engine.resume`).

One loop for every search space and every strategy. The engine names neither: the space
is `SPACES[config.space]` (`evolution.spaces.dogma.space`, protocol `evolution.spaces.contract.SearchSpace`:
DOGMA genomes, NAS-Bench-201 cells), the strategy `make_strategy(config.strategy)`
(`evolution.strategies`: nsga2, aging, local, random; `regularized` is aging's old name,
kept for stored runs), which selects on the run's objectives (quality alone by default:
`evolution.selection.quality_key`; NSGA-II with several). The pool is anything that follows
`evaluation.protocol.Pool` (Ray's `EvaluationPool`, the in-process pools of
`evaluation.table`). Evaluating children (cache, fidelity, per-task results, fitness)
is `evolution.evaluating.Evaluator`'s job (a child the space's pre-filter stops is stored
`filtered`, never trained); survivors are drawn from the children whose evaluation is final
(full fidelity) first, and operator credit only from final outcomes (`_credit`).

Phenotype identity: every genome the engine births (generation-0 seeds, bred children,
immigrants and random samples) is put in the space's canonical form
(`SearchSpace.canonical`) before the "seen in this run" check, so two spellings of one
model (DOGMA: renamed region labels, a no-op promoter) share one id, are born once and
trained once. Genomes read back from the store (resume, `--memory-from` elites) are NOT
re-spelled: a stored genome keeps its stored id; their canonical ids only join `seen`, so
no canonical twin of a stored genome is born again.

Liveness (`store.liveness`): the engine holds its run while it exists. Creating a run claims
it in the same transaction, resuming claims it (a run whose driver is alive is refused:
`RunHeld`); `run` beats from a daemon thread (`self.liveness`, a `Heartbeat`) and releases
the run when it returns or raises; each generation's commit is fenced by the driver token,
so a driver that lost its claim commits nothing. Every refusal (`--memory-from` a run of
another space) comes before `create_run`: a refused run leaves no row behind.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

from dogma_evolve.evaluation.protocol import Pool
from dogma_evolve.evaluation.tasks import derive_seed  # the one seed derivation: tasks' data streams too
from dogma_evolve.evaluation.transfer import spearman
from dogma_evolve.evolution import assisted
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.evaluating import quality_of, stored_result
from dogma_evolve.evolution.policy import OperatorPolicy, outcome
from dogma_evolve.evolution.selection import assign_rank_and_crowding, best_of, pareto_front
from dogma_evolve.evolution.spaces.contract import Discard, Genotype, SearchSpace
from dogma_evolve.evolution.strategies import make_strategy
from dogma_evolve.evolution.study.stored_run import StoredRun
from dogma_evolve.evolution.transfer_audit import TransferAudit
from dogma_evolve.evolution.types import Candidate, Event, GenerationReport, individual_class
from dogma_evolve.store import (
    WEIGHTS_ARTIFACT,
    ArchiveIn,
    EvaluationIn,
    GenomeIn,
    IndividualIn,
    IndividualRecord,
    LineageIn,
    Ref,
    Store,
    TransferIn,
    by_id,
    by_slot,
)
from dogma_evolve.store.liveness import Heartbeat, driver_token

Birth = tuple[Genotype, str | None, dict[str, Any] | None, list[Candidate]]  # genome, op, change, mates
STALL_LIMIT = 5  # generations in a row without a birth: the space has nothing new left
# Breeding stops once this many draws in a row gave no new valid child: the parents'
# unseen neighbourhood is used up. Around a near-budget DOGMA incumbent only ~100-150 such
# neighbours exist, so breeding the surrogate's 10 x 32 children ran to the bound of 20
# draws per child (6,400 draws, a minute or more of CPU a generation) for the last few of
# them; 200 in a row stops after ~1,500 draws with 95 % of them found. A NAS-Bench-201
# cell's 24 neighbours are all found first (a miss after 200 draws: (23/24)^200 = 2e-4).
EXHAUSTED_AFTER = 200


class Engine:
    """Runs one search against a store and an evaluation pool.

    `pool` follows `evaluation.protocol.Pool`; it may be set after construction
    (`engine.pool = ...`, before `run`), since choosing one can need the engine's space.
    `on_event(kind, data)` receives progress: "generation", "result", "committed".
    """

    def __init__(
        self,
        config: RunConfig,
        store: Store,
        pool: Pool | None,
        run_id: str | None = None,
        on_event: Event | None = None,
    ):
        """A new run of ``config``, created and held by this engine (every refusal first:
        `StoredRun.create`); with ``run_id``, that stored run run on with ``config``, claimed
        (`RunHeld` while another driver is alive). `Engine.bind` binds to a `StoredRun`
        already open, `Engine.resume` opens one."""
        driver = driver_token()
        if run_id is None:
            stored = StoredRun.create(store, config, driver=driver)
        else:
            stored = StoredRun(store, run_id, config, config.to_dict(), "search")
        self._attach(stored, pool, on_event, driver, claim=run_id is not None)

    @classmethod
    def bind(cls, stored: StoredRun, pool: Pool | None, on_event: Event | None = None) -> Engine:
        """The engine of ``stored``, a search opened once (`StoredRun.open` or `create`): its
        config (`StoredRun.config`: `run_on`'s), space and evaluator become the engine's; its
        user tasks and block kinds imported with the code they were pinned to; claimed by
        this driver and marked running. Refused: a run that is no search (`KeyError`), code
        that cannot be imported or changed since it was pinned (`TaskCodeError`,
        `PluginError`: `ValueError`s), a run another live driver holds (`RunHeld`)."""
        stored.require_search()
        # a user's task and block kinds run with the code they were pinned to, or not at all
        stored.import_code(f"resuming run {stored.run_id}")
        engine = cls.__new__(cls)
        engine._attach(stored, pool, on_event, driver_token(), claim=True)  # RunHeld
        stored.store.set_run_status(stored.run_id, "running")
        return engine

    def _attach(
        self, stored: StoredRun, pool: Pool | None, on_event: Event | None, driver: str, claim: bool
    ) -> None:
        config = stored.config
        self.stored, self.config, self.store, self.pool = stored, config, stored.store, pool
        self.run_id = stored.run_id
        self.tasks = config.tasks
        self.space: SearchSpace = stored.space
        self.strategy = make_strategy(
            config.strategy, config.sample_size, config.quality_floor, config.parents
        )
        self.Individual = individual_class(len(config.objectives))
        self.on_event: Event = on_event or (lambda kind, data: None)
        self.evaluator = stored.evaluator  # the run's: this engine's events, a fresh count
        self.evaluator.on_event, self.evaluator.spent, self.evaluator.history = self.on_event, 0, []
        self.transfer = TransferAudit.of(config, self.space)  # None: a single-fidelity run
        self.reports: list[GenerationReport] = []
        self._predicted: list[float | None] = []  # the surrogate's predictions for the next births
        self.policy = OperatorPolicy(
            self.space.operators + (self.space.crossover_op,), floor=config.policy_floor
        )
        # genome id -> (genome, metrics) of the best full-fidelity genomes seen
        self.archive: dict[str, tuple[Genotype, dict[str, Any]]] = {}
        self._elites: list[Genotype] = []
        self.seen: set[str] = set()  # genome ids born in this run: children must be new
        self.stop_reason: str | None = None  # why `run` ended
        self.liveness = Heartbeat(self.store, self.run_id, driver)  # `with engine.liveness:` holds the run
        if claim:
            self.liveness.claim()  # RunHeld while another driver of the run is alive
        if config.memory_from and (not claim or self._committed() < 0):
            credit, self._elites = stored.memory()  # taken before generation 0 only
            self.policy.inherit(credit)

    def _committed(self) -> int:
        """The run's last committed generation (-1: none)."""
        record = self.store.get_run(self.run_id)
        return record.last_generation if record is not None else -1

    @property
    def spent(self) -> int:
        """Real evaluations of this run (cache hits are free)."""
        return self.evaluator.spent

    @property
    def history(self) -> list[tuple[int, Candidate]]:
        """(evaluations so far, child) for every successfully evaluated child, in order."""
        return self.evaluator.history

    # -- public ---------------------------------------------------------------------------
    def run(self) -> list[Candidate]:
        """Run (or continue) to the configured generations or budget; return the population.

        Holds the run (heartbeat) while it works and releases it at the end, also when it
        raises; an interrupted run stays `running` and is shown `interrupted` (`--resume`)."""
        with self.liveness:
            return self._run()

    def _run(self) -> list[Candidate]:
        record = self.store.get_run(self.run_id)
        start = record.last_generation + 1 if record else 0
        population: list[Candidate] = []
        if start > 0:
            population = self._load_population()
            births = self.store.individuals(self.run_id)
            self.seen = {rec.genome_id for rec in births}
            self.seen |= self._canonical_ids({rec.genome_id: rec.yaml for rec in births})
            if self.transfer is not None:
                self.transfer.load(births)
            self.policy.inherit(self.store.policy(self.run_id), cap=float("inf"))
            self.policy.changed = set()
            for a in self.store.archive(self.run_id):
                self.archive[a.genome_id] = (self.space.parse(a.yaml), dict(a.metrics))
            self.evaluator.spent = self.evaluator.count_spent()
        stalled, generation = 0, start
        while True:
            if generation > self.config.offspring_generations:
                self.stop_reason = f"{generation - 1} offspring generations done"
            elif self._budget_left() <= 0:
                self.stop_reason = f"evaluation budget of {self.config.max_evaluations} spent"
            elif stalled >= STALL_LIMIT:
                self.stop_reason = f"no unseen genome in {STALL_LIMIT} generations: the space is exhausted"
            else:
                population = self._generation(generation, population)
                stalled = stalled + 1 if self.reports[-1].births == 0 else 0
                generation += 1
                continue
            break
        self.store.set_run_status(self.run_id, "finished", self.stop_reason)
        return population

    @classmethod
    def resume(
        cls, run_id: str, store: Store, pool: Pool | None, on_event: Event | None = None, **overrides: Any
    ) -> Engine:
        """The engine of stored run ``run_id``, its config updated by ``overrides`` (how far and
        where it runs), claimed by this driver (`RunHeld` while another is alive). Refused: an
        unknown run or one that is no search (`KeyError`), a user task whose code cannot be
        imported or changed since it was pinned (`TaskCodeError`, a `ValueError`)."""
        stored = StoredRun.open(store, run_id, search=True, **overrides)  # KeyError: none, or no search
        return cls.bind(stored, pool, on_event=on_event)

    def _canonical_ids(self, stored: dict[str, str]) -> set[str]:
        """The canonical ids of stored genomes ({id: yaml}) that are not canonical: a stored
        genome keeps its id, but its canonical twin counts as seen."""
        out = set()
        for gid, text in stored.items():
            cid = self.space.canonical(self.space.parse(text)).id
            if cid != gid:
                out.add(cid)
        return out

    def _budget_left(self) -> float:
        if self.config.max_evaluations is None:
            return math.inf
        return self.config.max_evaluations - self.spent

    def _new(self, genome: Genotype, generation: int, slot: int) -> Candidate:
        ind = self.Individual(genome)
        ind.generation, ind.seed = generation, self.evaluator.seed_for(genome.id, self.config.task)
        ind.age = generation * 1_000_000 + slot
        ind.record.slot = slot
        ind.violation = self.space.violation(genome)
        return ind

    # -- one generation -------------------------------------------------------------------
    def _generation(self, generation: int, parents: list[Candidate]) -> list[Candidate]:
        rng = random.Random(derive_seed(self.config.seed, "generation", generation))
        report = GenerationReport(generation, 0, 0, 0)
        budget = self._budget_left()
        births: list[Birth]
        if generation == 0:
            first = self.config.initial_population or self.config.population  # survivors: population
            size = int(min(first, budget))
            births = [(g, None, None, []) for g in self._seeds(size, rng)]
        else:
            n = int(min(self.config.children, budget))
            births = self._offspring(parents, rng, report, n)
        predicted = self._predicted
        self._predicted = []
        children = []
        for slot, (genome, op, change, mates) in enumerate(births):
            self.seen.add(genome.id)
            ind = self._new(genome, generation, slot)
            ind.op, ind.change, ind.parents = op, change, mates
            ind.parent_ids = [m.stored_id for m in mates]
            if op is not None and mates:
                ind.context = f"{self.config.task}/{self.space.context(mates[0].genome, change)}"
            ind.predicted = predicted[slot] if slot < len(predicted) else None
            children.append(ind)
        report.births = len(children)
        self.on_event(
            "generation", {"generation": generation, "births": len(children), "discarded": report.discarded}
        )
        self.evaluator.evaluate(children, self.pool, report)
        report.surrogate_rho = self._surrogate_rho(children)
        self._credit(children)
        population = self._survivors(parents, children)
        if self.config.repeats > 1:
            self.evaluator.repeat(population, self.pool, report)
        if self.config.confirm > 1:
            self.evaluator.confirm(population, self.pool, report)
        if self.config.repeats > 1 or self.config.confirm > 1:
            assign_rank_and_crowding(population)
        self._commit(generation, children, population)
        qualities = [quality_of(i.metrics) if i.status == "ok" else 0.0 for i in population]
        report.best_quality = max(qualities, default=0.0)
        report.mean_quality = sum(qualities) / len(qualities) if qualities else 0.0
        report.families = len({self.space.family(i.genome) for i in population})
        self.reports.append(report)
        self.on_event("committed", {"generation": generation, "report": report, "population": population})
        return population

    def _seeds(self, size: int, rng: random.Random) -> list[Genotype]:
        """Generation 0: inherited elites first, then the space's initial genomes, then
        random samples, all new and within the hard constraints."""
        out: list[Genotype] = []
        seen: set[str] = set()
        for g in self._elites[:size]:  # stored genomes: kept as stored (their ids)
            if g.id not in seen:
                out.append(g)
                seen.add(g.id)
                seen.add(self.space.canonical(g).id)
        for g in self.space.initial(size, rng):
            if len(out) >= size:
                break
            g = self.space.canonical(g)
            if g.id not in seen and self.space.violation(g) is None:
                out.append(g)
                seen.add(g.id)
        tries = 0
        while len(out) < size and tries < 50 * size:
            tries += 1
            g = self.space.canonical(self.space.sample(rng))
            if g.id not in seen and self.space.violation(g) is None:
                out.append(g)
                seen.add(g.id)
        return out

    def _offspring(
        self, parents: list[Candidate], rng: random.Random, report: GenerationReport, n: int
    ) -> list[Birth]:
        """`n` new children: bred from `parents` (`config.surrogate` times as many, of which
        the surrogate picks `n`, `evolution.assisted`, its exploration share from
        `config.explore_pool` random genomes of the whole space), then immigrants (random new
        genomes) for the places breeding could not fill with unseen genomes."""
        self.strategy.prepare(parents)  # a strategy may decide from the population whether it breeds
        k = self.config.surrogate if self.strategy.breeds else 1
        births = self._breed(parents, rng, report, n * k)
        if k > 1:
            report.bred = len(births)
            space_sample = self._new_genomes(
                births, self.config.explore_pool if self.config.explore else 0, rng
            )
            chosen, self._predicted = assisted.choose(
                [b[0] for b in births],
                n,
                space=self.space,
                store=self.store,
                task=self.config.task,
                fidelity=self.evaluator.full_fidelity,
                explore=self.config.explore,
                rng=rng,
                seed=derive_seed(self.config.seed, "surrogate", report.generation),  # resume-stable
                space_sample=space_sample,
            )
            report.explorers = sum(i >= len(births) for i in chosen)
            births = [
                births[i] if i < len(births) else (space_sample[i - len(births)], None, None, [])
                for i in chosen
            ]
        added = self._sample_new(births, n, rng)
        if self.strategy.breeds:
            report.immigrants += added
        return births

    def _new_genomes(
        self, births: list[Birth], m: int, rng: random.Random, max_tries: int | None = None
    ) -> list[Genotype]:
        """Up to `m` random genomes (`space.sample`, canonical, within the hard constraints)
        new to the run and not among `births` (at most `max_tries` draws, 50 a genome)."""
        taken = {b[0].id for b in births}
        out: list[Genotype] = []
        tries, max_tries = 0, 50 * m if max_tries is None else max_tries
        while len(out) < m and tries < max_tries:
            tries += 1
            g = self.space.canonical(self.space.sample(rng))
            if self.space.violation(g) is None and g.id not in self.seen and g.id not in taken:
                taken.add(g.id)
                out.append(g)
        return out

    def _sample_new(self, births: list[Birth], n: int, rng: random.Random) -> int:
        """Append random genomes new to the run (`space.sample`) until `births` holds `n`
        (at most 50 draws a place of all `n`, as runs stored before drew); how many were added."""
        new = self._new_genomes(births, n - len(births), rng, max_tries=50 * n)
        births.extend((g, None, None, []) for g in new)
        return len(new)

    def _surrogate_rho(self, children: list[Candidate]) -> float | None:
        """How well the surrogate ranked the children it chose (Spearman), when it did."""
        pairs = [
            (c.predicted, c.fitness.values[0]) for c in children if c.predicted is not None and c.record.final
        ]
        if len(pairs) < 3:
            return None
        rho = spearman([p for p, _ in pairs], [q for _, q in pairs])
        return None if math.isnan(rho) else rho

    def _breed(
        self, parents: list[Candidate], rng: random.Random, report: GenerationReport, n: int
    ) -> list[Birth]:
        """Up to `n` new children bred from `parents` by the strategy (which `_offspring` has
        shown them, `prepare`) and the meta-policy (none for a strategy that does not breed):
        at most 20 draws a child, and none after `EXHAUSTED_AFTER` draws in a row without a
        new child; every refusal is reported."""
        births: list[Birth] = []
        attempts = fruitless = 0
        if not self.strategy.breeds:  # random search: `_offspring` samples every place
            return births
        while len(births) < n and attempts < 20 * max(n, 1) and fruitless < EXHAUSTED_AFTER:
            attempts += 1
            fruitless += 1
            (a,) = self.strategy.mates(parents, 1, rng)
            try:
                if self.strategy.crossover and rng.random() < self.config.crossover_rate and len(parents) > 1:
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
            child.genome = self.space.canonical(child.genome)
            if child.genome.id in self.seen or any(child.genome.id == b[0].id for b in births):
                report.discarded.append(f"{child.op}: child seen before in this run")
                continue
            reason = self.space.violation(child.genome)
            if reason is not None:
                report.discarded.append(f"{child.op}: child {reason}")
                continue
            fruitless = 0
            births.append((child.genome, child.op, child.change, mates))
        return births

    # -- credit, survivors, archive -------------------------------------------------------
    def _credit(self, children: list[Candidate]) -> None:
        """Operator credit: each bred child against its parents (`policy.outcome`), only
        from full-fidelity outcomes: a healthy child seen only at the first stage is compared
        with nothing (its parents' qualities are full-fidelity ones), so it earns no credit;
        one that failed to train failed at any fidelity."""
        for ind in children:
            if ind.op is None or not ind.parents or ind.context is None:
                continue
            if not ind.record.final and ind.status == "ok":
                continue
            success = outcome(ind.fitness, [p.fitness for p in ind.parents], ok=ind.status == "ok")
            self.policy.record(ind.op, ind.context, success)

    def _survivors(self, parents: list[Candidate], children: list[Candidate]) -> list[Candidate]:
        """The strategy's survivors among parents and the children evaluated in full;
        children evaluated at low fidelity only fill places left over."""
        k = self.config.population
        low = [c for c in children if not c.record.final]
        chosen = self.strategy.survivors(parents, [c for c in children if c.record.final], k)
        if len(chosen) < k and low:  # fill with low-fidelity children only when short
            assign_rank_and_crowding(low)
            chosen += sorted(low, key=lambda i: (i.rank, -i.fitness.crowding_dist))[: k - len(chosen)]
            assign_rank_and_crowding(chosen)
        return chosen

    def _archive_update(self, children: list[Candidate]) -> tuple[list[ArchiveIn], list[str]]:
        """Add the children evaluated in full, keep the best `archive_size`: (added, removed)."""
        before = set(self.archive)
        for c in children:
            if c.status == "ok" and c.record.final:
                self.archive.setdefault(c.genome.id, (c.genome, dict(c.metrics)))
        ranked = sorted(
            self.archive.items(),
            key=lambda kv: (-quality_of(kv[1][1]), float(kv[1][1].get("params", 0.0)), kv[0]),
        )
        self.archive = dict(ranked[: self.config.archive_size])
        added = [ArchiveIn(gid, self.archive[gid][1]) for gid in self.archive if gid not in before]
        removed = sorted(before - set(self.archive))
        return added, removed

    # -- store ----------------------------------------------------------------------------
    def _commit(self, generation: int, children: list[Candidate], population: list[Candidate]) -> None:
        """The generation in one transaction; then the new survivors' weights."""
        genomes = {
            c.genome.id: GenomeIn(c.genome.id, c.genome.to_yaml(), c.genome.sequence_view()) for c in children
        }
        individuals = [IndividualIn(c.record.slot, c.genome.id, c.seed, c.op, c.change) for c in children]
        evaluations = []
        for c in children:
            born = by_slot(c.record.slot)
            evaluations += [self.evaluator.stored_row(r, c, born) for r in c.record.results]
            evaluations += [replace(e, individual=born) for e in c.record.cached_rows]
        for p in population:  # a member committed before, confirmed under further seeds now
            evaluations += [
                replace(e, individual=by_id(p.id)) for e in p.record.confirmations if p.id is not None
            ]
        lineage = [
            LineageIn(c.record.slot, by_id(pid), c.op, c.change) for c in children for pid in c.parent_ids
        ]
        # a member is a child of this generation (not committed yet) or a committed parent
        members: list[Ref] = [by_slot(p.record.slot) if p.id is None else by_id(p.id) for p in population]
        archive, removed = self._archive_update(children)
        transfer: list[TransferIn] = []
        pairs: list[tuple[float, float]] = []
        if self.transfer is not None:  # fidelity transfer over the run so far, these children too
            rows: dict[Ref | None, list[EvaluationIn]] = {}
            for e in evaluations:
                rows.setdefault(e.individual, []).append(e)
            new = self.transfer.new_pairs(rows.get(by_slot(c.record.slot), []) for c in children)
            pairs = [p for p in new if p is not None]
            transfer = [self.transfer.row(self.transfer.pairs + pairs)]
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
            transfer=transfer,
            driver=self.liveness.driver,  # refused if another driver took the run over
        )
        if self.transfer is not None:
            self.transfer.pairs += pairs
        for p in population:
            p.record.confirmations = []  # stored
        for c in children:
            c.id = ids[c.record.slot]
            c.parents = []  # credit is given: do not keep ancestors alive in memory
        # Weights of the newly born survivors, for export. Written after the generation's
        # transaction: a crash in between only costs a replay when that one is exported.
        for ind in population:
            weights = ind.record.weights
            if ind.generation == generation and ind.id is not None and weights is not None:
                self.store.put_artifact(self.run_id, ind.id, WEIGHTS_ARTIFACT, weights)
            ind.record.weights = None  # stored or not needed: do not hold them in memory
        for c in children:
            c.record.weights = None

    def _stored_evaluation(
        self, rec: IndividualRecord
    ) -> tuple[str | None, dict[str, Any], int | str | None]:
        """(status, metrics, fidelity) of a stored individual's run-task evaluation at its
        highest fidelity; (None, {}, None) when it has none."""
        rows = [e for e in rec.evaluations if e.task == self.config.task]
        if not rows:
            return None, {}, None
        return stored_result(rows)

    def _load_population(self) -> list[Candidate]:
        """The last committed population, as it was when committed (for resume)."""
        population = []
        for rec in self.store.population(self.run_id):
            ind = self.Individual(self.space.parse(rec.yaml))
            ind.id, ind.generation, ind.seed = rec.id, rec.generation, rec.seed
            ind.age = rec.generation * 1_000_000 + rec.slot
            ind.record.slot = rec.slot
            ind.violation = self.space.violation(ind.genome)
            ind.status, ind.metrics, ind.record.fidelity = self._stored_evaluation(rec)
            ind.metrics.pop("cached_from", None)
            full = self.evaluator.fidelity_for(ind, final=True)
            ind.record.final = bool(ind.violation) or ind.record.fidelity == full
            ind.fitness.values = self.evaluator.fitness(ind)
            population.append(ind)
        assign_rank_and_crowding(population)
        return population


__all__ = [
    "Engine",
    "GenerationReport",
    "RunConfig",
    "best_of",
    "derive_seed",
    "pareto_front",
]
