"""What the HTML run report (`evolution.report.html`) shows, read from the store as plain data.

One bulk read of the run's births (`Store.individuals`), one read of each generation's
population (`Store.population`) and the run's policy table; everything else (fronts,
lineages, the replayed operator credit) is computed here in memory. Nothing is written.

Definitions shared with the rest of the engine are reused, not copied: an individual's
result is `rules.stored_result` of its rows on the run's task, its fitness is
`rules.fitness` (no evaluator is built), a child's credit is `policy.outcome` and the operator probabilities
are an `OperatorPolicy` fed generation by generation, as the engine fed it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dogma_evolve.evaluation.environment import is_environment_reason
from dogma_evolve.evaluation.transfer import spearman
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import quality_of
from dogma_evolve.evolution.policy import OperatorPolicy, outcome
from dogma_evolve.evolution.report.ledger import read_ledger
from dogma_evolve.evolution.report.summary import environment_failures
from dogma_evolve.evolution.rules import fitness as fitness_of
from dogma_evolve.evolution.rules import stored_result
from dogma_evolve.evolution.scale.ladder_report import ladder_summary
from dogma_evolve.evolution.study.stored_run import StoredRun
from dogma_evolve.evolution.transfer_audit import first_stage_score, ranked_by
from dogma_evolve.evolution.types import individual_class
from dogma_evolve.store import IndividualRecord, PolicyRecord, RunRecord, Store
from dogma_evolve.store.models import Member

LINEAGE_NODES = 200  # at most this many ancestors drawn per lineage (nearest generations first)
LINEAGE_MEMBERS = 16  # lineages offered in the report: the best, then front members


@dataclass
class Birth:
    """One individual of the run as the report uses it."""

    id: int
    generation: int
    sequence: str
    operator: str | None
    parents: list[int]
    status: str | None  # on the run's task at its highest fidelity; None: not evaluated
    reason: str | None
    metrics: dict[str, Any]  # of that result
    quality: float
    params: float | None
    state_bytes: float | None
    final: bool  # its metrics are full-fidelity ones (or the run is single-fidelity)
    low_high: tuple[float, float] | None  # (min_steps score, full quality) when promoted


@dataclass
class Generation:
    generation: int
    best_quality: float
    mean_quality: float
    best_per_task: dict[str, float]
    mean_per_task: dict[str, float]
    families: dict[str, int]  # design family -> members
    operators: dict[str, int]  # how this generation's births were made
    failures: dict[str, int]  # evaluation status -> failed births
    probabilities: dict[str, float]  # the meta-policy's operator probabilities after it
    credit: dict[str, tuple[float, float]]  # operator -> (successes, trials) so far
    rho: float | None  # min_steps vs full quality of the births promoted in it


@dataclass
class ReportData:
    run: RunRecord
    config: RunConfig
    births: list[Birth]
    generations: list[Generation]
    policy: list[PolicyRecord]
    best: int | None  # id of the best individual (quality, then fewer parameters)
    fronts: dict[str, list[int]]  # cost metric -> ids on the (quality ↑, cost ↓) front
    lineages: dict[int, list[Birth]] = field(default_factory=dict)  # id -> it and its ancestors
    lineage_truncated: dict[int, bool] = field(default_factory=dict)
    failure_reasons: list[tuple[str, str, int]] = field(default_factory=list)  # status, reason, n
    multi_fidelity: bool = False
    ladder: dict[str, Any] = field(default_factory=dict)  # `ladder_report.ladder_summary`
    environment: dict[str, Any] = field(default_factory=dict)  # `summary.environment_failures`
    ledger: dict[str, Any] = field(default_factory=dict)  # `ledger.read_ledger`

    @property
    def by_id(self) -> dict[int, Birth]:
        return {b.id: b for b in self.births}


def _genome_failure(birth: Birth) -> bool:
    """A failed birth whose failure is its genome's (not an environment failure's row)."""
    return birth.status not in (None, "ok") and not is_environment_reason(birth.reason)


def _float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _birth(
    record: IndividualRecord,
    task: str,
    low_fidelity: Callable[[IndividualRecord], int] | None,
    by: str = "quality",
) -> Birth:
    """`low_fidelity(record)`: the first-stage fidelity of a multi-fidelity run (None: single);
    `by`: what its first stage ranks by (`transfer_audit.ranked_by`), the pair's low side."""
    rows = [e for e in record.evaluations if e.task == task]
    status, metrics, fidelity = stored_result(rows)
    reason = next((e.reason for e in rows if e.fidelity == fidelity and e.reason), None)
    levels = sorted({e.fidelity for e in rows if isinstance(e.fidelity, int) and e.status == "ok"})
    low_high = None
    if low_fidelity is None or len(levels) >= 2:
        final = True
        if low_fidelity is not None:
            low = stored_result([e for e in rows if e.fidelity == levels[0]])[1]
            score = first_stage_score(low, by)
            low_high = None if math.isnan(score) else (score, quality_of(metrics))
    else:  # one stage only: final when it is not the first stage (a full-fidelity cache copy)
        final = bool(levels) and levels[0] != low_fidelity(record)
    return Birth(
        id=record.id,
        generation=record.generation,
        sequence=record.sequence,
        operator=record.operator,
        parents=list(record.parents),
        status=status,
        reason=reason,
        metrics=metrics,
        quality=quality_of(metrics) if status == "ok" else 0.0,
        params=_float(metrics.get("params")),
        state_bytes=_float(metrics.get("state_bytes")),
        final=final,
        low_high=low_high,
    )


def pareto_ids(points: list[tuple[int, float, float]]) -> list[int]:
    """Ids of the points (id, quality ↑, cost ↓) that no other point dominates, by cost."""
    out: list[int] = []
    best_quality = -math.inf
    for ident, quality, _ in sorted(points, key=lambda p: (p[2], -p[1], p[0])):
        if quality > best_quality:
            out.append(ident)
            best_quality = quality
    return out


def _lineage(start: int, by_id: dict[int, Birth]) -> tuple[list[Birth], bool]:
    """The individual and its ancestors, nearest first, at most LINEAGE_NODES of them."""
    seen, frontier = {start}, [start]
    order: list[Birth] = []
    while frontier and len(order) < LINEAGE_NODES:
        following = []
        for ident in frontier:
            birth = by_id.get(ident)
            if birth is None or len(order) >= LINEAGE_NODES:
                continue
            order.append(birth)
            for p in birth.parents:
                if p not in seen:
                    seen.add(p)
                    following.append(p)
        frontier = following
    return order, bool(frontier)


def population_ids(store: Store, run_id: str) -> dict[int, list[int]]:
    """generation -> the ids of its population, in rank order: one ORM query for the whole
    run (`Store.population` per generation costs seconds on a long run)."""

    def work(session: Session) -> dict[int, list[int]]:
        query = (
            select(Member.generation, Member.individual_id)
            .where(Member.run_id == run_id)
            .order_by(Member.generation, Member.rank)
        )
        out: dict[int, list[int]] = {}
        for generation, ident in session.execute(query):
            out.setdefault(generation, []).append(ident)
        return out

    return store._read(work, "report members")  # a read transaction of the store's own


def _shorten(reason: str | None) -> str:
    text = " ".join((reason or "no reason recorded").split())
    return text if len(text) <= 120 else text[:117] + "..."


def collect(store: Store, run_id: str) -> ReportData:
    """Everything the report shows of run `run_id` (KeyError when the store has no such run)."""
    run = store.get_run(run_id)
    if run is None:
        raise KeyError(f"no run {run_id!r}")
    stored = StoredRun.open(store, run_id)  # config and space, read once
    config, space = stored.config, stored.space
    cls = individual_class(len(config.objectives))
    multi_fidelity = config.multi_fidelity

    def low_fidelity(record: IndividualRecord) -> int:
        if config.budget != "flops":  # every genome's first stage is min_steps
            return int(config.first_fidelity or 0)
        return stored.fidelity(space.parse(record.yaml), final=False)

    records = store.individuals(run_id)
    by = ranked_by(config)
    births = [_birth(r, run.task, low_fidelity if multi_fidelity else None, by) for r in records]
    by_id = {b.id: b for b in births}

    # fitness and credit exactly as the engine made them (rules.fitness, policy.outcome)
    fitness: dict[int, Any] = {}
    for b in births:
        ind = cls(None)
        ind.status = b.status
        ind.metrics = b.metrics
        ind.fitness.values = fitness_of(
            ind.status, ind.metrics, ind.violation, config.objectives, config.quality_floor
        )
        fitness[b.id] = ind.fitness
    policy = OperatorPolicy(space.operators + (space.crossover_op,), floor=config.policy_floor)
    if config.memory_from and "credit" in config.memory_parts and store.get_run(config.memory_from):
        policy.inherit(store.policy(config.memory_from))

    records_by_id = {r.id: r for r in records}
    member_ids = population_ids(store, run_id)
    born_in: dict[int, list[Birth]] = {}
    for b in births:
        born_in.setdefault(b.generation, []).append(b)
    families: dict[str, str] = {}  # genome id -> its design family
    generations = []
    for g in range(run.generations):
        born = born_in.get(g, [])
        for b in born:
            mates = [fitness[p] for p in b.parents if p in fitness]
            if b.operator is not None and mates:
                policy.record(
                    b.operator, f"{config.task}/report", outcome(fitness[b.id], mates, b.status == "ok")
                )
        credit: dict[str, list[float]] = {op: [0.0, 0.0] for op in policy.operators}
        for (op, _), (s, t) in policy.credit.items():
            credit.setdefault(op, [0.0, 0.0])
            credit[op][0] += s
            credit[op][1] += t
        members = [records_by_id[i] for i in member_ids.get(g, []) if i in records_by_id]
        scored = []
        for m in members:
            b = by_id[m.id]
            scored.append((b.quality if b.status == "ok" else 0.0, b.metrics))
            if m.genome_id not in families:
                families[m.genome_id] = space.family(space.parse(m.yaml))
        best_quality, best_metrics = max(scored, key=lambda qm: qm[0], default=(0.0, {}))
        tasks = sorted({t for _, m in scored for t in (m.get("per_task") or {})})
        pairs = [b.low_high for b in born if b.low_high is not None]
        rho = spearman([p[0] for p in pairs], [p[1] for p in pairs]) if len(pairs) >= 3 else math.nan
        generations.append(
            Generation(
                generation=g,
                best_quality=best_quality,
                mean_quality=sum(q for q, _ in scored) / len(scored) if scored else 0.0,
                best_per_task={k: float(v) for k, v in (best_metrics.get("per_task") or {}).items()},
                mean_per_task={
                    t: sum(float((m.get("per_task") or {}).get(t, 0.0)) for _, m in scored) / len(scored)
                    for t in tasks
                },
                families=dict(Counter(families[m.genome_id] for m in members)),
                operators=dict(Counter(b.operator or ("seed" if g == 0 else "immigrant") for b in born)),
                failures=dict(Counter(b.status or "" for b in born if _genome_failure(b))),
                probabilities=policy.probabilities(config.task),
                credit={op: (s, t) for op, (s, t) in credit.items()},
                rho=None if math.isnan(rho) else rho,
            )
        )

    ok = [b for b in births if b.status == "ok" and b.final]
    chosen_best = stored.best()  # the rule every reader shares
    best = None if chosen_best is None else by_id.get(chosen_best.id)
    fronts = {}
    for cost in ("params", "state_bytes"):
        points = [(b.id, b.quality, getattr(b, cost)) for b in ok if getattr(b, cost) is not None]
        if points:
            fronts[cost] = pareto_ids(points)
    data = ReportData(
        run=run,
        config=config,
        births=births,
        generations=generations,
        policy=store.policy(run_id),
        best=best.id if best else None,
        fronts=fronts,
        multi_fidelity=multi_fidelity,
        ladder=ladder_summary(store, run_id),
        environment=environment_failures(store, run_id, records),
        ledger=read_ledger(stored, records),
    )
    chosen = [best.id] if best else []
    for ident in sorted({i for ids in fronts.values() for i in ids}, key=lambda i: -by_id[i].quality):
        if ident not in chosen and len(chosen) < LINEAGE_MEMBERS:
            chosen.append(ident)
    for ident in chosen:
        data.lineages[ident], data.lineage_truncated[ident] = _lineage(ident, by_id)
    reasons = Counter((b.status or "", _shorten(b.reason)) for b in births if _genome_failure(b))
    data.failure_reasons = [(s, r, n) for (s, r), n in reasons.most_common(20)]
    return data
