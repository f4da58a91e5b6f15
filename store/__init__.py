"""Persistent record of evolutionary runs (overview: docs/reference/store.md).

Plain data in, plain data out: genome ids are sha256 hex strings, genomes canonical YAML,
metrics and change records JSON-able dicts. A generation is committed in one transaction
(:meth:`Store.commit_generation`), so a killed run resumes from its last committed
generation with nothing lost and nothing doubled.

The kinds of run and the statuses a run, an evaluation and a lease can have are defined
once, here: :data:`RUN_KINDS`, :data:`RUN_STATUSES`, :data:`EVALUATION_STATUSES`,
:data:`LEASE_STATES`, and what a fidelity transfer ranked by, :data:`RANKED_BY`.

This file only re-exports. The package's own modules import each other by their full names
(``import store.queries as queries``, ``from store.records import ...``), never through the
package (``from store import ...``): this file imports them, so that would be a circle.
"""

from dogma_evolve.store.artifacts import WEIGHTS_ARTIFACT
from dogma_evolve.store.leases import LeaseLog
from dogma_evolve.store.models import EVALUATION_STATUSES, LEASE_STATES, RANKED_BY, RUN_KINDS, RUN_STATUSES
from dogma_evolve.store.ranks import LadderRankIn, LadderRankRecord
from dogma_evolve.store.records import (
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
from dogma_evolve.store.store import Store

__all__ = [
    "EVALUATION_STATUSES",
    "LEASE_STATES",
    "RANKED_BY",
    "RUN_KINDS",
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
    "WEIGHTS_ARTIFACT",
    "by_id",
    "by_slot",
]
