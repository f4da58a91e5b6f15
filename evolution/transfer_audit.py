"""The fidelity-transfer audit of a multi-fidelity run: how well `min_steps` ranks as `steps` does.

A multi-fidelity run trains every child at the first fidelity (`min_steps`) and promotes
the best to the full one (`steps`); the promoted are the candidates measured at both. Their
pair (`candidate_pair`: on the run's task, the mean over the seeds of each fidelity's ok
rows, the lowest and the highest fidelity) is what the audit ranks: on the lower side what
the first stage promoted by (`ranked_by`: its held-out loss, negated, under the default
`promote_by` "loss"; else its quality), on the higher side the full fidelity's quality;
`evaluation.transfer.rank_transfer` gives Spearman's ρ and Kendall's τ-b with bootstrap
intervals over every pair so far.

`TransferAudit` is the engine's: it keeps the run's pairs in birth order (generation,
slot), turns a generation's rows into its new pairs and the cumulative `TransferIn` that
is committed with the generation (`store.Store.commit_generation(..., transfer=...)`), and
reloads the pairs from the store on resume, so a resumed run stores what an uninterrupted
one would. `run_transfer` is the reports': the stored rows, and for generations committed
before the store kept them (revision 0004) the same numbers computed from the evaluation
rows on read; `transfer_warning` is the line shown when ρ falls below
`evaluation.transfer.WEAK_TRANSFER`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dogma_evolve.evaluation.transfer import WEAK_TRANSFER, is_weak, rank_transfer
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import quality_of
from dogma_evolve.evolution.spaces.contract import SearchSpace
from dogma_evolve.store import IndividualRecord, Store, TransferIn

Pair = tuple[float, float]


def ranked_by(config: RunConfig) -> str:
    """What a run's first stage promotes by, so what its transfer ranks the lower side by:
    "loss" (held-out loss, lowest first) under `promote_by` "loss" with one task and one
    objective, as `Evaluator.promoted` does; "quality" otherwise."""
    one = len(config.tasks) == 1 and len(config.objectives) == 1
    return "loss" if config.promote_by == "loss" and one else "quality"


def first_stage_score(metrics: dict[str, Any], by: str) -> float:
    """The lower side's value of one row: its quality, or by "loss" −metrics["loss"] (so
    that higher is better on both sides); NaN when the row records no loss."""
    if by != "loss":
        return quality_of(metrics)
    try:
        return -float(metrics.get("loss", math.nan))
    except (TypeError, ValueError):
        return math.nan


def candidate_pair(rows: Iterable[Any], task: str, by: str = "quality") -> Pair | None:
    """(first-stage score at the lowest fidelity, quality at the highest) of one candidate
    from its evaluation rows (`store.EvaluationIn` or `store.EvaluationRecord`: `task`,
    `fidelity`, `seed`, `status`, `metrics`), over the ok rows on `task` at integer
    fidelities; each the mean over that fidelity's seeds (in seed order); the score is
    `first_stage_score(metrics, by)`. None unless two fidelities have one, or when the
    score is NaN (a first stage that recorded no loss)."""
    by_level: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for e in rows:
        if e.task != task or e.status != "ok" or isinstance(e.fidelity, bool):
            continue
        if isinstance(e.fidelity, int):
            by_level.setdefault(e.fidelity, []).append((e.seed, e.metrics or {}))
    if len(by_level) < 2:
        return None

    def mean(level: int, value: Callable[[dict[str, Any]], float]) -> float:
        values = [value(m) for _, m in sorted(by_level[level], key=lambda sm: sm[0])]
        return sum(values) / len(values)

    low = mean(min(by_level), lambda m: first_stage_score(m, by))
    return None if math.isnan(low) else (low, mean(max(by_level), quality_of))


class TransferAudit:
    """A multi-fidelity run's pairs so far, and the transfer row each commit stores."""

    def __init__(self, task: str, lower: int | str, higher: int | str, by: str = "quality") -> None:
        self.task, self.lower, self.higher, self.by = task, lower, higher, by
        self.pairs: list[Pair] = []

    @classmethod
    def of(cls, config: RunConfig, space: SearchSpace) -> TransferAudit | None:
        """The audit of a run, None when it evaluates at one fidelity only."""
        lower = config.first_fidelity
        if lower is None or not config.multi_fidelity:
            return None
        return cls(config.task, lower, space.full_fidelity(config.steps), ranked_by(config))

    def load(self, records: Iterable[IndividualRecord]) -> None:
        """The pairs of the stored births (resume), in birth order."""
        self.pairs = list(self.pairs_through(records, None))

    def pairs_through(self, records: Iterable[IndividualRecord], generation: int | None) -> list[Pair]:
        """Pairs of the births up to `generation` (all: None) in (generation, slot) order."""
        ordered = sorted(records, key=lambda r: (r.generation, r.slot))
        chosen = [r for r in ordered if generation is None or r.generation <= generation]
        return [p for p in self.new_pairs([r.evaluations for r in chosen]) if p is not None]

    def new_pairs(self, rows_by_candidate: Iterable[Sequence[Any]]) -> list[Pair | None]:
        """Each candidate's pair (None: not measured at both), in the order given."""
        return [candidate_pair(rows, self.task, self.by) for rows in rows_by_candidate]

    def row(self, pairs: Sequence[Pair]) -> TransferIn:
        """The transfer over `pairs` (the run's so far, this generation's included)."""
        t = rank_transfer([p[0] for p in pairs], [p[1] for p in pairs])
        return TransferIn(self.lower, self.higher, **t.to_dict(), ranked_by=self.by)


def run_transfer(
    store: Store,
    run_id: str,
    config: RunConfig,
    space: SearchSpace,
    records: list[IndividualRecord] | None = None,
) -> list[dict[str, Any]]:
    """A run's transfer per committed generation (cumulative), `stored` False where it is
    computed here because the generation was committed before the store kept it (the
    births are read, unless given as `records`, only then); [] for a single-fidelity run."""
    audit = TransferAudit.of(config, space)
    stored = store.transfer(run_id)
    run = store.get_run(run_id)
    if (audit is None and not stored) or run is None:
        return []
    by_generation: dict[int, list[Any]] = {}
    for t in stored:
        if is_step_fidelity(t.lower_fidelity):  # named fidelities are the ladder's (run_ladder)
            by_generation.setdefault(t.generation, []).append(t)
    rows: list[dict[str, Any]] = []
    for g in range(run.last_generation + 1):
        if g in by_generation:
            rows += [{**transfer_dict(t), "stored": True} for t in by_generation[g]]
        elif audit is not None:
            if records is None:
                records = store.individuals(run_id)
            row = audit.row(audit.pairs_through(records, g))
            rows.append({"generation": g, **_fields(row), "stored": False})
    return rows


FIELDS: tuple[str, ...] = ("lower_fidelity", "higher_fidelity", "n")
FIELDS += ("spearman", "spearman_low", "spearman_high", "kendall", "kendall_low", "kendall_high")
FIELDS += ("ranked_by",)


def _fields(t: Any) -> dict[str, Any]:
    return {name: getattr(t, name) for name in FIELDS}


def transfer_dict(t: Any) -> dict[str, Any]:
    """A stored transfer row (``store.TransferRecord``) as plain data."""
    return {"generation": t.generation, **_fields(t)}


def transfer_warning(rows: Sequence[dict[str, Any]]) -> str | None:
    """The warning line for a run whose latest (whole-run) Spearman ρ is below
    `WEAK_TRANSFER`; None otherwise (no row, ρ undefined, or ρ at or above it)."""
    if not rows:
        return None
    last = rows[-1]
    if not is_weak(last.get("spearman")):
        return None
    return (
        f"WARNING: weak fidelity transfer: Spearman ρ {last['spearman']:.2f} "
        f"{interval(last['spearman_low'], last['spearman_high'])} < {WEAK_TRANSFER} over "
        f"{last['n']} candidates trained at both {last['lower_fidelity']} and "
        f"{last['higher_fidelity']} steps ({ranked_text(last.get('ranked_by', 'quality'))} vs "
        "quality): the first stage barely predicts the full one's "
        "ranking, so promoting by it is little better than chance, or worse (raise "
        "--min-steps, or turn it off with --min-steps 0)"
    )


def ranked_text(by: str) -> str:
    """How a report names what the lower side ranked by."""
    return "held-out loss, lowest first" if by == "loss" else "quality"


def is_step_fidelity(fidelity: Any) -> bool:
    """Whether a stored transfer's fidelity is a step count (multi-fidelity), not a name
    (``evolve run --ladder``'s ``"search"``, ``"ladder@N"``, ``"rung k"``)."""
    return isinstance(fidelity, int)


def correlation_text(t: dict[str, Any]) -> str:
    """`n N, Spearman ρ R [low, high], Kendall τ T [low, high]` of a transfer row."""
    rho = "undefined" if t["spearman"] is None else f"{t['spearman']:.2f}"
    tau = "undefined" if t["kendall"] is None else f"{t['kendall']:.2f}"
    return (
        f"n {t['n']}, Spearman ρ {rho} {interval(t['spearman_low'], t['spearman_high'])}, "
        f"Kendall τ {tau} {interval(t['kendall_low'], t['kendall_high'])}"
    )


def interval(low: float | None, high: float | None) -> str:
    """`[low, high]` for a text line; `[undefined]` when it is."""
    return "[undefined]" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"


__all__ = [
    "TransferAudit",
    "candidate_pair",
    "correlation_text",
    "first_stage_score",
    "interval",
    "is_step_fidelity",
    "ranked_by",
    "ranked_text",
    "run_transfer",
    "transfer_dict",
    "transfer_warning",
]
