"""What `evolve run --ladder` left in the store, as data and as text for `run`, `report` and
`audit`: the elite ranked by extrapolated loss and the ladder's rank transfer
(`evolution.scale.search_ladder` trains and stores them)."""

from __future__ import annotations

from typing import Any

from dogma_evolve.evaluation.transfer import WEAK_TRANSFER, is_weak
from dogma_evolve.evolution.transfer_audit import correlation_text, interval, is_step_fidelity, transfer_dict
from dogma_evolve.store import Store


def ladder_summary(store: Store, run_id: str) -> dict[str, Any]:
    """``ladder``: the ranked rows of the run's latest ladder (best first; [] without one),
    ``ladder_transfer``: its rank correlations, ``ladder_warning``: a line when the search's
    order did not hold up the ladder (Spearman ρ < 0.3), ``ladder_verdict``: in plain words
    whether it held (``verdict``), ``ladder_regime``: what its budget makes of the fit
    (`evolution.scale.regime`: a fixed-data ladder is not a scaling law)."""
    rows = store.ladder(run_id)
    if not rows:
        return {
            "ladder": [],
            "ladder_transfer": [],
            "ladder_warning": None,
            "ladder_verdict": None,
            "ladder_regime": None,
        }
    from dogma_evolve.evolution.scale.search_ladder import ladder_row_dict  # torch: a run with a ladder

    last = max(r.generation for r in rows)
    transfer = [
        transfer_dict(t)
        for t in store.transfer(run_id)
        if t.generation == last and not is_step_fidelity(t.lower_fidelity)
    ]
    search = next((t for t in transfer if t["lower_fidelity"] == "search"), None)
    warning = None
    if search is not None and is_weak(search["spearman"]):
        warning = (
            f"WARNING: the search's ranking did not hold up the ladder: Spearman ρ {search['spearman']:.2f} "
            f"{interval(search['spearman_low'], search['spearman_high'])} < {WEAK_TRANSFER} between the "
            f"elite's search quality and its extrapolated loss ({search['higher_fidelity']}): pick by the "
            "ladder's rank, not the search's"
        )
    return {
        "ladder": [{"generation": r.generation, **ladder_row_dict(r)} for r in rows if r.generation == last],
        "ladder_transfer": transfer,
        "ladder_warning": warning,
        "ladder_verdict": verdict(search),
        "ladder_regime": regime_of(store, run_id),
    }


def verdict(search: dict[str, Any] | None) -> str | None:
    """Whether the search's order held up the ladder, from the ``"search"`` → ``"ladder@N"``
    transfer row: *held* when the Spearman interval lies above 0, *reversed* when below,
    otherwise *not shown* (the interval includes 0, or there is none: fewer than 6 fitted
    elites, `evaluation.transfer.MIN_INTERVAL_PAIRS`)."""
    if search is None:
        return None
    rho, low, high, n = search["spearman"], search["spearman_low"], search["spearman_high"], search["n"]
    if rho is None:
        return (
            f"the search's order at scale is not determined: {n} fitted elite(s), a rank correlation "
            "needs 3 that differ"
        )
    text = f"Spearman ρ {rho:.2f} {interval(low, high)} over {n} fitted elites"
    if low is None or high is None:
        return f"the search's order at scale is not determined: {text}; an interval needs 6 (--ladder-elites)"
    if low > 0:
        return f"the search's order held at scale: {text}, the interval above 0"
    if high < 0:
        return f"the search's order reversed at scale: {text}, the interval below 0"
    return (
        f"the search's order did not demonstrably hold at scale: {text}, the interval includes 0: rank "
        "the elite by the ladder (--select-by ladder)"
    )


def regime_of(store: Store, run_id: str) -> str | None:
    """The regime line of a run's ladder, from its config's budget (a run stored before
    ``ladder_tokens_per_param`` existed trained a fixed ``ladder_tokens``)."""
    from dogma_evolve.evolution.scale.defaults import LADDER_TOKENS_PER_PARAM
    from dogma_evolve.evolution.scale.regime import classify

    run = store.get_run(run_id)
    if run is None:
        return None
    config = run.config
    tokens = config.get("ladder_tokens")
    per_param = config.get("ladder_tokens_per_param", LADDER_TOKENS_PER_PARAM)
    if tokens is None and per_param is None:
        return None
    regime = classify(None if tokens is not None else float(per_param), tokens and round(tokens), [], None)
    return regime.message


def individual_ladder(store: Store, run_id: str, individual_id: int) -> dict[str, Any] | None:
    """The individual's row of its run's latest ladder, if it went up one."""
    rows = ladder_summary(store, run_id)["ladder"]
    return next((r for r in rows if r["individual_id"] == individual_id), None)


def loss_text(row: dict[str, Any]) -> str:
    if row["loss"] is None:
        return f"not fitted: {row['note']}"
    return (
        f"loss {row['loss']:.4f} [{row['loss_low']:.4f}, {row['loss_high']:.4f}] "
        f"at {row['target_params']:,.0f} params; "
        f"α {row['alpha']:.3f} [{row['alpha_low']:.3f}, {row['alpha_high']:.3f}], "
        f"E {row['E']:.3f}, fitted over {row['params_low']:,.0f}-{row['params_high']:,.0f}"
    )


def ladder_lines(
    rows: list[dict[str, Any]],
    transfer: list[dict[str, Any]],
    warning: str | None = None,
    regime: str | None = None,
    verdict: str | None = None,
) -> list[str]:
    """The ladder as text lines: one per elite individual, then the transfer and the regime."""
    if not rows:
        return []
    target = rows[0]["target_params"]
    lines = [
        f"ladder: the elite ranked by loss extrapolated to {target:,.0f} non-embedding parameters "
        "(95% intervals):"
    ]
    for r in rows:
        rank = "-" if r["rank"] is None else str(r["rank"])
        quality = "?" if r["quality"] is None else f"{r['quality']:.3f}"
        lines.append(
            f"  {rank:>2}. individual {r['individual_id']} (search quality {quality}): {loss_text(r)}"
        )
    for t in transfer:
        lines.append(f"  transfer {t['lower_fidelity']} -> {t['higher_fidelity']}: {correlation_text(t)}")
    if regime:
        lines.append(f"  regime: {regime}")
    if verdict:
        lines.append(f"  verdict: {verdict}")
    if warning:
        lines.append(warning)
    return lines


__all__ = ["individual_ladder", "ladder_lines", "ladder_summary", "loss_text", "regime_of", "verdict"]
