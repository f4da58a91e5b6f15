"""The Plotly figures of the HTML run report, one function per figure, from
`report_html_data.ReportData`. Each returns a figure, or None when the run has nothing
for it (a single-task run has no per-task curves, a single-fidelity run no transfer).

Hover text carries each point's individual id and sequence view. Sequence views are the
bulk of a large report, so when they would pass `HOVER_BUDGET` characters the points off
the front get a shortened view (`evolve audit ID` shows the whole genome).
"""

from __future__ import annotations

import html
from collections import Counter

import plotly.graph_objects as go  # type: ignore[import-untyped]

from dogma_evolve.evolution.report.html_data import Birth, ReportData
from dogma_evolve.evolution.transfer_audit import ranked_by

HOVER_BUDGET = 2_400_000  # characters of sequence view in the Pareto plots' hover data
FAMILIES_SHOWN = 12  # the most frequent families; the rest are summed as "other"
COST_TITLES = {"params": "parameters", "state_bytes": "inference-state bytes"}


def whole_ticks(span: float) -> int:
    """The tick step of a generation axis: whole generations, about ten ticks."""
    return max(1, round(span / 10))


def layout(fig: go.Figure, title: str, x: str, y: str, height: int = 460) -> go.Figure:
    fig.update_layout(
        title={"text": title},
        xaxis_title=x,
        yaxis_title=y,
        height=height,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        legend={"orientation": "h", "y": -0.18},
        hoverlabel={"align": "left"},
    )
    if x == "generation" and "dtick" not in (fig.layout.xaxis.to_plotly_json()):
        span = max(
            (t for trace in fig.data for t in (trace.x or ()) if isinstance(t, (int, float))), default=0
        )
        fig.update_xaxes(tick0=0, dtick=whole_ticks(span))
    return fig


def number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"


#: The hover text of an individual, from `hover_rows`: written once per trace, the values
#: per point as plain strings and numbers (Plotly's JSON escapes every "<" and "/" in text).
HOVER = (
    "<b>#%{customdata[0]}</b> gen %{customdata[1]} (%{customdata[2]})<br>quality %{customdata[3]:.4f}"
    " · params %{customdata[4]} · state bytes %{customdata[5]}<br>%{customdata[6]}<extra></extra>"
)


def hover_rows(births: list[Birth], sequence_chars: int | None = None) -> list[list[object]]:
    """`customdata` for HOVER; sequence views longer than `sequence_chars` are shortened."""
    rows: list[list[object]] = []
    for b in births:
        seq = b.sequence
        if sequence_chars is not None and len(seq) > sequence_chars:
            seq = seq[: max(sequence_chars - 3, 0)] + "..."
        made = b.operator or ("seed" if b.generation == 0 else "immigrant")
        rows.append(
            [
                b.id,
                b.generation,
                made,
                round(b.quality, 4),
                number(b.params),
                number(b.state_bytes),
                html.escape(seq),
            ]
        )
    return rows


def sequence_chars(data: ReportData) -> int | None:
    """Characters of sequence view per hover text so that the Pareto plots fit the budget."""
    panels = max(len(data.fronts), 1)
    shown = [b for b in data.births if b.status == "ok"]
    total = sum(len(b.sequence) for b in shown) * panels
    if total <= HOVER_BUDGET or not shown:
        return None
    return max(40, HOVER_BUDGET // (len(shown) * panels))


def pareto(data: ReportData, cost: str) -> go.Figure | None:
    """Quality against one cost for every evaluated individual; its front highlighted."""
    front = data.fronts.get(cost)
    if not front:
        return None
    chars = sequence_chars(data)
    on_front = set(front)
    by_id = data.by_id
    fig = go.Figure()
    low = [b for b in data.births if b.status == "ok" and not b.final and getattr(b, cost) is not None]
    if low:
        fig.add_trace(
            go.Scatter(
                x=[getattr(b, cost) for b in low],
                y=[round(b.quality, 5) for b in low],
                mode="markers",
                name="min_steps result only (not comparable)",
                marker={"size": 4, "color": "#bbbbbb"},
                customdata=hover_rows(low, chars),
                hovertemplate=HOVER,
            )
        )
    rest = [
        b
        for b in data.births
        if b.status == "ok" and b.final and b.id not in on_front and getattr(b, cost) is not None
    ]
    fig.add_trace(
        go.Scatter(
            x=[getattr(b, cost) for b in rest],
            y=[round(b.quality, 5) for b in rest],
            mode="markers",
            name="evaluated",
            marker={
                "size": 5,
                "color": [b.generation for b in rest],
                "colorscale": "Viridis",
                "opacity": 0.6,
                "colorbar": {"title": {"text": "generation"}, "thickness": 12},
            },
            customdata=hover_rows(rest, chars),
            hovertemplate=HOVER,
        )
    )
    members = [by_id[i] for i in front]
    fig.add_trace(
        go.Scatter(
            x=[getattr(b, cost) for b in members],
            y=[round(b.quality, 5) for b in members],
            mode="lines+markers",
            line={"shape": "hv", "color": "#d62728", "width": 1.5},
            name=f"Pareto front ({len(members)})",
            marker={
                "size": 10,
                "color": "#d62728",
                "symbol": "diamond",
                "line": {"width": 1, "color": "white"},
            },
            customdata=hover_rows(members),
            hovertemplate=HOVER,
        )
    )
    fig.update_xaxes(type="log")
    name = COST_TITLES.get(cost, cost)
    return layout(fig, f"quality ↑ vs {name} ↓", f"{name} (log scale)", "quality", height=520)


def quality(data: ReportData) -> go.Figure:
    gens = [g.generation for g in data.generations]
    mode = "lines+markers" if len(gens) <= 60 else "lines"
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=gens, y=[round(g.best_quality, 5) for g in data.generations], name="best", mode=mode)
    )
    fig.add_trace(
        go.Scatter(x=gens, y=[round(g.mean_quality, 5) for g in data.generations], name="mean", mode=mode)
    )
    return layout(fig, "population quality per generation", "generation", "quality")


def per_task(data: ReportData) -> go.Figure | None:
    tasks = sorted({t for g in data.generations for t in (*g.best_per_task, *g.mean_per_task)})
    if not tasks:
        return None
    gens = [g.generation for g in data.generations]
    fig = go.Figure()
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    for n, task in enumerate(tasks):
        color = palette[n % len(palette)]
        best = [round(g.best_per_task.get(task, 0.0), 5) for g in data.generations]
        mean = [round(g.mean_per_task.get(task, 0.0), 5) for g in data.generations]
        fig.add_trace(go.Scatter(x=gens, y=best, name=f"{task} (best)", line={"color": color}))
        fig.add_trace(go.Scatter(x=gens, y=mean, name=f"{task} (mean)", line={"color": color, "dash": "dot"}))
    return layout(
        fig,
        "per task: the best individual's score and the population mean",
        "generation",
        "normalised accuracy",
    )


def operator_probabilities(data: ReportData) -> go.Figure | None:
    if len(data.generations) < 2:
        return None
    gens = [g.generation for g in data.generations]
    ops = list(data.generations[-1].probabilities)
    fig = go.Figure()
    for op in ops:
        s_t = [g.credit.get(op, (0.0, 0.0)) for g in data.generations]
        fig.add_trace(
            go.Scatter(
                x=gens,
                y=[round(g.probabilities.get(op, 0.0), 4) for g in data.generations],
                name=op,
                mode="lines",
                customdata=[[round(s, 1), int(t)] for s, t in s_t],
                hovertemplate=op
                + ": p %{y:.3f} (credit %{customdata[0]} of %{customdata[1]} trials)<extra></extra>",
            )
        )
    return layout(
        fig,
        "meta-policy: each operator's probability after each generation (credit replayed from births)",
        "generation",
        "probability of being chosen",
    )


def operator_use(data: ReportData) -> go.Figure:
    gens = [g.generation for g in data.generations]
    ops = sorted({op for g in data.generations for op in g.operators})
    fig = go.Figure()
    for op in ops:
        fig.add_trace(go.Bar(x=gens, y=[g.operators.get(op, 0) for g in data.generations], name=op))
    fig.update_layout(barmode="stack", bargap=0.05)
    return layout(fig, "how each generation's births were made", "generation", "births")


def policy_table(data: ReportData) -> go.Figure | None:
    """The stored meta-policy memory: success rate by operator and context."""
    if not data.policy:
        return None
    ops = sorted({r.operator for r in data.policy})
    contexts = sorted({r.context for r in data.policy})
    cell = {(r.operator, r.context): r for r in data.policy}
    z, text = [], []
    for op in ops:
        z.append(
            [
                round(cell[op, c].successes / cell[op, c].trials, 3)
                if (op, c) in cell and cell[op, c].trials
                else None
                for c in contexts
            ]
        )
        text.append(
            [
                f"{cell[op, c].successes:.1f} / {cell[op, c].trials:.0f}" if (op, c) in cell else ""
                for c in contexts
            ]
        )
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=contexts,
            y=ops,
            text=text,
            texttemplate="%{text}",
            colorscale="RdYlGn",
            zmin=0,
            zmax=1,
            colorbar={"title": {"text": "success rate"}, "thickness": 12},
            hovertemplate="%{y} in %{x}: rate %{z} (%{text})<extra></extra>",
        )
    )
    return layout(
        fig,
        "operator credit in the store (successes / trials by context)",
        "context (task/region type)",
        "operator",
        height=max(320, 60 + 40 * len(ops)),
    )


def families(data: ReportData) -> go.Figure:
    totals: Counter[str] = Counter()
    for g in data.generations:
        totals.update(g.families)
    shown = [f for f, _ in totals.most_common(FAMILIES_SHOWN)]
    gens = [g.generation for g in data.generations]
    fig = go.Figure()
    for fam in shown:
        fig.add_trace(
            go.Scatter(
                x=gens,
                y=[g.families.get(fam, 0) for g in data.generations],
                name=fam,
                stackgroup="one",
                mode="lines",
            )
        )
    if len(totals) > len(shown):
        other = [sum(n for f, n in g.families.items() if f not in shown) for g in data.generations]
        fig.add_trace(
            go.Scatter(
                x=gens,
                y=other,
                name=f"other ({len(totals) - len(shown)} families)",
                stackgroup="one",
                mode="lines",
            )
        )
    return layout(fig, "population composition by design family", "generation", "members", height=520)


def failures(data: ReportData) -> go.Figure | None:
    statuses = sorted({s for g in data.generations for s in g.failures})
    if not statuses:
        return None
    gens = [g.generation for g in data.generations]
    fig = go.Figure()
    for status in statuses:
        fig.add_trace(go.Bar(x=gens, y=[g.failures.get(status, 0) for g in data.generations], name=status))
    fig.update_layout(barmode="stack")
    return layout(fig, "failed evaluations by type and generation", "generation", "births")


def fidelity_transfer(data: ReportData, rho: float | None) -> go.Figure | None:
    promoted = [b for b in data.births if b.low_high is not None]
    if not promoted:
        return None
    fig = go.Figure(
        go.Scatter(
            x=[round(b.low_high[0], 5) for b in promoted if b.low_high],
            y=[round(b.low_high[1], 5) for b in promoted if b.low_high],
            mode="markers",
            marker={
                "size": 7,
                "color": [b.generation for b in promoted],
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": "generation"}, "thickness": 12},
            },
            customdata=hover_rows(promoted),
            hovertemplate=HOVER,
            name="promoted",
        )
    )
    spearman = "undefined" if rho is None else f"{rho:.3f}"
    return layout(
        fig,
        f"fidelity transfer: {len(promoted)} promoted candidates, Spearman ρ {spearman}",
        (
            f"−held-out loss after min_steps ({data.config.min_steps}), what promotion ranks by"
            if ranked_by(data.config) == "loss"
            else f"quality after min_steps ({data.config.min_steps})"
        ),
        f"quality after the full steps ({data.config.steps})",
    )
