"""Read queries of the store: runs, births with their genomes and evaluations, ancestry,
policy and archive, as plain records (:mod:`store.records`).

Each function takes the session of one read transaction (see :mod:`store.transactions`)
and returns records built from it, so no ORM object leaves the session. Rows a record
needs from other tables (genomes, parents, evaluations) are fetched in bulk, never one
query per birth.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dogma_evolve.store.keys import HEX, chunks, fidelity_key
from dogma_evolve.store.models import (
    Archive,
    Evaluation,
    Genome,
    Individual,
    Lineage,
    Member,
    Policy,
    Run,
    Transfer,
)
from dogma_evolve.store.records import (
    AncestryStep,
    ArchiveRecord,
    EvaluationRecord,
    IndividualRecord,
    ParentEdge,
    PolicyRecord,
    RunRecord,
    StoreError,
    TransferRecord,
)

# -- runs ------------------------------------------------------------------------------------


def run(session: Session, run_id: str) -> RunRecord | None:
    row = session.get(Run, run_id)
    return None if row is None else _run_record(row, _evaluated(session, [run_id]))


def runs(session: Session, kind: str | None = None) -> list[RunRecord]:
    """All runs (of ``kind``, if given), oldest first."""
    query = select(Run).order_by(Run.created, Run.id)
    if kind is not None:
        query = query.where(Run.kind == kind)
    rows = session.scalars(query).all()
    counts = _evaluated(session, None)
    return [_run_record(row, counts) for row in rows]


def newest_run(session: Session, kind: str | None = None) -> RunRecord | None:
    """The run (of ``kind``, if given) created last; None when there is none."""
    query = select(Run).order_by(Run.created.desc(), Run.id.desc()).limit(1)
    if kind is not None:
        query = query.where(Run.kind == kind)
    row = session.scalars(query).first()
    return None if row is None else _run_record(row, _evaluated(session, [row.id]))


def _evaluated(session: Session, run_ids: list[str] | None) -> dict[str, int]:
    """Evaluation rows per run (of ``run_ids``, or of every run); a pre-filtered birth was
    not evaluated and is not counted."""
    query = (
        select(Evaluation.run_id, func.count())
        .where(Evaluation.status != "filtered")
        .group_by(Evaluation.run_id)
    )
    if run_ids is not None:
        query = query.where(Evaluation.run_id.in_(run_ids))
    return {run_id: count for run_id, count in session.execute(query)}


def _run_record(row: Run, evaluated: dict[str, int]) -> RunRecord:
    return RunRecord(
        id=row.id,
        status=row.status,
        kind=row.kind,
        created=row.created,
        seed=row.seed,
        task=row.task,
        config=row.config,
        last_generation=row.last_generation,
        generations=row.last_generation + 1,
        evaluated=evaluated.get(row.id, 0),
        stop_reason=row.stop_reason,
        heartbeat=row.heartbeat,
        driver=row.driver,
    )


def run_ids_with_prefix(session: Session, prefix: str) -> list[str]:
    """Ids of the runs whose id starts with ``prefix`` (taken literally: no wildcards)."""
    query = select(Run.id).where(Run.id.startswith(prefix, autoescape=True)).order_by(Run.id)
    return list(session.scalars(query))


# -- evaluations and births ------------------------------------------------------------------


def find_evaluation(
    session: Session, genome_id: str, task: str, fidelity: int | str, seed: int, run_id: str | None
) -> EvaluationRecord | None:
    """The oldest stored evaluation under this key, in ``run_id`` or in any run."""
    query = select(Evaluation).where(
        Evaluation.genome_id == genome_id,
        Evaluation.task == task,
        Evaluation.fidelity == fidelity_key(fidelity),
        Evaluation.seed == seed,
    )
    if run_id is not None:
        query = query.where(Evaluation.run_id == run_id)
    row = session.scalars(query.order_by(Evaluation.id).limit(1)).first()
    return None if row is None else evaluation_record(row)


def key_evaluations(
    session: Session, genome_id: str, task: str, fidelity: int | str, seed: int
) -> list[EvaluationRecord]:
    """Every stored evaluation under this key in any run, oldest first."""
    query = select(Evaluation).where(
        Evaluation.genome_id == genome_id,
        Evaluation.task == task,
        Evaluation.fidelity == fidelity_key(fidelity),
        Evaluation.seed == seed,
    )
    return [evaluation_record(row) for row in session.scalars(query.order_by(Evaluation.id))]


def scored_genomes(
    session: Session, task: str, fidelity: int | str, limit: int
) -> list[tuple[str, str, Any]]:
    """(genome id, canonical YAML, metrics) of the newest ``limit`` successful evaluations
    of ``task`` at ``fidelity`` in any run (the surrogate's training rows), rows copied
    from another run's cache left out."""
    rows = session.execute(
        select(Evaluation.genome_id, Genome.yaml, Evaluation.metrics)
        .join(Genome, Genome.id == Evaluation.genome_id)
        .where(
            Evaluation.task == task,
            Evaluation.fidelity == fidelity_key(fidelity),
            Evaluation.status == "ok",
        )
        .order_by(Evaluation.id.desc())
        .limit(limit)
    ).all()
    return [(gid, text, metrics) for gid, text, metrics in rows if "cached_from" not in (metrics or {})]


def population(session: Session, run_id: str, generation: int | None) -> list[IndividualRecord]:
    """Members of a generation (default: the last committed one) in stored order."""
    row = session.get(Run, run_id)
    if row is None:
        raise StoreError(f"no run {run_id!r}")
    wanted = row.last_generation if generation is None else generation
    if wanted < 0:
        return []
    rows = session.scalars(
        select(Individual)
        .join(Member, Member.individual_id == Individual.id)
        .where(Member.run_id == run_id, Member.generation == wanted)
        .order_by(Member.rank)
    ).all()
    return individual_records(session, list(rows))


def individual(session: Session, individual_id: int) -> IndividualRecord | None:
    row = session.get(Individual, individual_id)
    return None if row is None else individual_records(session, [row])[0]


def individuals(session: Session, run_id: str) -> list[IndividualRecord]:
    """Every birth of a run, by generation and slot."""
    rows = session.scalars(
        select(Individual).where(Individual.run_id == run_id).order_by(Individual.generation, Individual.slot)
    ).all()
    return individual_records(session, list(rows), run_id=run_id)


def individuals_by_id(session: Session, ids: list[int]) -> list[IndividualRecord]:
    """The births with these ids (those that exist), by id."""
    rows: list[Individual] = []
    for chunk in chunks(sorted(set(ids))):
        rows += session.scalars(select(Individual).where(Individual.id.in_(chunk)))
    return individual_records(session, sorted(rows, key=lambda row: row.id))


def individuals_by_genome_prefix(session: Session, prefix: str, run_id: str | None) -> list[IndividualRecord]:
    """Births whose genome id starts with ``prefix`` (hex, as a user types it)."""
    prefix = prefix.strip().lower()
    if not HEX.fullmatch(prefix):
        raise StoreError(f"genome id prefix must be hexadecimal, not {prefix!r}")
    query = select(Individual).where(Individual.genome_id.startswith(prefix))
    if run_id is not None:
        query = query.where(Individual.run_id == run_id)
    rows = session.scalars(query.order_by(Individual.id)).all()
    return individual_records(session, list(rows))


def evaluation_record(row: Evaluation) -> EvaluationRecord:
    """The record of an evaluation row, its fidelity back as the caller gave it."""
    return EvaluationRecord(
        id=row.id,
        run_id=row.run_id,
        genome_id=row.genome_id,
        task=row.task,
        fidelity=json.loads(row.fidelity),
        seed=row.seed,
        individual_id=row.individual_id,
        status=row.status,
        reason=row.reason,
        metrics=row.metrics,
        wall_seconds=row.wall_seconds,
        created=row.created,
    )


def individual_records(
    session: Session, rows: list[Individual], run_id: str | None = None
) -> list[IndividualRecord]:
    """Records for births, with genome, parents and evaluations fetched in bulk.

    With ``run_id`` every row belongs to that run, and whole-run queries replace IN lists.
    """
    if not rows:
        return []
    genome_ids = sorted({row.genome_id for row in rows})
    run_ids = sorted({row.run_id for row in rows})
    ids = sorted({row.id for row in rows})

    genomes: dict[str, tuple[str, str]] = {}
    parents: dict[int, list[int]] = defaultdict(list)
    evaluations: dict[tuple[str, str], list[EvaluationRecord]] = defaultdict(list)
    if run_id is not None:
        genome_query = (
            select(Genome.id, Genome.yaml, Genome.sequence)
            .join(Individual, Individual.genome_id == Genome.id)
            .where(Individual.run_id == run_id)
            .distinct()
        )
        for genome_id, yaml_text, sequence in session.execute(genome_query):
            genomes[genome_id] = (yaml_text, sequence)
        child = select(Individual.id).where(Individual.run_id == run_id)
        edge_query = select(Lineage.child_id, Lineage.parent_id).where(
            Lineage.child_id.in_(child.scalar_subquery())
        )
        for child_id, parent_id in session.execute(edge_query.order_by(Lineage.id)):
            parents[child_id].append(parent_id)
        for evaluation in session.scalars(
            select(Evaluation).where(Evaluation.run_id == run_id).order_by(Evaluation.id)
        ):
            evaluations[(evaluation.run_id, evaluation.genome_id)].append(evaluation_record(evaluation))
    else:
        for genome_chunk in chunks(genome_ids):
            genome_query = select(Genome.id, Genome.yaml, Genome.sequence).where(Genome.id.in_(genome_chunk))
            for genome_id, yaml_text, sequence in session.execute(genome_query):
                genomes[genome_id] = (yaml_text, sequence)
        for id_chunk in chunks(ids):
            edge_query = select(Lineage.child_id, Lineage.parent_id).where(Lineage.child_id.in_(id_chunk))
            for child_id, parent_id in session.execute(edge_query.order_by(Lineage.id)):
                parents[child_id].append(parent_id)
        for genome_chunk in chunks(genome_ids):
            evaluation_query = select(Evaluation).where(
                Evaluation.genome_id.in_(genome_chunk), Evaluation.run_id.in_(run_ids)
            )
            for evaluation in session.scalars(evaluation_query.order_by(Evaluation.id)):
                evaluations[(evaluation.run_id, evaluation.genome_id)].append(evaluation_record(evaluation))

    tasks = {
        ident: task for ident, task in session.execute(select(Run.id, Run.task).where(Run.id.in_(run_ids)))
    }
    records = []
    for row in rows:
        yaml_text, sequence = genomes[row.genome_id]
        found = evaluations.get((row.run_id, row.genome_id), [])
        on_task = [e for e in found if e.task == tasks.get(row.run_id)]
        records.append(
            IndividualRecord(
                id=row.id,
                run_id=row.run_id,
                generation=row.generation,
                slot=row.slot,
                genome_id=row.genome_id,
                yaml=yaml_text,
                sequence=sequence,
                seed=row.seed,
                operator=row.operator,
                change=row.change,
                parents=list(parents.get(row.id, [])),
                evaluation=on_task[-1] if on_task else None,
                evaluations=list(found),
            )
        )
    return records


# -- ancestry, policy, archive ---------------------------------------------------------------


def ancestry(session: Session, individual_id: int) -> list[AncestryStep]:
    """The individual and its ancestors back to the seeds, breadth first.

    Every ancestor appears once (shared ancestors of a crossover too); a cycle in damaged
    data ends the walk instead of looping.
    """
    if session.get(Individual, individual_id) is None:
        raise StoreError(f"no individual {individual_id}")
    steps: list[AncestryStep] = []
    seen = {individual_id}
    frontier = [individual_id]
    depth = 0
    while frontier:
        births: dict[int, Individual] = {}
        edges: dict[int, list[Lineage]] = defaultdict(list)
        for chunk in chunks(frontier):
            for row in session.scalars(select(Individual).where(Individual.id.in_(chunk))):
                births[row.id] = row
            edge_query = select(Lineage).where(Lineage.child_id.in_(chunk)).order_by(Lineage.id)
            for edge in session.scalars(edge_query):
                edges[edge.child_id].append(edge)
        following: list[int] = []
        for ident in frontier:
            birth = births.get(ident)
            if birth is None:
                continue  # dangling parent id in damaged data
            steps.append(
                AncestryStep(
                    individual_id=birth.id,
                    depth=depth,
                    run_id=birth.run_id,
                    generation=birth.generation,
                    slot=birth.slot,
                    genome_id=birth.genome_id,
                    operator=birth.operator,
                    change=birth.change,
                    parents=[ParentEdge(e.parent_id, e.operator, e.change) for e in edges[ident]],
                )
            )
            for edge in edges[ident]:
                if edge.parent_id not in seen:
                    seen.add(edge.parent_id)
                    following.append(edge.parent_id)
        frontier = following
        depth += 1
    return steps


def policy(session: Session, run_id: str) -> list[PolicyRecord]:
    """The run's operator credit, by operator and context."""
    rows = session.scalars(
        select(Policy).where(Policy.run_id == run_id).order_by(Policy.operator, Policy.context)
    )
    return [PolicyRecord(r.operator, r.context, r.successes, r.trials) for r in rows]


def archive(session: Session, run_id: str) -> list[ArchiveRecord]:
    """The run's archive with each genome's YAML, in the order genomes entered it."""
    rows = session.execute(
        select(Archive, Genome)
        .join(Genome, Genome.id == Archive.genome_id)
        .where(Archive.run_id == run_id)
        .order_by(Archive.id)
    )
    return [ArchiveRecord(a.genome_id, g.yaml, g.sequence, a.metrics) for a, g in rows]


def transfer(session: Session, run_id: str) -> list[TransferRecord]:
    """The run's fidelity transfer rows, by generation (then by pair of fidelities)."""
    rows = session.scalars(
        select(Transfer).where(Transfer.run_id == run_id).order_by(Transfer.generation, Transfer.id)
    )
    return [
        TransferRecord(
            run_id=row.run_id,
            generation=row.generation,
            lower_fidelity=json.loads(row.lower_fidelity),
            higher_fidelity=json.loads(row.higher_fidelity),
            n=row.n,
            spearman=row.spearman,
            spearman_low=row.spearman_low,
            spearman_high=row.spearman_high,
            kendall=row.kendall,
            kendall_low=row.kendall_low,
            kendall_high=row.kendall_high,
            ranked_by=row.ranked_by,
        )
        for row in rows
    ]
