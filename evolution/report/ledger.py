"""The run's training ledger, per generation of birth and in total: what its real
evaluations trained, how long that took, the FLOP/s they achieved and the most memory one
of them needed. `evolve report` prints it (and gives it as ``ledger`` in ``--json``), the
HTML page shows it as a table.

    real_evaluations(births, task, several_tasks)   the rows a run trained itself
    run_ledger(births, task, several_tasks, ...)    the ledger, plain data
    read_ledger(stored)                             ... of a `StoredRun`
    LEDGER_COLUMNS, ledger_cells(row)               its table's header and a row's cells

Computed from the stored evaluations alone (`run_ledger` loads no torch or scipy): a row records
``train_tokens``, ``train_flops`` (where its genome was accounted), ``train_seconds``,
``train_compute_seconds`` and ``peak_memory_bytes`` with its ``peak_memory_kind`` and
``peak_memory_scope`` (`evaluation.evaluate.train_model`); a row written before a metric
was recorded lacks it, and the ledger shows what the rows have: a sum over the rows that
record a metric, "—" where none does, and per row of the ledger the count of trained rows
lacking each metric (``without``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dogma_evolve.evolution.rules import FILTERED

if TYPE_CHECKING:
    from dogma_evolve.evolution.study.stored_run import StoredRun
    from dogma_evolve.store import EvaluationRecord, IndividualRecord

#: The metrics a ledger row sums over its trained evaluations.
SUMMED = ("train_tokens", "train_flops", "train_seconds", "train_compute_seconds")
#: The ledger's columns, in `ledger_cells`' order.
LEDGER_COLUMNS = ("gen", "trained", "tokens", "FLOPs", "seconds", "FLOP/s", "peak memory")
MISSING = "—"


def real_evaluations(
    individuals: Iterable[IndividualRecord], task: str, several_tasks: bool
) -> Iterator[tuple[int, EvaluationRecord]]:
    """(generation of birth, row) for each of the run's REAL evaluations, each once: rows of
    its births that are neither copied from another run (``metrics["cached_from"]``: a cache
    hit trains nothing), nor `FILTERED` rows (never trained), nor, with several tasks, the
    run's per-task-mean row on ``task`` (what `rules.evaluations_spent` counts)."""
    seen: set[int] = set()
    for rec in individuals:
        for e in rec.evaluations:
            if e.id in seen or e.individual_id != rec.id or "cached_from" in (e.metrics or {}):
                continue
            if e.status == FILTERED or (several_tasks and e.task == task):
                continue
            seen.add(e.id)
            yield rec.generation, e


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def ledger_row(generation: int | None, metrics: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One row of the ledger over the metrics of trained evaluations (status ``ok``).

    ``trained``: how many; ``train_tokens``, ``train_flops``, ``train_seconds`` (each
    evaluation's time from building its model to its score) and ``train_compute_seconds``
    (the trainer's forward, backward and update time only): sums over the evaluations that
    record each, None where none does. ``flops_per_s``: the FLOP/s achieved, summed
    ``train_flops`` over summed ``train_compute_seconds`` of the evaluations recording both
    (``flops_per_s_over`` = ``"train_compute_seconds"``); where none records its compute
    seconds (rows written before they were), over their summed ``train_seconds`` instead
    (``"train_seconds"``: a lower bound, as that time also builds, scores and waits);
    None where neither can be had. ``peak_memory_bytes``: the largest peak of one
    evaluation, None where none records one, with the kinds met (``peak_memory_kinds``:
    ``rss``, ``cuda_allocated``) and ``peak_memory_scope`` ``process`` if any of them is
    a process's lifetime peak (its reset was impossible), else ``evaluation``.
    ``without``: metric -> trained evaluations lacking it."""
    rows = list(metrics)
    sums: dict[str, float | None] = dict.fromkeys(SUMMED)
    without: dict[str, int] = {}
    # per time basis: [FLOPs, seconds, evaluations] of the evaluations recording both
    rate: dict[str, list[float]] = {
        "train_compute_seconds": [0.0, 0.0, 0.0],
        "train_seconds": [0.0, 0.0, 0.0],
    }
    peaks: list[tuple[float, str, str]] = []
    for m in rows:
        for name in (*SUMMED, "peak_memory_bytes"):
            if _number(m.get(name)) is None:
                without[name] = without.get(name, 0) + 1
        for name in SUMMED:
            value = _number(m.get(name))
            if value is not None:
                sums[name] = (sums[name] or 0.0) + value
        flops = _number(m.get("train_flops"))
        for basis, acc in rate.items():
            seconds = _number(m.get(basis))
            if flops is not None and seconds is not None and seconds > 0:
                acc[0], acc[1], acc[2] = acc[0] + flops, acc[1] + seconds, acc[2] + 1
        peak = _number(m.get("peak_memory_bytes"))
        if peak is not None:
            peaks.append((peak, str(m.get("peak_memory_kind", "")), str(m.get("peak_memory_scope", ""))))
    over = next((name for name, acc in rate.items() if acc[2]), None)
    return {
        "generation": generation,
        "trained": len(rows),
        **{name: _integral(name, value) for name, value in sums.items()},
        "flops_per_s": None if over is None else rate[over][0] / rate[over][1],
        "flops_per_s_over": over,
        "peak_memory_bytes": int(max(p for p, _, _ in peaks)) if peaks else None,
        "peak_memory_kinds": sorted({k for _, k, _ in peaks if k}),
        "peak_memory_scope": (
            None if not peaks else "process" if any(s != "evaluation" for *_, s in peaks) else "evaluation"
        ),
        "without": without,
    }


def _integral(name: str, value: float | None) -> float | int | None:
    """Counts (tokens, FLOPs) as integers, seconds as they are."""
    return None if value is None else value if name.endswith("seconds") else int(value)


def run_ledger(
    individuals: Iterable[IndividualRecord],
    task: str,
    several_tasks: bool,
    generations: int = 0,
    measured: bool = True,
) -> dict[str, Any]:
    """The ledger of a run's births: ``generations``, one `ledger_row` per generation of
    birth (0 to ``generations`` - 1 and any later one a row was born in) over its real
    evaluations (`real_evaluations`) that ended ``ok`` (a failure records no training;
    a generation of cache hits trained nothing), and ``total``, the same over the whole
    run. ``measured``: False for a space whose evaluations are table look-ups (nothing is
    trained, the ledger's rows count the look-ups)."""
    by_generation: dict[int, list[dict[str, Any]]] = {g: [] for g in range(generations)}
    for generation, e in real_evaluations(individuals, task, several_tasks):
        if e.status == "ok":
            by_generation.setdefault(generation, []).append(e.metrics or {})
        else:
            by_generation.setdefault(generation, [])
    return {
        "measured": measured,
        "generations": [ledger_row(g, by_generation[g]) for g in sorted(by_generation)],
        "total": ledger_row(None, (m for g in sorted(by_generation) for m in by_generation[g])),
    }


def read_ledger(stored: StoredRun, individuals: list[IndividualRecord] | None = None) -> dict[str, Any]:
    """`run_ledger` of a stored run (a `StoredRun`: its task, tasks and committed
    generations); ``individuals``: its births when the caller has read them already."""
    births = stored.store.individuals(stored.run_id) if individuals is None else individuals
    return run_ledger(
        births,
        stored.config.task,
        len(stored.config.tasks) > 1,
        stored.record.generations,
        measured=not table_space(stored.space),
    )


def table_space(space: Any) -> bool:
    """A space whose evaluations are look-ups in a table (NAS-Bench-201): nothing trained.
    A space that trains its candidates has no pool of its own, and is told without torch."""
    pool = space.local_pool()
    if pool is None:
        return False
    from dogma_evolve.evaluation.table import TableEvaluator  # torch

    return isinstance(pool, TableEvaluator)


def ledger_cells(row: dict[str, Any]) -> tuple[str, ...]:
    """A ledger row as the text of `LEDGER_COLUMNS` ("—" where nothing recorded it): FLOP/s
    over wall seconds is marked "(wall)", a process's lifetime peak "(process)"."""
    rate = row["flops_per_s"]
    peak = row["peak_memory_bytes"]
    return (
        "total" if row["generation"] is None else str(row["generation"]),
        str(row["trained"]),
        _or_missing(row["train_tokens"], si),
        _or_missing(row["train_flops"], si),
        _or_missing(row["train_seconds"], lambda s: f"{s:.3g}"),
        MISSING
        if rate is None
        else si(rate) + ("" if row["flops_per_s_over"] == "train_compute_seconds" else " (wall)"),
        MISSING
        if peak is None
        else binary(peak)
        + (f" {'+'.join(row['peak_memory_kinds'])}" if row["peak_memory_kinds"] else "")
        + (" (process)" if row["peak_memory_scope"] == "process" else ""),
    )


def ledger_notes(ledger: dict[str, Any]) -> list[str]:
    """What the ledger's cells mean, and which trained rows lack which metric."""
    notes = [
        "ledger: what each generation's real evaluations trained (cache hits and failures train "
        "nothing counted); seconds: build to score; FLOP/s: FLOPs over the trainer's forward, "
        "backward and update seconds ((wall): over the seconds, for rows that predate them); "
        "peak memory: the largest of one evaluation (rss: the process's resident set; "
        "cuda_allocated: the CUDA allocator's; (process): a lifetime peak, not reset)"
    ]
    lacking = ledger["total"]["without"]
    if lacking and ledger["total"]["trained"]:
        what = ", ".join(f"{name} {n}" for name, n in sorted(lacking.items()))
        notes.append(
            f"  trained evaluations lacking a metric (recorded before it was, or not accounted): {what}"
        )
    return notes


def _or_missing(value: float | None, show: Any) -> str:
    return MISSING if value is None else str(show(value))


def si(value: float) -> str:
    """A count in 3 significant digits with an SI prefix: 61.4k, 1.23G."""
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{prefix}"
    return f"{value:.3g}"


def binary(n: float) -> str:
    """Bytes with a binary prefix: 512 B, 1.5 KiB, 408 MiB."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.3g} {unit}"


__all__ = [
    "LEDGER_COLUMNS",
    "ledger_cells",
    "ledger_notes",
    "ledger_row",
    "read_ledger",
    "real_evaluations",
    "run_ledger",
    "table_space",
]
