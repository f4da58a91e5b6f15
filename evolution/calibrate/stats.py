"""The statistics of a calibration, over the whole panel at each rung.

For a rung r and a reference fidelity R (the full fidelity ``steps`` and the ``target``),
over the ``n`` members whose trainings at both succeeded (``quality`` not None):

* **rank correlation**: Spearman's ρ and Kendall's τ-b of the qualities at r against those
  at R, each with a 95 % bootstrap interval (``evaluation.transfer.rank_transfer``: none
  below six members, no value below three or with a constant side);
* **top-k recall of a promotion**: a multi-fidelity search trains the best ``promote``
  fraction of its children again at full fidelity, k = ⌈promote · n⌉ of them (as
  ``Evaluator.evaluate``); the recall is |top_k(r) ∩ top_k(R)| / k, the share of the true
  top k at R that a promotion at r keeps (1: the rung picks exactly the best; a random
  promotion keeps k/n on average, given as ``chance``). Ties are broken by panel order
  (presets first), on both sides alike;
* **quality distribution** at r: min, quartiles (numpy's linear interpolation), max, and
  the shares at or below chance (quality ≤ 0: the suite's quality is accuracy normalised so
  that chance is 0) and below the quality floor (``quality < floor``, as a search's
  ``below_floor``), over the members trained successfully at r; ``failed`` counts the rest;
* **the held-out loss as a ranking**, at each rung below the full fidelity: the same
  correlations and recall with the rung's score −loss (lower loss ranks higher) in place of
  its quality, against the full fidelity's and the target's quality — the rule a search's
  first stage promotes by under one objective and one task (``Evaluator.promoted``); over the
  members with a loss at r and a quality at R.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dogma_evolve.evaluation.transfer import RESAMPLES, is_weak, rank_transfer
from dogma_evolve.evolution.calibrate.panel import Ladder
from dogma_evolve.store import TransferIn

Qualities = Mapping[int, Sequence[float | None]]  # fidelity -> each member's quality (or loss), panel order


def promotion_size(n: int, promote: float) -> int:
    """How many of ``n`` a promotion of the best ``promote`` fraction keeps: ⌈promote · n⌉."""
    return min(n, math.ceil(promote * n)) if n else 0


def top_k(values: Sequence[float], k: int) -> set[int]:
    """The indices of the ``k`` largest ``values``; ties go to the lower index."""
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return set(order[:k])


def promotion_recall(lower: Sequence[float], higher: Sequence[float], promote: float) -> dict[str, Any]:
    """Top-k recall of promoting the best ``promote`` fraction by ``lower`` (module docstring):
    ``k``, ``recall`` (None without candidates) and ``chance`` (k/n)."""
    if len(lower) != len(higher):
        raise ValueError(f"lower and higher differ in length: {len(lower)} != {len(higher)}")
    n = len(lower)
    k = promotion_size(n, promote)
    if k == 0:
        return {"k": 0, "recall": None, "chance": None}
    kept = len(top_k(lower, k) & top_k(higher, k))
    return {"k": k, "recall": kept / k, "chance": k / n}


def distribution(values: Sequence[float], floor: float | None) -> dict[str, Any]:
    """Min, quartiles, max of ``values`` and the shares at or below chance (≤ 0) and below
    ``floor`` (None: no floor, share None); every statistic None without values."""
    n = len(values)
    if n == 0:
        empty: dict[str, Any] = dict.fromkeys(("min", "q1", "median", "q3", "max", "chance", "floor"))
        return {"n": 0, **empty}
    q = np.percentile(np.asarray(values, dtype=float), [0, 25, 50, 75, 100])
    at_chance = sum(v <= 0.0 for v in values) / n
    below = None if floor is None else sum(v < floor for v in values) / n
    return {
        "n": n,
        "min": float(q[0]),
        "q1": float(q[1]),
        "median": float(q[2]),
        "q3": float(q[3]),
        "max": float(q[4]),
        "chance": at_chance,
        "floor": below,
    }


def compare(
    lower: Sequence[float | None],
    higher: Sequence[float | None],
    promote: float,
    resamples: int = RESAMPLES,
) -> dict[str, Any]:
    """Rank correlation (with intervals) and promotion recall of ``lower`` against ``higher``
    over the members measured at both; ``weak`` when ρ is defined and below 0.3."""
    pairs = [(a, b) for a, b in zip(lower, higher, strict=True) if a is not None and b is not None]
    xs, ys = [a for a, _ in pairs], [b for _, b in pairs]
    t = rank_transfer(xs, ys, resamples=resamples).to_dict()
    return {**t, **promotion_recall(xs, ys, promote), "weak": is_weak(t["spearman"])}


def scores(losses: Sequence[float | None]) -> list[float | None]:
    """Losses as a ranking where higher is better: −loss (None stays None)."""
    return [None if v is None else -v for v in losses]


def rung_rows(
    qualities: Qualities,
    ladder: Ladder,
    promote: float,
    floor: float | None,
    resamples: int = RESAMPLES,
    missing: Mapping[int, int] | None = None,
    losses: Qualities | None = None,
) -> list[dict[str, Any]]:
    """One row per rung: ``steps``, ``quality`` (distribution), ``failed`` and ``missing``
    (members without a quality there: ``missing[steps]`` of them not trained yet, the rest
    failed), ``vs_full`` (None at the full fidelity itself) and ``vs_target``
    (``compare``), ``loss_vs_full`` and ``loss_vs_target`` (``compare`` of the rung's
    ``scores(losses)`` with the quality there; None at and above the full fidelity and
    without ``losses``); then the target's row, with its distribution only."""
    rows = []
    for r in ladder.fidelities:
        values = qualities[r]
        ok = [v for v in values if v is not None]
        absent = (missing or {}).get(r, 0)
        row: dict[str, Any] = {
            "steps": r,
            "quality": distribution(ok, floor),
            "failed": len(values) - len(ok) - absent,
            "missing": absent,
            "vs_full": None,
            "vs_target": None,
            "loss_vs_full": None,
            "loss_vs_target": None,
        }
        if r != ladder.target:
            if r != ladder.steps:
                row["vs_full"] = compare(values, qualities[ladder.steps], promote, resamples)
            row["vs_target"] = compare(values, qualities[ladder.target], promote, resamples)
        if losses is not None and r < ladder.steps:
            ranked = scores(losses[r])
            row["loss_vs_full"] = compare(ranked, qualities[ladder.steps], promote, resamples)
            row["loss_vs_target"] = compare(ranked, qualities[ladder.target], promote, resamples)
        rows.append(row)
    return rows


def fidelity_names(ladder: Ladder) -> tuple[str, str]:
    """The named fidelities of the full fidelity and the target in the ``transfer`` table."""
    return f"full@{ladder.steps}", f"target@{ladder.target}"


def transfer_rows(rows: Sequence[dict[str, Any]], ladder: Ladder) -> list[TransferIn]:
    """Each rung's correlations as ``transfer`` rows: ``rung@R`` (its quality) and
    ``loss@R`` (its held-out loss, where the row has one) against ``full@S`` and ``target@T``
    (named fidelities, like a search ladder's ``ladder@…``), ``ranked_by`` saying which."""
    full, target = fidelity_names(ladder)
    names = ("n", "spearman", "spearman_low", "spearman_high", "kendall", "kendall_low", "kendall_high")
    pairs = (
        ("rung", "vs_full", full),
        ("rung", "vs_target", target),
        ("loss", "loss_vs_full", full),
        ("loss", "loss_vs_target", target),
    )
    out = []
    for row in rows:
        for lower, key, higher in pairs:
            c = row.get(key)
            if c is not None:
                by = "loss" if lower == "loss" else "quality"
                out.append(
                    TransferIn(f"{lower}@{row['steps']}", higher, **{k: c[k] for k in names}, ranked_by=by)
                )
    return out


__all__ = [
    "compare",
    "distribution",
    "fidelity_names",
    "promotion_recall",
    "promotion_size",
    "rung_rows",
    "scores",
    "top_k",
    "transfer_rows",
]
