"""A calibration summary (``evolution.calibrate.study.summary`` or ``stored_summary``) as
text lines: what `evolve calibrate` prints and `evolve report` shows for a calibration run.
No torch, no store: it formats a plain document."""

from __future__ import annotations

from typing import Any

WEAK = 0.3  # as evaluation.transfer.WEAK_TRANSFER (not imported: that module loads scipy)


def _num(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value:+.2f}" if signed else f"{value:.3f}"


def _corr(c: dict[str, Any] | None, name: str) -> str:
    """``+0.41 [+0.02, +0.75]`` (value and interval), ``+0.41`` without one, ``-`` when undefined."""
    if c is None:
        return "="
    text = _num(c[name])
    if c[f"{name}_low"] is not None:
        text += f" [{_num(c[f'{name}_low'])}, {_num(c[f'{name}_high'])}]"
    return text


def _recall(c: dict[str, Any] | None) -> str:
    if c is None:
        return "="
    if c["recall"] is None:
        return "-"
    return f"{c['recall']:.2f} ({c['chance']:.2f})"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def calibration_lines(data: dict[str, Any]) -> list[str]:
    """The settings line, the ranking table (per rung, against the full fidelity and the
    target), the quality table (per fidelity) and a line per weak rung."""
    presets, n = data["presets"], len(data["panel"])
    k = max((r["vs_target"]["k"] for r in data["rows"] if r["vs_target"]), default=0)
    floor = data["floor"]
    lines = [
        f"calibration {data['run_id']} on {data['task']}: {n} genomes ({presets} presets, {n - presets} "
        f"random, seed {data['seed']}), full fidelity {data['steps']:,} steps, target {data['target']:,}; "
        f"promotion of the best {100 * data['promote']:g}% (k = {k} of the panel)",
        "ranking of the whole panel at each rung (ρ Spearman, τ Kendall, 95% bootstrap intervals; recall: "
        "share of the true top k a promotion at the rung keeps, chance in brackets; n: members measured at "
        "both; '=' the rung itself):",
    ]
    head = (
        f"{'steps':>7} {'n':>3} {'ρ vs full':<22} {'τ vs full':<22} {'recall':<11}  "
        f"{'n':>3} {'ρ vs target':<22} {'τ vs target':<22} {'recall':<11}"
    )
    lines.append(head.rstrip())
    for r in data["rows"]:
        if r["vs_target"] is None:
            continue
        f, t = r["vs_full"], r["vs_target"]
        lines.append(
            f"{r['steps']:>7,} {'=' if f is None else f['n']:>3} {_corr(f, 'spearman'):<22} "
            f"{_corr(f, 'kendall'):<22} {_recall(f):<11}  {t['n']:>3} {_corr(t, 'spearman'):<22} "
            f"{_corr(t, 'kendall'):<22} {_recall(t):<11}".rstrip()
        )
    floor_text = "no floor" if floor is None else f"floor {floor:g}"
    lines.append(
        f"quality at each fidelity (chance 0, {floor_text}; over the members trained there; "
        "missing: not trained yet):"
    )
    lines.append(
        f"{'steps':>7} {'n':>3} {'failed':>6}  {'min':>7} {'q1':>7} {'median':>7} {'q3':>7} {'max':>7}  "
        f"{'≤chance':>7} {'<floor':>7} {'missing':>7}"
    )
    for r in data["rows"]:
        q = r["quality"]
        label = f"{r['steps']:,}" + ("*" if r["steps"] == data["target"] else "")
        lines.append(
            f"{label:>7} {q['n']:>3} {r['failed']:>6}  {_num(q['min'], False):>7} {_num(q['q1'], False):>7} "
            f"{_num(q['median'], False):>7} {_num(q['q3'], False):>7} {_num(q['max'], False):>7}  "
            f"{_share(q['chance']):>7} {_share(q['floor']):>7} {r.get('missing', 0):>7}"
        )
    lines.append("* the target")
    for r in data["rows"]:
        for key, what in (("vs_full", "the full fidelity"), ("vs_target", "the target")):
            c = r[key]
            if c is not None and c["weak"]:
                lines.append(
                    f"warning: at {r['steps']:,} steps the panel's ranking barely predicts {what}'s "
                    f"(ρ {c['spearman']:+.2f} < {WEAK})"
                )
    if data.get("missing"):
        lines.append(f"{data['missing']} trainings not stored yet: the statistics cover the rest")
    return lines


__all__ = ["calibration_lines"]
