"""Committing one generation: validate the payload, insert it, or verify a retried one.

:func:`commit_generation` runs inside the store's write transaction with the run's row
locked, so one run's generations are committed one at a time and in order. A payload is
checked in full before any row is written (:meth:`GenerationPayload.build`); a first
commit inserts it (:meth:`GenerationPayload.insert`); a commit of a generation that is
already stored, which is a driver retrying after a lost acknowledgement, only compares it
with what is stored (:meth:`GenerationPayload.verify_stored`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import Insert, insert, select
from sqlalchemy.orm import Session

from dogma_evolve.store.keys import HEX, StoredKey, checked_ref, chunks, fidelity_key, stored_key
from dogma_evolve.store.models import (
    EVALUATION_STATUSES,
    RANKED_BY,
    Archive,
    Evaluation,
    Genome,
    Individual,
    Lineage,
    Member,
    Policy,
    Run,
    Transfer,
    canonical_json,
)
from dogma_evolve.store.records import (
    ArchiveIn,
    EvaluationIn,
    GenomeIn,
    IndividualIn,
    LineageIn,
    PolicyIn,
    Ref,
    StoreError,
    TransferIn,
)


def commit_generation(
    session: Session, run_id: str, generation: int, payload: GenerationPayload
) -> dict[int, int]:
    """Store ``payload`` as generation ``generation`` of the run; return slot → id.

    See :meth:`store.Store.commit_generation` for the rules.
    """
    run = session.get(Run, run_id, with_for_update=True)
    if run is None:
        raise StoreError(f"no run {run_id!r}")
    if generation <= run.last_generation:
        return payload.verify_stored(session, run_id, generation)
    if generation != run.last_generation + 1:
        raise StoreError(
            f"run {run_id}: generation {generation} would skip generations after "
            f"the last committed one, {run.last_generation}"
        )
    slot_ids = payload.insert(session, run_id, generation)
    run.last_generation = generation
    return slot_ids


class GenerationPayload:
    """The validated content of one generation, before any id of it exists."""

    def __init__(self) -> None:
        self.genomes: dict[str, GenomeIn] = {}
        self.individuals: list[IndividualIn] = []
        self.evaluations: list[EvaluationIn] = []
        self.lineage: list[LineageIn] = []
        self.members: list[Ref] = []
        self.policy: list[PolicyIn] = []
        self.archive: dict[str, ArchiveIn] = {}
        self.archive_remove: set[str] = set()
        self.transfer: list[TransferIn] = []

    @classmethod
    def build(
        cls,
        genomes: Iterable[GenomeIn | tuple[str, str, str]],
        individuals: Iterable[IndividualIn],
        evaluations: Iterable[EvaluationIn],
        lineage: Iterable[LineageIn],
        members: Iterable[Ref],
        policy: Iterable[PolicyIn],
        archive: Iterable[ArchiveIn],
        archive_remove: Iterable[str],
        transfer: Iterable[TransferIn] = (),
    ) -> GenerationPayload:
        payload = cls()
        for item in genomes:
            genome = GenomeIn(*item)
            if not HEX.fullmatch(genome.id):
                raise StoreError(f"genome id must be lowercase hex, not {genome.id!r}")
            known = payload.genomes.get(genome.id)
            if known is not None and known != genome:
                raise StoreError(f"genome {genome.id} given twice with different content")
            payload.genomes[genome.id] = genome
        payload.individuals = list(individuals)
        slots = [ind.slot for ind in payload.individuals]
        if len(set(slots)) != len(slots):
            raise StoreError("two individuals share a slot")
        payload.evaluations = list(evaluations)
        for evaluation in payload.evaluations:
            if evaluation.status not in EVALUATION_STATUSES:
                raise StoreError(
                    f"evaluation status must be one of {EVALUATION_STATUSES}, not {evaluation.status!r}"
                )
            fidelity_key(evaluation.fidelity)
            if evaluation.individual is not None:
                checked_ref(evaluation.individual, "evaluation of " + evaluation.genome_id[:12])
        payload.lineage = list(lineage)
        for edge in payload.lineage:
            checked_ref(edge.parent, f"parent of slot {edge.child}")
        payload.members = [checked_ref(member, "member") for member in members]
        payload.policy = list(policy)
        for entry in archive:
            if entry.genome_id in payload.archive:
                raise StoreError(f"genome {entry.genome_id} appears twice in the archive")
            payload.archive[entry.genome_id] = entry
        if isinstance(archive_remove, str):
            raise StoreError("archive_remove is a list of genome ids, not one string")
        payload.archive_remove = set(archive_remove)
        both = payload.archive_remove & set(payload.archive)
        if both:
            raise StoreError(f"genome {min(both)} is both added to and removed from the archive")
        payload.transfer = list(transfer)
        pairs = [(fidelity_key(t.lower_fidelity), fidelity_key(t.higher_fidelity)) for t in payload.transfer]
        if len(set(pairs)) != len(pairs):
            raise StoreError("a fidelity transfer is given twice for one pair of fidelities")
        for t in payload.transfer:
            if isinstance(t.n, bool) or not isinstance(t.n, int) or t.n < 0:
                raise StoreError(f"fidelity transfer: n must be a count, not {t.n!r}")
            if t.ranked_by not in RANKED_BY:
                raise StoreError(
                    f"fidelity transfer: ranked_by must be one of {RANKED_BY}, not {t.ranked_by!r}"
                )
            for name in TRANSFER_VALUES[1:]:
                value = getattr(t, name)
                if value is not None and not (isinstance(value, (int, float)) and -1.0 <= value <= 1.0):
                    raise StoreError(
                        f"fidelity transfer: {name} must lie in [-1, 1] or be None, not {value!r}"
                    )
        return payload

    # -- resolving references

    @staticmethod
    def _resolve(ref: Ref, slot_ids: dict[int, int], earlier: set[int], what: str) -> int:
        kind, number = ref
        if kind == "slot":
            if number not in slot_ids:
                raise StoreError(f"{what}: no individual in slot {number} of this generation")
            return slot_ids[number]
        if number not in earlier:
            raise StoreError(f"{what}: individual {number} is not in this run")
        return number

    def _earlier_ids(self, session: Session, run_id: str, generation: int) -> set[int]:
        """Ids given as ("id", n) that are births of this run before ``generation``."""
        asked = {n for kind, n in self._refs() if kind == "id"}
        found: set[int] = set()
        ordered = sorted(asked)
        for chunk in chunks(ordered):
            found.update(
                session.scalars(
                    select(Individual.id).where(
                        Individual.id.in_(chunk),
                        Individual.run_id == run_id,
                        Individual.generation < generation,
                    )
                )
            )
        return found

    def _refs(self) -> Iterator[Ref]:
        yield from self.members
        for edge in self.lineage:
            yield checked_ref(edge.parent, "parent")
        for evaluation in self.evaluations:
            if evaluation.individual is not None:
                yield checked_ref(evaluation.individual, "evaluation")

    def _resolved_lineage(
        self, slot_ids: dict[int, int], earlier: set[int]
    ) -> dict[tuple[int, int], LineageIn]:
        """(child id, parent id) → edge; a repeated pair (self-crossover) is kept once."""
        edges: dict[tuple[int, int], LineageIn] = {}
        for edge in self.lineage:
            child = self._resolve(("slot", edge.child), slot_ids, set(), "lineage child")
            parent = self._resolve(
                checked_ref(edge.parent, "parent"), slot_ids, earlier, f"parent of slot {edge.child}"
            )
            if parent == child:
                raise StoreError(f"slot {edge.child} is given as its own parent")
            edges.setdefault((child, parent), edge)
        return edges

    def _resolved_members(self, slot_ids: dict[int, int], earlier: set[int]) -> list[int]:
        ids = [self._resolve(ref, slot_ids, earlier, "member") for ref in self.members]
        if len(set(ids)) != len(ids):
            raise StoreError("an individual appears twice among the members")
        return ids

    def _check_genomes_known(self, session: Session) -> None:
        wanted = {ind.genome_id for ind in self.individuals}
        wanted |= {ev.genome_id for ev in self.evaluations}
        wanted |= set(self.archive)
        missing = sorted(wanted - set(self.genomes))
        found: set[str] = set()
        for chunk in chunks(missing):
            found.update(session.scalars(select(Genome.id).where(Genome.id.in_(chunk))))
        unknown = [genome_id for genome_id in missing if genome_id not in found]
        if unknown:
            raise StoreError(f"genome {unknown[0]} is neither given nor stored")

    # -- first commit

    def insert(self, session: Session, run_id: str, generation: int) -> dict[int, int]:
        self._insert_genomes(session)
        self._check_genomes_known(session)

        births = [
            Individual(
                run_id=run_id,
                generation=generation,
                slot=ind.slot,
                genome_id=ind.genome_id,
                seed=ind.seed,
                operator=ind.operator,
                change=ind.change,
            )
            for ind in self.individuals
        ]
        session.add_all(births)
        session.flush()
        slot_ids = {birth.slot: birth.id for birth in births}
        earlier = self._earlier_ids(session, run_id, generation)

        for (child, parent), edge in self._resolved_lineage(slot_ids, earlier).items():
            session.add(Lineage(child_id=child, parent_id=parent, operator=edge.operator, change=edge.change))
        for rank, individual_id in enumerate(self._resolved_members(slot_ids, earlier)):
            session.add(Member(run_id=run_id, generation=generation, rank=rank, individual_id=individual_id))
        self._insert_evaluations(session, run_id, slot_ids, earlier)
        self._upsert_policy(session, run_id)
        self._upsert_archive(session, run_id)
        for t in self.transfer:
            session.add(Transfer(run_id=run_id, generation=generation, **_transfer_columns(t)))
        session.flush()
        return slot_ids

    def _insert_genomes(self, session: Session) -> None:
        ids = sorted(self.genomes)
        stored: dict[str, str] = {}
        for chunk in chunks(ids):
            query = select(Genome.id, Genome.yaml).where(Genome.id.in_(chunk))
            stored.update((genome_id, text) for genome_id, text in session.execute(query))
        for genome_id, yaml_text in stored.items():
            if yaml_text != self.genomes[genome_id].yaml:
                raise StoreError(f"genome {genome_id} is already stored with different YAML")
        rows = [
            {"id": g.id, "yaml": g.yaml, "sequence": g.sequence}
            for g in self.genomes.values()
            if g.id not in stored
        ]
        if not rows:
            return
        dialect = session.get_bind().dialect.name
        if dialect in ("sqlite", "postgresql"):
            # Genomes are shared by runs: another run may insert the same one concurrently.
            statement: Insert
            if dialect == "sqlite":
                from sqlalchemy.dialects import sqlite

                statement = sqlite.insert(Genome).on_conflict_do_nothing(index_elements=["id"])
            else:
                from sqlalchemy.dialects import postgresql

                statement = postgresql.insert(Genome).on_conflict_do_nothing(index_elements=["id"])
            session.execute(statement, rows)
        else:
            session.execute(insert(Genome), rows)

    def _insert_evaluations(
        self, session: Session, run_id: str, slot_ids: dict[int, int], earlier: set[int]
    ) -> None:
        seen: set[StoredKey] = set()
        for evaluation in self.evaluations:
            key = stored_key(evaluation)
            individual_id = None
            if evaluation.individual is not None:
                individual_id = self._resolve(
                    checked_ref(evaluation.individual, "evaluation"),
                    slot_ids,
                    earlier,
                    f"evaluation of genome {evaluation.genome_id[:12]}",
                )
            if key in seen or evaluation_exists(session, run_id, key):
                continue  # natural key already stored: a retried task is not a new row
            seen.add(key)
            session.add(
                Evaluation(
                    run_id=run_id,
                    genome_id=key[0],
                    task=key[1],
                    fidelity=key[2],
                    seed=key[3],
                    individual_id=individual_id,
                    status=evaluation.status,
                    reason=evaluation.reason,
                    metrics=evaluation.metrics,
                    wall_seconds=evaluation.wall_seconds,
                )
            )

    def _upsert_policy(self, session: Session, run_id: str) -> None:
        if not self.policy:
            return
        stored = {
            (row.operator, row.context): row
            for row in session.scalars(select(Policy).where(Policy.run_id == run_id))
        }
        for entry in self.policy:
            row = stored.get((entry.operator, entry.context))
            if row is None:
                row = Policy(run_id=run_id, operator=entry.operator, context=entry.context)
                session.add(row)
                stored[(entry.operator, entry.context)] = row
            row.successes = float(entry.successes)
            row.trials = float(entry.trials)

    def _upsert_archive(self, session: Session, run_id: str) -> None:
        if not self.archive and not self.archive_remove:
            return
        stored = {
            row.genome_id: row for row in session.scalars(select(Archive).where(Archive.run_id == run_id))
        }
        for genome_id in sorted(self.archive_remove & set(stored)):
            session.delete(stored[genome_id])
        for genome_id, entry in self.archive.items():
            row = stored.get(genome_id)
            if row is None:
                session.add(Archive(run_id=run_id, genome_id=genome_id, metrics=entry.metrics))
            else:
                row.metrics = entry.metrics

    # -- retried commit

    def verify_stored(self, session: Session, run_id: str, generation: int) -> dict[int, int]:
        """The stored slot → id of an already committed generation, if it matches."""

        def differs(what: str) -> StoreError:
            return StoreError(
                f"run {run_id}: generation {generation} is already committed with different "
                f"{what}; the generation counter cannot go back"
            )

        births = {
            row.slot: row
            for row in session.scalars(
                select(Individual).where(Individual.run_id == run_id, Individual.generation == generation)
            )
        }
        if set(births) != {ind.slot for ind in self.individuals}:
            raise differs("births")
        for ind in self.individuals:
            row = births[ind.slot]
            if (row.genome_id, row.seed, row.operator, canonical_json(row.change)) != (
                ind.genome_id,
                ind.seed,
                ind.operator,
                canonical_json(ind.change),
            ):
                raise differs(f"birth in slot {ind.slot}")
        slot_ids = {slot: row.id for slot, row in births.items()}
        earlier = self._earlier_ids(session, run_id, generation)
        try:
            offered_edges = self._resolved_lineage(slot_ids, earlier)
            offered_members = self._resolved_members(slot_ids, earlier)
        except StoreError as exc:
            raise differs(f"references ({exc})") from None

        child_ids = sorted(slot_ids.values())
        stored_edges: dict[tuple[int, int], tuple[str | None, str]] = {}
        for chunk in chunks(child_ids):
            for edge in session.scalars(select(Lineage).where(Lineage.child_id.in_(chunk))):
                stored_edges[(edge.child_id, edge.parent_id)] = (
                    edge.operator,
                    canonical_json(edge.change),
                )
        offered = {pair: (edge.operator, canonical_json(edge.change)) for pair, edge in offered_edges.items()}
        if stored_edges != offered:
            raise differs("lineage")

        stored_members = list(
            session.scalars(
                select(Member.individual_id)
                .where(Member.run_id == run_id, Member.generation == generation)
                .order_by(Member.rank)
            )
        )
        if stored_members != offered_members:
            raise differs("members")

        for evaluation in self.evaluations:
            key = stored_key(evaluation)
            if not evaluation_exists(session, run_id, key):
                raise differs(f"evaluations (genome {evaluation.genome_id[:12]} missing)")
        query = select(Transfer).where(Transfer.run_id == run_id, Transfer.generation == generation)
        stored_transfer = sorted(
            tuple(getattr(row, c) for c in TRANSFER_COLUMNS) for row in session.scalars(query)
        )
        offered_transfer = sorted(tuple(_transfer_columns(t).values()) for t in self.transfer)
        if stored_transfer != offered_transfer:
            raise differs("fidelity transfer")
        return slot_ids


TRANSFER_VALUES = (
    "n",
    "spearman",
    "spearman_low",
    "spearman_high",
    "kendall",
    "kendall_low",
    "kendall_high",
)


TRANSFER_COLUMNS = ("lower_fidelity", "higher_fidelity", *TRANSFER_VALUES, "ranked_by")


def _transfer_columns(t: TransferIn) -> dict[str, Any]:
    """The columns of a ``transfer`` row in :data:`TRANSFER_COLUMNS` order (fidelities as
    stored, correlations as floats)."""
    columns: dict[str, Any] = {
        "lower_fidelity": fidelity_key(t.lower_fidelity),
        "higher_fidelity": fidelity_key(t.higher_fidelity),
    }
    for name in TRANSFER_VALUES:
        value = getattr(t, name)
        columns[name] = value if value is None or name == "n" else float(value)
    columns["ranked_by"] = t.ranked_by
    return columns


def evaluation_exists(session: Session, run_id: str, key: StoredKey) -> bool:
    """Whether the run already has a row under this natural key (a retried task)."""
    genome_id, task, fidelity, seed = key
    found = session.scalars(
        select(Evaluation.id).where(
            Evaluation.run_id == run_id,
            Evaluation.genome_id == genome_id,
            Evaluation.task == task,
            Evaluation.fidelity == fidelity,
            Evaluation.seed == seed,
        )
    ).first()
    return found is not None
