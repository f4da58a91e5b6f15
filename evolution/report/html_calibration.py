"""`evolve report --html FILE` of a calibration run: one self-contained page (plotly.js inline,
as the search's report) with the calibration's tables as `evolve report` prints them and, with a
language target, one scatter per size: each panel member's fitness (its quality at the full
fidelity) against its held-out text loss there, coloured by family, named on hover. A fitness
that means language puts the members on a falling line: higher quality, lower loss."""

from __future__ import annotations

import html
import os
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go  # type: ignore[import-untyped]
import plotly.io as pio  # type: ignore[import-untyped]
import plotly.offline  # type: ignore[import-untyped]

from dogma_evolve.evolution.calibrate.table import calibration_lines
from dogma_evolve.evolution.report.html import CSS, PLOT_CONFIG, write_atomic


def text_figures(summary: dict[str, Any]) -> list[go.Figure]:
    """Per size of the language target: fitness at the full fidelity (x) against held-out text
    loss (y), one trace per family."""
    text = summary.get("text")
    if not text:
        return []
    full = str(summary["steps"])
    figures = []
    for row in text["rows"]:
        fig = go.Figure()
        families = sorted({str(m.get("family", "unknown")) for m in summary["panel"]})
        for family in families:
            members = [
                m
                for m in summary["panel"]
                if m.get("family", "unknown") == family
                and m["quality"].get(full) is not None
                and m.get("text", {}).get(row["label"]) is not None
            ]
            fig.add_trace(
                go.Scatter(
                    x=[m["quality"][full] for m in members],
                    y=[m["text"][row["label"]] for m in members],
                    text=[m["name"] for m in members],
                    mode="markers",
                    name=family,
                    hovertemplate="%{text}<br>quality %{x:.3f}<br>text loss %{y:.3f}<extra></extra>",
                )
            )
        entry = next((e for e in row["by_fidelity"] if e["steps"] == summary["steps"]), None)
        rho = None if entry is None else entry["quality"]["spearman"]
        shown = "-" if rho is None else f"{rho:+.2f}"
        fig.update_layout(
            title=f"fitness ({summary['steps']} steps) against {text['task']} at {row['label']}: ρ {shown}",
            xaxis_title=f"quality on {summary['task']} at {summary['steps']} steps",
            yaxis_title=f"held-out loss on {text['task']} ({text['tokens_per_param']:g} tokens/param)",
            height=460,
        )
        figures.append(fig)
    return figures


def build_calibration_html(summary: dict[str, Any]) -> str:
    """The page of a calibration summary (`evolution.calibrate.calibration.stored_summary`)."""
    figures = text_figures(summary)
    parts = [
        '<div class="figure">'
        + pio.to_html(
            fig, full_html=False, include_plotlyjs=False, div_id=f"figure-{k + 1}", config=PLOT_CONFIG
        )
        + "</div>"
        for k, fig in enumerate(figures)
    ]
    table = html.escape("\n".join(calibration_lines(summary)))
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    run = html.escape(str(summary["run_id"]))
    status = html.escape(str(summary.get("status", "")))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="dogma-figures" content="{len(figures)}">
<title>evolve report · calibration {run}</title>
<style>{CSS}</style>
<script type="text/javascript">window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script>
<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>
</head>
<body>
<header><h1>DOGMA evolve · calibration {run}</h1>
<p>{status} · {len(summary["panel"])} genomes · written {now}</p></header>
<main>
<section id="text"><h2>Fitness against language</h2>{"".join(parts) or "<p>no language target</p>"}</section>
<section id="tables"><h2>Tables</h2><pre style="overflow-x: auto">{table}</pre></section>
</main>
</body>
</html>
"""


def write_calibration_report(summary: dict[str, Any], path: str | os.PathLike[str]) -> int:
    """Write the page to `path` (atomically); its size in bytes."""
    text = build_calibration_html(summary)
    write_atomic(path, text)
    return len(text.encode("utf-8"))


__all__ = ["build_calibration_html", "text_figures", "write_calibration_report"]
