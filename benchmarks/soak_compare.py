"""The soak's verdict: a killed-and-resumed run's stored end state against an uninterrupted
run of the same seed (`benchmarks/soak.py`).

:func:`snapshot` reads one run into plain data keyed by what does not depend on the store
(a birth is its (generation, slot), an evaluation its natural key), with metrics that
measure the machine left out by the rule ``evolve replay`` compares by
(:func:`evolution.cli.replay.compared`: timings, throughput, the worker that ran it).
:func:`compare` lists every difference and every fault: a different best, front,
evaluation count or stored metric; a lease left running; a duplicated row; an artifact that
fails its sha256 or differs from the reference's.

Weights are written after their generation's transaction (``Engine._commit``): a driver
killed between the two leaves that generation's artifacts unwritten, which the design allows
(``evolve export`` re-trains such an individual). Missing artifacts are therefore counted
and reported, not failed; an artifact present in both runs must have the same sha256.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

from dogma_evolve.evolution.cli.replay import compared
from dogma_evolve.evolution.evaluating import quality_of
from dogma_evolve.evolution.report.summary import best_individual
from dogma_evolve.store import Store

Slot = tuple[int, int]  # (generation, slot): a birth, in any store


def stable(metrics: Any) -> Any:
    """``metrics`` without what measures the machine (nested dicts kept whole)."""
    if not isinstance(metrics, dict):
        return metrics
    return {key: value for key, value in sorted(metrics.items()) if compared(key)}


def _front(points: dict[str, tuple[float, float]]) -> list[str]:
    """Genome ids on the (quality ↑, params ↓) front of ``points``, best quality first."""
    front = [
        genome
        for genome, (q, p) in points.items()
        if not any((q2 >= q and p2 <= p) and (q2 > q or p2 < p) for q2, p2 in points.values())
    ]
    return sorted(front, key=lambda g: (-points[g][0], points[g][1], g))


@dataclass
class Snapshot:
    """One run's stored end state (module docstring)."""

    run: dict[str, Any]
    births: dict[Slot, dict[str, Any]]
    evaluations: dict[tuple[str, str, str, int], dict[str, Any]]
    members: dict[tuple[int, int], Slot]
    archive: dict[str, Any]
    policy: list[tuple[Any, ...]]
    transfer: list[tuple[Any, ...]]
    artifacts: dict[tuple[Slot, str], str]
    leases: dict[str, int]
    duplicates: list[str] = field(default_factory=list)
    best: dict[str, Any] = field(default_factory=dict)
    front: list[str] = field(default_factory=list)


def snapshot(url: str, run_id: str) -> Snapshot:
    """Read run ``run_id`` of the store at ``url`` (nothing is written)."""
    with Store(url, create=False) as store:
        record = store.get_run(run_id)
        if record is None:
            raise KeyError(f"no run {run_id}")
        individuals = store.individuals(run_id)
        where = {i.id: (i.generation, i.slot) for i in individuals}
        births = {
            where[i.id]: {
                "genome": i.genome_id,
                "seed": i.seed,
                "operator": i.operator,
                "change": json.dumps(i.change, sort_keys=True),
                "parents": sorted(where[p] for p in i.parents),
                "status": i.status,
                "metrics": stable(i.metrics),
            }
            for i in individuals
        }
        rows = store._read(lambda s: _rows(s, run_id), "soak snapshot")
        best = best_individual(store, run_id) if any(i.status == "ok" for i in individuals) else None
        points = {
            i.genome_id: (quality_of(i.metrics or {}), float((i.metrics or {}).get("params", 0)))
            for i in individuals
            if i.status == "ok"
        }
        snap = Snapshot(
            run={
                "status": record.status,
                "last_generation": record.last_generation,
                "stop_reason": record.stop_reason,
                "evaluated": record.evaluated,
            },
            births=births,
            evaluations={},
            members={},
            archive={a.genome_id: stable(a.metrics) for a in store.archive(run_id)},
            policy=sorted((p.operator, p.context, p.successes, p.trials) for p in store.policy(run_id)),
            transfer=sorted(
                (t.generation, t.lower_fidelity, t.higher_fidelity, t.n, t.spearman, t.kendall)
                for t in store.transfer(run_id)
            ),
            artifacts={},
            leases=dict(Counter(lease.state for lease in store.leases(run_id))),
            best={} if best is None else {"slot": where[best.id], "genome": best.genome_id},
            front=_front(points),
        )
    keys: Counter[Any] = Counter()
    for genome, task, fidelity, seed, individual, status, metrics in rows["evaluations"]:
        key = (genome, task, fidelity, seed)
        keys[key] += 1
        snap.evaluations[key] = {"birth": where.get(individual), "status": status, "metrics": stable(metrics)}
    snap.duplicates += [
        f"evaluation {k[0][:12]} {k[1]} {k[2]} seed {k[3]} x{n}" for k, n in keys.items() if n > 1
    ]
    slots = Counter(where.values())
    snap.duplicates += [f"birth generation {g} slot {s} x{n}" for (g, s), n in slots.items() if n > 1]
    ranks: Counter[Any] = Counter()
    for generation, rank, individual in rows["members"]:
        ranks[(generation, rank)] += 1
        snap.members[(generation, rank)] = where[individual]
    snap.duplicates += [f"member generation {g} rank {r} x{n}" for (g, r), n in ranks.items() if n > 1]
    kinds: Counter[Any] = Counter()
    for individual, kind, sha256 in rows["artifacts"]:
        kinds[(individual, kind)] += 1
        snap.artifacts[(where[individual], kind)] = sha256
    snap.duplicates += [f"artifact {kind} of #{i} x{n}" for (i, kind), n in kinds.items() if n > 1]
    return snap


def _rows(session: Any, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """The run's evaluations, members and artifacts as raw rows (ids of this store)."""

    def query(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in session.execute(text(sql), {"r": run_id})]

    evaluations = [
        (*row[:6], json.loads(row[6]) if isinstance(row[6], str) else row[6])
        for row in query(
            "SELECT genome_id, task, fidelity, seed, individual_id, status, metrics "
            "FROM evaluations WHERE run_id = :r ORDER BY id"
        )
    ]
    return {
        "evaluations": evaluations,
        "members": query("SELECT generation, rank, individual_id FROM members WHERE run_id = :r ORDER BY id"),
        "artifacts": query("SELECT individual_id, kind, sha256 FROM artifacts WHERE run_id = :r ORDER BY id"),
    }


def _differs(name: str, soaked: Any, reference: Any) -> list[str]:
    """One line per key of two mappings (or one for two values) whose values differ."""
    if not (isinstance(soaked, dict) and isinstance(reference, dict)):
        return [] if soaked == reference else [f"{name}: {soaked!r:.200} != reference {reference!r:.200}"]
    keys = sorted(set(soaked) | set(reference), key=repr)
    bad = [k for k in keys if soaked.get(k, "<missing>") != reference.get(k, "<missing>")]
    return [
        f"{name} {k!r:.80}: {soaked.get(k, '<missing>')!r:.160} != {reference.get(k, '<missing>')!r:.160}"
        for k in bad
    ]


def compare(soaked: Snapshot, reference: Snapshot) -> dict[str, Any]:
    """Differences from the reference and faults of the soaked run (module docstring);
    ``identical`` when there are none."""
    differences = []
    for name in ("run", "best", "front", "births", "evaluations", "members", "archive", "policy", "transfer"):
        differences += _differs(name, getattr(soaked, name), getattr(reference, name))
    shared = set(soaked.artifacts) & set(reference.artifacts)
    differences += [
        f"artifact {key}: sha256 {soaked.artifacts[key][:12]} != reference {reference.artifacts[key][:12]}"
        for key in sorted(shared)
        if soaked.artifacts[key] != reference.artifacts[key]
    ]
    extra = sorted(set(soaked.artifacts) - set(reference.artifacts))
    differences += [f"artifact {key}: not in the reference" for key in extra]
    faults = [f"duplicate: {d}" for d in soaked.duplicates]
    if soaked.leases.get("running"):
        faults.append(f"{soaked.leases['running']} leases left running")
    return {
        "identical": not differences and not faults,
        "differences": differences,
        "faults": faults,
        "evaluations": len(soaked.evaluations),
        "births": len(soaked.births),
        "artifacts": len(soaked.artifacts),
        "artifacts_missing": len(set(reference.artifacts) - set(soaked.artifacts)),
        "leases": soaked.leases,
        "best": soaked.best,
        "front": [g[:12] for g in soaked.front],
    }
