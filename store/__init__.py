"""Persistent record of evolutionary runs (overview: docs/architecture.md, "Store").

Plain data in, plain data out: genome ids are sha256 hex strings, genomes canonical YAML,
metrics and change records JSON-able dicts. A generation is committed in one transaction
(:meth:`Store.commit_generation`), so a killed run resumes from its last committed
generation with nothing lost and nothing doubled.

The statuses a run, an evaluation and a lease can have are defined once, here:
:data:`RUN_STATUSES`, :data:`EVALUATION_STATUSES`, :data:`LEASE_STATES`.
"""

from store.ladder import LadderRankIn, LadderRankRecord
from store.leases import LeaseLog
from store.models import EVALUATION_STATUSES, LEASE_STATES, RUN_STATUSES
from store.records import (
    AncestryStep,
    ArchiveIn,
    ArchiveRecord,
    EvaluationIn,
    EvaluationRecord,
    GenomeIn,
    IndividualIn,
    IndividualRecord,
    LeaseIn,
    LeaseRecord,
    LineageIn,
    ParentEdge,
    PolicyIn,
    PolicyRecord,
    Ref,
    RunRecord,
    StoreError,
    TransferIn,
    TransferRecord,
    by_id,
    by_slot,
)
from store.store import Store

__all__ = [
    "EVALUATION_STATUSES",
    "LEASE_STATES",
    "RUN_STATUSES",
    "AncestryStep",
    "ArchiveIn",
    "ArchiveRecord",
    "EvaluationIn",
    "EvaluationRecord",
    "LadderRankIn",
    "LadderRankRecord",
    "GenomeIn",
    "IndividualIn",
    "IndividualRecord",
    "LeaseIn",
    "LeaseLog",
    "LeaseRecord",
    "LineageIn",
    "ParentEdge",
    "PolicyIn",
    "PolicyRecord",
    "Ref",
    "RunRecord",
    "Store",
    "StoreError",
    "TransferIn",
    "TransferRecord",
    "by_id",
    "by_slot",
]
