"""Evaluating a generation's children: cache, pool, fidelity, per-task results, fitness.

`Evaluator.evaluate(children, pool, report)` leaves every child with `status`, `metrics`,
a valid `fitness` and its `record` (`evolution.types.EvalRecord`) filled in. Two places
are the ones to change for a new notion of quality:

- `Evaluator.combine`: one task's or several tasks' results -> the candidate's status and
  metrics (several tasks: `quality` and `accuracy` are the per-task means, `per_task`
  holds each task's quality, a suite's members as `task/member`);
- `rules.fitness` (`Evaluator.fitness` applies it): status and metrics -> the fitness tuple
  (quality first, then one cost per further objective, each read from the metrics as
  `evolution.objectives` says). Quality is `metrics["quality"]` (normalised accuracy, or the
  suite's mean of it), else `metrics["accuracy"]` (a table space's own score).

The fitness, fidelity, promotion, seed and cache rules are the plain functions of
`evolution.rules` (the readers call them without an evaluator); the methods here apply them
with the run's config.

Training budget (`RunConfig.budget`): "steps" trains every candidate `steps` steps;
"flops" trains each for the same compute, `steps` steps of a dense model of half the
parameter budget (flops_per_token = max_params), so its fidelity is its own step count
(`evaluation.budget.steps_for_flops`, at most FLOPS_STEPS_CAP x steps).

Seed policy (explicit, `RunConfig.seed_policy`):
- "genome" (default): the training seed of an evaluation is derived from (genome id,
  task) alone, so the same genome on the same task and fidelity has the same natural key
  in every run, and a result stored by any run is reused (a cache hit, not an
  evaluation; the row is copied into this run with `metrics["cached_from"]`).
- "run": derived from (run seed, genome id): every run re-trains its genomes under its
  own seeds (independent noise per run; only same-run reuse).

Precision (`RunConfig.precision`) is not part of the natural key: it is resolved for the
pool (`evaluation.precision.pool_precision`: auto is bf16 when the pool trains on CUDA),
sent with every request and recorded in each result's `metrics["precision"]` (absent:
fp32). A row of another run is reused only when it was trained in the run's precision (the
oldest row of the key decides; otherwise the key is trained again); rows of the run itself
are always its own.

Pre-filter: a child that breaks no hard constraint but that the space's
`SearchSpace.prefilter` gives a reason for (it cannot beat chance by construction, e.g. a
DOGMA genome without an expressed sequence mixer) is `filtered`: never sent to the pool,
not counted in `spent`, the failed fitness, and one stored row on the run's task at the
full fidelity with the space's cost metrics and the reason (`filtered_row`). A filtered
row is never a cache answer (`_lookup`, `rules.cache_answer`): whether a genome is filtered is decided anew by
the pre-filter of each run. `filtered` is no failure of a training (no training ran):
`report.filtered` counts it, `report.failed` does not.

Multi-fidelity (`min_steps` below `steps`, where the space supports it): children are
trained at `min_steps` first (scaled like the full stage under a flops budget); the best
`promote` fraction of the first stage is trained at the full fidelity: under one objective
the lowest held-out loss (`promote_by` "loss", the default; "quality": quality order,
`selection.quality_key`), under several NSGA-II order on the first-stage fitness. Every
evaluation row records its fidelity; a child's `record.final` says whether its metrics are
final.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.evaluation.environment import EnvironmentFailure, is_environment
from dogma_evolve.evaluation.precision import pool_precision
from dogma_evolve.evaluation.protocol import Pool
from dogma_evolve.evolution import rules
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import objective_value, quality_of  # also read from here
from dogma_evolve.evolution.rules import (  # the rules, also read from here
    FAILED_COST,
    FAILED_QUALITY,
    FILTERED,
    FLOPS_STEPS_CAP,
    NICHE_SHARE,
    seeds_of,
    stored_result,
    with_niches,
)
from dogma_evolve.evolution.selection import best_of
from dogma_evolve.evolution.spaces.contract import SearchSpace
from dogma_evolve.evolution.strategies import below_floor
from dogma_evolve.evolution.types import Candidate, Event, GenerationReport, TaskResult
from dogma_evolve.store import EvaluationIn, Store
from dogma_evolve.store.keys import EvalKey, natural_key  # the natural key, built in one place


class Evaluator:
    """Evaluates children for one run and counts the real evaluations it made (`spent`).

    `history` lists every successfully evaluated child in order, with the run's
    evaluation count when its result was known (for budget-indexed benchmarks).
    """

    def __init__(
        self, config: RunConfig, space: SearchSpace, store: Store, run_id: str, on_event: Event
    ) -> None:
        self.config, self.space, self.store, self.run_id = config, space, store, run_id
        self.tasks = config.tasks
        self.on_event = on_event
        self.full_fidelity = space.full_fidelity(config.steps)
        self.spent = 0
        self._flops_task = rules.budget_task(config.budget, self.tasks[0], config.task_code)
        self.history: list[tuple[int, Candidate]] = []

    # -- seeds, fitness -------------------------------------------------------------------
    def seed_for(self, genome_id: str, task: str, repeat: int = 0) -> int:
        """The training seed of an evaluation; `repeat` > 0 names a further seed of a
        survivor (`RunConfig.repeats`): `rules.training_seed` under the run's seed policy."""
        cfg = self.config
        return rules.training_seed(cfg.seed_policy, cfg.seed, cfg.task, genome_id, task, repeat)

    def repeat(self, survivors: Sequence[Candidate], pool: Pool | None, report: GenerationReport) -> None:
        """Evaluate each surviving child of this generation under `repeats - 1` further seeds
        (as far as the evaluation budget allows) and make its quality the mean over seeds:
        selection then acts on the mean where one training run's noise would mislead it."""
        extra = self.config.repeats - 1
        todo = [c for c in survivors if c.id is None and c.status == "ok" and c.record.final]
        if extra < 1 or not todo:
            return
        if self.config.max_evaluations is not None:
            left = self.config.max_evaluations - self.spent
            todo = todo[: max(0, left // (extra * len(self.tasks)))]
        self._more_seeds([(c, range(1, extra + 1)) for c in todo], pool, report)

    def confirm(self, population: Sequence[Candidate], pool: Pool | None, report: GenerationReport) -> None:
        """Confirm the population's best (`RunConfig.confirm` seeds, a race): while the best of
        the candidates evaluated in full (`selection.best_of`'s order) holds fewer than
        `confirm` seeds, train it under the missing ones (`seed_for`'s repeats, so a retry
        or a resume trains the same keys) and make its quality the mean; stop once the best
        is confirmed, the budget is spent or every candidate was tried. One lucky draw then
        never stays the incumbent that local search breeds from, nor the run's best
        (`study.stored_run.StoredRun.best`). Each seed counts as an evaluation."""
        need = self.config.confirm
        tried: set[int] = set()
        while need > 1:
            full = [c for c in population if c.status == "ok" and c.record.final and not c.violation]
            if not full:
                return
            top = best_of(full)
            have = seeds_of(top.metrics)
            if have >= need or id(top) in tried:
                return
            extra = (need - have) * len(self.tasks)
            if self.config.max_evaluations is not None and self.config.max_evaluations - self.spent < extra:
                return
            tried.add(id(top))
            self._more_seeds([(top, range(have, need))], pool, report)

    def _more_seeds(
        self, todo: Sequence[tuple[Candidate, range]], pool: Pool | None, report: GenerationReport
    ) -> None:
        """Train each candidate at its full fidelity under its further seeds (the repeat
        indices given, `seed_for`; a key the store holds is a cache hit, as in `evaluate`),
        then make its quality the mean over all its seeds (``quality_seeds``) and its
        fitness follow. A child keeps the rows in `record.results` / `record.cached_rows`; a
        member committed before, in `record.confirmations` (its generation's commit)."""
        precision = pool_precision(self.config.precision, pool)
        pending: dict[EvalKey, list[Candidate]] = {}
        owner: dict[EvalKey, tuple[int, int]] = {}  # key -> (index in todo, repeat)
        per_repeat: dict[tuple[int, int], dict[str, TaskResult]] = {}
        for n, (c, repeats) in enumerate(todo):
            full = self.fidelity_for(c, final=True)
            for r in repeats:
                for task in self.tasks:
                    key = EvalKey(c.genome.id, task, full, self.seed_for(c.genome.id, task, r))
                    rec, here = self._lookup(key, precision)
                    if rec is None:
                        pending[key], owner[key] = [c], (n, r)
                        continue
                    report.hits += 1
                    metrics = {k: v for k, v in rec.metrics.items() if k != "cached_from"}
                    per_repeat.setdefault((n, r), {})[task] = TaskResult(rec.status, metrics)
                    if not here:  # reused from another run: copy the row, marked
                        row = EvaluationIn(
                            *key, rec.status, {**metrics, "cached_from": rec.id}, rec.reason, 0.0
                        )
                        (c.record.cached_rows if c.id is None else c.record.confirmations).append(row)
        by_key = self._request(pending, False, pool)
        for key, (c,) in pending.items():
            result = by_key[key]
            self.spent += 1
            report.requests += 1
            if c.id is None:
                c.record.results.append(result)
            else:  # its row now, as the engine writes a child's at the commit
                c.record.confirmations.append(self.stored_row(result, c))
            per_repeat.setdefault(owner[key], {})[key.task] = TaskResult(result.status, dict(result.metrics))
        seeds = [list(c.metrics.get("quality_seeds") or [quality_of(c.metrics)]) for c, _ in todo]
        for (n, _), per_task in sorted(per_repeat.items()):
            status, metrics = self.combine(per_task)
            if status == "ok":
                seeds[n].append(quality_of(metrics))
        for (c, _), qualities in zip(todo, seeds, strict=True):
            c.metrics["quality_seeds"] = qualities
            c.metrics["quality"] = sum(qualities) / len(qualities)
            c.fitness.values = self.fitness(c)

    def stored_row(self, result: EvalResult, c: Candidate, individual: Any = None) -> EvaluationIn:
        """The store's row of ``result``, a training of candidate ``c``: its metrics with the
        space's cost metrics of the genome added; ``individual``: the birth it belongs to."""
        metrics = {**result.metrics, **self.space.cost_metrics(c.genome)}
        return EvaluationIn(
            *natural_key(result),
            result.status,
            metrics,
            result.reason,
            result.wall_seconds,
            individual,
        )

    def fitness(self, ind: Candidate) -> tuple[float, ...]:
        """(quality, cost, ...) of an evaluated candidate (`rules.fitness` under the run's
        objectives and quality floor)."""
        cfg = self.config
        return rules.fitness(ind.status, ind.metrics, ind.violation, cfg.objectives, cfg.quality_floor)

    def fidelity_for(self, ind: Candidate, final: bool) -> int:
        """Training steps of `ind` at the full stage (`final`) or the first one
        (`rules.fidelity` under the run's budget)."""
        cfg = self.config
        return rules.fidelity(
            self.space,
            ind.genome,
            final,
            steps=cfg.steps,
            first_fidelity=cfg.first_fidelity,
            max_params=cfg.max_params,
            flops_task=self._flops_task,
        )

    def combine(self, per_task: dict[str, TaskResult]) -> TaskResult:
        """The candidate's status and metrics from its per-task results (all of the run's
        tasks): the first failure's status, the first task's metrics; with several tasks
        `quality` and `accuracy` are the per-task means, `per_task` holds each task's
        quality (a suite's members as `task/member`) and `per_task_accuracy` each task's
        raw accuracy."""
        first = per_task[self.tasks[0]]
        if len(self.tasks) == 1:
            return TaskResult(first.status, dict(first.metrics))
        status = next((per_task[t].status for t in self.tasks if per_task[t].status != "ok"), "ok")
        metrics = dict(first.metrics)
        accuracy = {t: float(per_task[t].metrics.get("accuracy", 0.0)) for t in self.tasks}
        quality = {t: quality_of(per_task[t].metrics) for t in self.tasks}
        members = {
            f"{t}/{m}": float(v)
            for t in self.tasks
            for m, v in per_task[t].metrics.get("per_task", {}).items()
        }
        metrics["accuracy"] = sum(accuracy.values()) / len(accuracy)
        metrics["quality"] = sum(quality.values()) / len(quality)
        metrics["per_task"] = {**quality, **members}
        metrics["per_task_accuracy"] = accuracy
        return TaskResult(status, metrics)

    # -- a generation's children ----------------------------------------------------------
    def evaluate(self, children: Sequence[Candidate], pool: Pool | None, report: GenerationReport) -> None:
        """Evaluate every child that breaks no hard constraint and passes the space's
        pre-filter (multi-fidelity when configured); a child that breaks one is `invalid`,
        one the pre-filter stops is `filtered` (`filter_out`); neither is trained."""
        cfg = self.config
        for c in children:
            if c.violation:
                c.status, c.metrics = "invalid", {"violation": c.violation}
                c.fitness.values = self.fitness(c)
                c.record.final = True
                continue
            reason = self.space.prefilter(c.genome)
            if reason is not None:
                self.filter_out(c, reason)
                report.filtered += 1
        todo = [c for c in children if not c.fitness.valid]
        if not cfg.multi_fidelity:
            self._evaluate_at(todo, pool, report, final=True)
        else:
            self._evaluate_at(todo, pool, report, final=False)
            ok = [c for c in todo if c.status == "ok"]
            k = rules.promotions(len(ok), len(todo), cfg.promote)
            promoted = self.promoted(ok, k)
            report.promoted = len(promoted)
            for c in promoted:
                del c.fitness.values  # evaluated again, at full fidelity
            self._evaluate_at(promoted, pool, report, final=True)
        for ind in children:
            if ind.status == "ok":
                self.history.append((ind.record.spent_at, ind))
        report.failed += sum(c.status not in ("ok", FILTERED, None) for c in children)

    def promoted(self, ok: Sequence[Candidate], k: int) -> list[Candidate]:
        """The `k` first-stage candidates to train in full (`rules.promoted` under the run's
        `promote_by`, its number of tasks and the space's niches)."""
        return rules.promoted(
            ok, k, promote_by=self.config.promote_by, tasks=len(self.tasks), niche=self.space.niche
        )

    def filter_out(self, ind: Candidate, reason: str) -> None:
        """Mark `ind` `filtered` for `reason`: metrics are the space's cost metrics alone,
        the failed fitness, final (it is never trained), and its one row to store."""
        ind.status, ind.metrics = FILTERED, dict(self.space.cost_metrics(ind.genome))
        ind.fitness.values = self.fitness(ind)
        ind.record.final = True
        ind.record.fidelity = self.fidelity_for(ind, final=True)
        ind.record.spent_at = self.spent
        ind.record.cached_rows.append(
            EvaluationIn(
                ind.genome.id,
                self.config.task,
                ind.record.fidelity,
                ind.seed,
                FILTERED,
                dict(ind.metrics),
                reason,
                0.0,
            )
        )

    def _lookup(self, key: EvalKey, precision: str) -> tuple[Any, bool]:
        """A stored result for the key: (record, stored_in_this_run) or (None, False)
        (`rules.cache_answer`: one of another run only when `rules.reusable` under
        `precision` and the run's pinned plugins; a `filtered` row never)."""
        return rules.cache_answer(self.store, key, self.run_id, precision, self.config.plugins)

    def _evaluate_at(
        self,
        children: Sequence[Candidate],
        pool: Pool | None,
        report: GenerationReport,
        final: bool,
    ) -> None:
        """One stage (the full one when `final`): every task of every child at its
        fidelity (`fidelity_for`), from the cache or the pool."""
        pending: dict[EvalKey, list[Candidate]] = {}
        precision = pool_precision(self.config.precision, pool)
        for ind in children:
            fidelity = self.fidelity_for(ind, final)
            ind.record.begin(fidelity)
            for task in self.tasks:
                key = EvalKey(ind.genome.id, task, fidelity, self.seed_for(ind.genome.id, task))
                if key in pending:
                    pending[key].append(ind)
                    continue
                rec, here = self._lookup(key, precision)
                ind.record.spent_at = self.spent
                if rec is None:
                    pending[key] = [ind]
                    ind.record.requested = True
                    continue
                report.hits += 1
                metrics = {k: v for k, v in rec.metrics.items() if k != "cached_from"}
                ind.record.per_task[task] = TaskResult(rec.status, metrics)
                if not here:  # reused from another run: copy the row, marked
                    ind.record.cached_rows.append(
                        EvaluationIn(*key, rec.status, {**metrics, "cached_from": rec.id}, rec.reason, 0.0)
                    )
        by_key = self._request(pending, final, pool)
        for key, inds in pending.items():
            result = by_key[key]
            self.spent += 1
            report.requests += 1
            inds[0].record.results.append(result)  # the one evaluation row; copies reuse it
            if result.weights is not None:
                inds[0].record.weights = result.weights
            for ind in inds:
                ind.record.spent_at = self.spent
                ind.record.per_task[key.task] = TaskResult(result.status, dict(result.metrics))
        for ind in children:
            if ind.record.requested:
                report.evaluated += 1
            else:
                report.cached += 1
            status, metrics = self.combine(ind.record.per_task)
            ind.status, ind.metrics = status, metrics
            ind.metrics.update(self.space.cost_metrics(ind.genome))
            ind.fitness.values = self.fitness(ind)
            ind.record.final = final
            if len(self.tasks) > 1:  # the run's own row: the per-task mean
                ind.record.cached_rows.append(
                    EvaluationIn(
                        ind.genome.id,
                        self.config.task,
                        self.fidelity_for(ind, final),
                        ind.seed,
                        status,
                        metrics,
                        None if status == "ok" else "a task failed",
                        0.0,
                    )
                )

    def _request(
        self, pending: dict[EvalKey, list[Candidate]], final: bool, pool: Pool | None
    ) -> dict[EvalKey, EvalResult]:
        """Evaluate the keys nothing stored answers, on the pool; results by key. A result
        that failed for its environment on every attempt (`evaluation.environment`) is no
        evidence about its genome: `EnvironmentFailure` is raised at once, before anything
        of the generation is committed, and the run stops resumable."""
        if not pending:
            return {}
        if pool is None:
            raise RuntimeError("the engine has no pool: pass one, or set `engine.pool` before run()")
        requests = [
            EvalRequest(
                genome_yaml=inds[0].genome.to_yaml(),
                genome_id=key.genome_id,
                task=key.task,
                fidelity=key.fidelity,
                seed=key.seed,
                timeout_s=self.config.timeout_s,
                return_weights=final and self.space.keeps_weights and key.task == self.tasks[0],
                precision=pool_precision(self.config.precision, pool),
                plugins=self.config.plugins,
            )
            for key, inds in pending.items()
        ]
        if final:  # a full stage waits for its slowest: longest first stage first (results by key)
            seconds = [float(inds[0].metrics.get("train_seconds") or 0.0) for inds in pending.values()]
            requests = [r for _, r in sorted(zip(seconds, requests, strict=True), key=lambda p: -p[0])]
        done = 0

        def on_result(result: EvalResult) -> None:
            nonlocal done
            if is_environment(result):  # stop now: the pool cancels what is in flight
                raise EnvironmentFailure(result)
            done += 1
            self.on_event("result", {"done": done, "total": len(requests), "result": result})

        results = pool.evaluate(requests, on_result=on_result)
        for result in results:  # a pool that does not call on_result for every result
            if is_environment(result):
                raise EnvironmentFailure(result)
        return {natural_key(r): r for r in results}

    # -- resume ---------------------------------------------------------------------------
    def count_spent(self) -> int:
        """Real evaluations the run's stored individuals hold (for resume):
        `rules.evaluations_spent`."""
        return rules.evaluations_spent(self.store, self.run_id, self.config.task, len(self.tasks))


__all__ = [
    "FAILED_COST",
    "FAILED_QUALITY",
    "FILTERED",
    "FLOPS_STEPS_CAP",
    "NICHE_SHARE",
    "EvalKey",
    "Evaluator",
    "below_floor",
    "objective_value",
    "quality_of",
    "seeds_of",
    "stored_result",
    "with_niches",
]
