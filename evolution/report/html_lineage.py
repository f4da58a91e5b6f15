"""The lineage figure of the HTML run report: an individual and its ancestors back to the
seeds, laid out by generation, edges coloured and labelled by the operator that made the
child; a menu switches between the best individual and each front member."""

from __future__ import annotations

import plotly.graph_objects as go  # type: ignore[import-untyped]

from dogma_evolve.evolution.report.html_data import Birth, ReportData
from dogma_evolve.evolution.report.html_figures import HOVER, hover_rows, layout, sequence_chars, whole_ticks

EDGE_LABELS = 80  # lineages with at most this many edges get their operator written on them


def _lineage_layout(nodes: list[Birth]) -> dict[int, tuple[float, float]]:
    """(generation, lane) of each node: the individual on lane 0, each older generation's
    ancestors ordered by the mean lane of their children in the drawing."""
    ids = {b.id for b in nodes}
    children: dict[int, list[int]] = {}
    for b in nodes:
        for p in b.parents:
            if p in ids:
                children.setdefault(p, []).append(b.id)
    pos: dict[int, tuple[float, float]] = {}
    by_gen: dict[int, list[Birth]] = {}
    for b in nodes:
        by_gen.setdefault(b.generation, []).append(b)
    for gen in sorted(by_gen, reverse=True):
        row = by_gen[gen]

        def lane(b: Birth) -> float:
            kids = [pos[c][1] for c in children.get(b.id, []) if c in pos]
            return sum(kids) / len(kids) if kids else 0.0

        row.sort(key=lambda b: (lane(b), b.id))
        for n, b in enumerate(row):
            pos[b.id] = (float(gen), n - (len(row) - 1) / 2)
    return pos


def _lineage_traces(ident: int, nodes: list[Birth], visible: bool, chars: int | None) -> list[go.Scatter]:
    pos = _lineage_layout(nodes)
    by_id = {b.id: b for b in nodes}
    edges: dict[str, list[tuple[Birth, Birth]]] = {}
    for child in nodes:
        for p in child.parents:
            if p in by_id:
                edges.setdefault(child.operator or "?", []).append((by_id[p], child))
    traces = []
    n_edges = sum(len(v) for v in edges.values())
    for op, pairs in sorted(edges.items()):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for parent, child in pairs:
            xs += [pos[parent.id][0], pos[child.id][0], None]
            ys += [pos[parent.id][1], pos[child.id][1], None]
        traces.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=op,
                legendgroup=op,
                visible=visible,
                hoverinfo="skip",
                line={"width": 1.5},
            )
        )
        mid_x = [(pos[p.id][0] + pos[c.id][0]) / 2 for p, c in pairs]
        mid_y = [(pos[p.id][1] + pos[c.id][1]) / 2 for p, c in pairs]
        traces.append(
            go.Scatter(
                x=mid_x,
                y=mid_y,
                mode="text" if n_edges <= EDGE_LABELS else "markers",
                text=[op] * len(pairs),
                textfont={"size": 9},
                marker={"size": 3},
                name=op,
                legendgroup=op,
                showlegend=False,
                visible=visible,
                hovertemplate=f"{op}: #%{{customdata[0]}} → #%{{customdata[1]}}<extra></extra>",
                customdata=[[p.id, c.id] for p, c in pairs],
            )
        )
    seeds = [b.operator is None for b in nodes]
    traces.append(
        go.Scatter(
            x=[pos[b.id][0] for b in nodes],
            y=[pos[b.id][1] for b in nodes],
            mode="markers",
            name=f"#{ident} and its ancestors",
            visible=visible,
            marker={
                "size": [14 if b.id == ident else 9 for b in nodes],
                "symbol": ["square" if s else "circle" for s in seeds],
                "color": [round(b.quality, 4) for b in nodes],
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": "quality"}, "thickness": 12},
                "line": {"width": 1, "color": "#333"},
            },
            customdata=hover_rows(nodes, chars),
            hovertemplate=HOVER,
        )
    )
    return traces


def lineage_figure(data: ReportData) -> go.Figure | None:
    """The best individual's ancestry (squares: seeds), a menu for each front member's."""
    if not data.lineages:
        return None
    by_id, chars = data.by_id, sequence_chars(data)
    fig = go.Figure()
    spans: list[tuple[int, int, int]] = []  # (individual, first trace, trace count)
    for n, (ident, nodes) in enumerate(data.lineages.items()):
        traces = _lineage_traces(ident, nodes, n == 0, chars)
        spans.append((ident, len(fig.data), len(traces)))
        fig.add_traces(traces)

    def title(ident: int) -> str:
        b = by_id[ident]
        what = "best individual" if ident == data.best else "front member"
        cut = " (nearest ancestors only)" if data.lineage_truncated.get(ident) else ""
        return f"lineage of the {what} #{ident} (quality {b.quality:.4f}) back to the seeds{cut}"

    def dtick(ident: int) -> int:
        gens = [b.generation for b in data.lineages[ident]]
        return whole_ticks(max(gens) - min(gens))

    buttons = []
    for ident, start, count in spans:
        visible = [start <= k < start + count for k in range(len(fig.data))]
        label = f"#{ident} q {by_id[ident].quality:.3f}" + (" (best)" if ident == data.best else "")
        update = {"title.text": title(ident), "xaxis.dtick": dtick(ident), "xaxis.autorange": True}
        buttons.append({"label": label, "method": "update", "args": [{"visible": visible}, update]})
    fig.update_xaxes(tick0=0, dtick=dtick(spans[0][0]))
    fig.update_layout(
        updatemenus=[
            {
                "buttons": buttons,
                "direction": "down",
                "x": 1.0,
                "xanchor": "right",
                "y": 1.12,
                "yanchor": "top",
            }
        ]
    )
    fig.update_yaxes(showticklabels=False, zeroline=False)
    return layout(fig, title(spans[0][0]), "generation", "", height=560)
