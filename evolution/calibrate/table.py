"""A calibration summary (``evolution.calibrate.calibration.summary`` or ``stored_summary``) as
text lines: what `evolve calibrate` prints and `evolve report` shows for a calibration run.
No torch, no store: it formats a plain document. A summary written before the rungs were
ranked by held-out loss lacks ``loss_vs_full``/``loss_vs_target``: its table has no loss
lines."""

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


def _ranking(steps: str, by: str, f: dict[str, Any] | None, t: dict[str, Any] | None) -> str:
    """One line of the ranking table: a rung ranked ``by`` its quality or its held-out loss."""
    return (
        f"{steps:>7} {by:<13} {'=' if f is None else f['n']:>3} {_corr(f, 'spearman'):<22} "
        f"{_corr(f, 'kendall'):<22} {_recall(f):<11}  {'=' if t is None else t['n']:>3} "
        f"{_corr(t, 'spearman'):<22} {_corr(t, 'kendall'):<22} {_recall(t):<11}"
    ).rstrip()


def calibration_lines(data: dict[str, Any]) -> list[str]:
    """The settings line, the ranking table (per rung, by its quality and, below the full
    fidelity, by its held-out loss, against the full fidelity's and the target's quality),
    the quality table (per fidelity) and a line per weak ranking."""
    presets, n = data["presets"], len(data["panel"])
    k = max((r["vs_target"]["k"] for r in data["rows"] if r["vs_target"]), default=0)
    floor = data["floor"]
    lines = [
        f"calibration {data['run_id']} on {data['task']}: {n} genomes ({presets} presets, {n - presets} "
        f"random, seed {data['seed']}), full fidelity {data['steps']:,} steps, target {data['target']:,}; "
        f"promotion of the best {100 * data['promote']:g}% (k = {k} of the panel)",
        "ranking of the whole panel at each rung against the quality of the full fidelity and of the "
        "target (ρ Spearman, τ Kendall, 95% bootstrap intervals; recall: share of the true top k a "
        "promotion at the rung keeps, chance in brackets; n: members measured at both; '=' the rung "
        "itself):",
    ]
    head = (
        f"{'steps':>7} {'ranked by':<13} {'n':>3} {'ρ vs full':<22} {'τ vs full':<22} {'recall':<11}  "
        f"{'n':>3} {'ρ vs target':<22} {'τ vs target':<22} {'recall':<11}"
    )
    lines.append(head.rstrip())
    by_loss = False
    for r in data["rows"]:
        if r["vs_target"] is None:
            continue
        lines.append(_ranking(f"{r['steps']:,}", "quality", r["vs_full"], r["vs_target"]))
        if r.get("loss_vs_full") is not None or r.get("loss_vs_target") is not None:
            lines.append(_ranking("", "held-out loss", r.get("loss_vs_full"), r.get("loss_vs_target")))
            by_loss = True
    tasks = [t for t in str(data["task"]).split(",") if t.strip()]
    if by_loss:
        lines.append("held-out loss: the rung's loss, lowest first, as a search's first stage promotes")
    elif len(tasks) > 1 and any("loss_vs_target" in r for r in data["rows"]):
        lines.append("no held-out loss ranking: with several tasks a search promotes by quality")
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
        for key, by, what in (
            ("vs_full", "quality", "the full fidelity"),
            ("vs_target", "quality", "the target"),
            ("loss_vs_full", "held-out loss", "the full fidelity"),
            ("loss_vs_target", "held-out loss", "the target"),
        ):
            c = r.get(key)
            if c is not None and c["weak"]:
                lines.append(
                    f"warning: at {r['steps']:,} steps the panel's ranking by {by} barely predicts "
                    f"{what}'s (ρ {c['spearman']:+.2f} < {WEAK})"
                )
    if data.get("text"):
        lines += text_lines(data)
    if data.get("missing"):
        lines.append(f"{data['missing']} trainings not stored yet: the statistics cover the rest")
    return lines


def text_lines(data: dict[str, Any]) -> list[str]:
    """The language target's tables (`evolution.calibrate.text`): per size, how each fidelity
    ranks the panel against the held-out text loss, then per family at the full fidelity."""
    text = data["text"]
    lines = [
        f"against {text['task']} at {text['tokens_per_param']:g} tokens per non-embedding parameter "
        f"(held-out loss, lower is better), at {', '.join(r['label'] for r in text['rows'])} the "
        "search's size (ρ, τ with 95% bootstrap intervals; recall: share of the k best language models "
        "a promotion keeps, chance in brackets):"
    ]
    lines.append(
        f"{'size':>5} {'steps':>7} {'ranked by':<16} {'n':>3} {'ρ vs text':<22} {'τ vs text':<22} "
        f"{'recall':<11}".rstrip()
    )
    for row in text["rows"]:
        for entry in row["by_fidelity"]:
            for by, key in (("quality", "quality"), ("held-out loss", "loss")):
                c = entry[key]
                if c is None:
                    continue
                lines.append(
                    f"{row['label']:>5} {entry['steps']:>7,} {by:<16} {c['n']:>3} {_corr(c, 'spearman'):<22} "
                    f"{_corr(c, 'kendall'):<22} {_recall(c):<11}".rstrip()
                )
        alone = row.get("size_alone")
        if alone is not None:
            lines.append(
                f"{row['label']:>5} {'':>7} {'parameters':<16} {alone['n']:>3} "
                f"{_corr(alone, 'spearman'):<22} {_corr(alone, 'kendall'):<22} {_recall(alone):<11}".rstrip()
            )
        for entry in row["by_fidelity"]:
            for by, key in (("quality", "quality_given_size"), ("loss", "loss_given_size")):
                c = entry.get(key)
                if c is not None:
                    lines.append(
                        f"{row['label']:>5} {entry['steps']:>7,} {by + ', N out':<16} {c['n']:>3} "
                        f"{_corr(c, 'spearman'):<22} {_corr(c, 'kendall'):<22} {_recall(c):<11}".rstrip()
                    )
        same = row.get("same_members")
        if same is not None:
            first = same["first_label"]
            for entry in same["at_first"]:
                c = entry["quality"]
                lines.append(
                    f"{row['label']:>5} {entry['steps']:>7,} {'quality, at ' + first:<16} {c['n']:>3} "
                    f"{_corr(c, 'spearman'):<22} {_corr(c, 'kendall'):<22} {_recall(c):<11}".rstrip()
                )
            c = same["first_size"]
            lines.append(
                f"{row['label']:>5} {'':>7} {first + ' text loss':<16} {c['n']:>3} "
                f"{_corr(c, 'spearman'):<22} {_corr(c, 'kendall'):<22} {_recall(c):<11}".rstrip()
            )
        loss = row["loss"]
        capped = f", {row['capped']} above --against-max-params" if row.get("capped") else ""
        lines.append(
            f"{row['label']:>5} text loss over {loss['n']} members: min {_num(loss['min'], False)}, median "
            f"{_num(loss['median'], False)}, max {_num(loss['max'], False)}; "
            f"{row['over']} over the text{capped}"
        )
    if any(r.get("size_alone") for r in text["rows"]):
        lines.append(
            "parameters: how the members' non-embedding N alone ranks them (more parameters get more "
            "tokens); 'N out': against the loss with size taken out (residual of loss = a + b·ln N)"
        )
    same = next((r["same_members"] for r in text["rows"] if r.get("same_members")), None)
    if same is not None:
        first = same["first_label"]
        lines.append(
            f"'at {first}': the same fitness against the {first} text loss over the members trained at "
            f"the larger size, like with like; '{first} text loss': how the {first} text loss itself "
            "ranks them there"
        )
    lines.append(
        f"per family (first sequence mixer), at {data['steps']:,} steps: members, mean quality, mean text "
        "loss per size, ρ within the family (3+ members)"
    )
    for k, fam in enumerate(text["rows"][0]["families"] if text["rows"] else []):
        per_size = "  ".join(
            f"{row['label']} {_num(f['loss'], False)} ρ {_num(f['spearman'])}"
            + (f" ({f['measured']} of them)" if f.get("measured", f["n"]) < f["n"] else "")
            for row in text["rows"]
            for f in [row["families"][k]]
        )
        lines.append(f"  {fam['family']:<18} {fam['n']:>3}  {_num(fam['fitness'], False)}  {per_size}")
    for row in text["rows"]:
        full = next((e for e in row["by_fidelity"] if e["steps"] == data["steps"]), None)
        c = None if full is None else full["quality"]
        if c is not None and c["weak"]:
            lines.append(
                f"warning: the fitness ({data['steps']:,} steps) barely ranks the panel as the text "
                f"does at {row['label']} (ρ {_num(c['spearman'])} < {WEAK})"
            )
    return lines


__all__ = ["calibration_lines", "text_lines"]
