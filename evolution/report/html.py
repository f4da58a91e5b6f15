"""`evolve report --html FILE` and `evolve run --report FILE`: one self-contained HTML file
of a run, built with Plotly.

Every script and style is inline (plotly.js once, in the head), so the file opens from
file:// with no network. Sections: the Pareto fronts (quality against parameters and
against inference-state bytes), quality per generation and per task, the lineage of the
best individual and of each front member, operator credit over generations, population
composition by design family, failures by type, the training ledger (tokens, FLOPs,
seconds, FLOP/s and peak memory per generation: `ledger`), and fidelity transfer where the
run is multi-fidelity. The data comes from `report_html_data.collect`, the figures from
`report_html_figures`.

The file is written atomically (a temporary file beside it, then `os.replace`), so a
browser that reloads it never sees half a report; `LiveReport` rewrites it after each
committed generation of a running search.
"""

from __future__ import annotations

import gc
import html
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.io as pio  # type: ignore[import-untyped]
import plotly.offline  # type: ignore[import-untyped]

from dogma_evolve.evolution.objectives import seeds_text
from dogma_evolve.evolution.report import html_figures as figs
from dogma_evolve.evolution.report.html_data import ReportData, collect
from dogma_evolve.evolution.report.html_lineage import lineage_figure
from dogma_evolve.evolution.report.ledger import LEDGER_COLUMNS, ledger_cells, ledger_notes
from dogma_evolve.evolution.report.summary import environment_text
from dogma_evolve.evolution.types import Event
from dogma_evolve.store import Store

PLOT_CONFIG = {"displaylogo": False, "responsive": True}
LIVE_REFRESH_S = 60  # a live report reloads itself this often while its run is running
LIVE_OVERHEAD = 0.2  # at most this share of a run's time goes into rewriting a live report

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #222;
       background: #fafafa; }
header { background: #1f2d3d; color: #fff; padding: 16px 28px; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
header p { margin: 2px 0; color: #cdd6e0; }
nav { padding: 8px 28px; background: #eef1f5; border-bottom: 1px solid #dde2e8; }
nav a { margin-right: 14px; color: #1f4e8c; text-decoration: none; }
main { padding: 8px 28px 40px 28px; max-width: 1400px; }
section { background: #fff; border: 1px solid #e3e6ea; border-radius: 6px; margin: 18px 0;
          padding: 8px 18px 14px; }
section h2 { font-size: 18px; margin: 10px 0 4px 0; }
.note { color: #555; font-size: 14px; margin: 4px 0 8px 0; }
.figure { margin: 10px 0; }
table { border-collapse: collapse; font-size: 14px; }
td, th { border: 1px solid #e3e6ea; padding: 3px 8px; text-align: left; vertical-align: top; }
td.seq { font-family: ui-monospace, monospace; font-size: 12px; word-break: break-all; }
"""


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Reading a long run makes a few hundred thousand small objects; the cyclic garbage
    collector would walk them over and over (half the build time on 10,000 evaluations)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Page:
    def __init__(self) -> None:
        self.sections: list[tuple[str, str, str]] = []  # (anchor, title, body html)
        self.figures = 0

    def figure(self, fig: Any) -> str:
        self.figures += 1
        return (
            '<div class="figure">'
            + pio.to_html(
                fig,
                full_html=False,
                include_plotlyjs=False,
                div_id=f"figure-{self.figures}",
                config=PLOT_CONFIG,
            )
            + "</div>"
        )

    def section(self, anchor: str, title: str, parts: list[str]) -> None:
        self.sections.append((anchor, title, "\n".join(parts)))


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _table(rows: list[tuple[str, str]], seq_rows: tuple[str, ...] = ()) -> str:
    seq = ' class="seq"'
    cells = "".join(
        f"<tr><th>{html.escape(k)}</th><td{seq if k in seq_rows else ''}>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    return f"<table>{cells}</table>"


def _overview(data: ReportData) -> str:
    run, config = data.run, data.config
    evaluated = sum(1 for b in data.births if b.status is not None)
    rows = [
        ("run", run.id),
        ("status", run.shown_status + (f" ({run.stop_reason})" if run.stop_reason else "")),
        ("space / task", f"{config.space} / {run.task}"),
        ("strategy / objectives", f"{config.strategy} / {', '.join(config.objectives)}"),
        ("population / children", f"{config.population} / {config.children}"),
        ("generations committed", str(run.generations)),
        (
            "births / evaluated births / evaluation rows",
            f"{len(data.births)} / {evaluated} / {run.evaluated}",
        ),
    ]
    best = data.by_id.get(data.best) if data.best is not None else None
    if best is not None:
        rows += [
            (
                "best individual",
                f"#{best.id}, generation {best.generation}, quality {best.quality:.4f}"
                f"{seeds_text(best.metrics)}, {figs.number(best.params)} parameters",
            ),
            ("best sequence", best.sequence),
        ]
    return _table(rows, seq_rows=("best sequence",))


def _failure_table(data: ReportData) -> str:
    if not data.failure_reasons:
        return ""
    head = "<tr><th>status</th><th>births</th><th>reason</th></tr>"
    body = "".join(
        f"<tr><td>{html.escape(s)}</td><td>{n}</td><td>{html.escape(r)}</td></tr>"
        for s, r, n in data.failure_reasons
    )
    return f"<table>{head}{body}</table>"


def build_html(data: ReportData, refresh_s: int | None = None) -> str:
    """The report page of `data`; `refresh_s`: the page reloads itself this often."""
    page = _Page()
    parts = [
        _note(
            "Every evaluated individual is a point; hover for its id and sequence view "
            "(`evolve audit ID` shows the whole genome). Red diamonds: the Pareto front of that pair "
            "of objectives among the results at full fidelity."
        )
    ]
    for cost in ("params", "state_bytes"):
        fig = figs.pareto(data, cost)
        if fig is not None:
            parts.append(page.figure(fig))
        else:
            parts.append(
                _note(
                    f"No evaluated individual of this run has the metric `{cost}` "
                    f"({figs.COST_TITLES[cost]}): this space does not measure it."
                )
            )
    page.section("pareto", "Pareto fronts", parts)

    parts = [page.figure(figs.quality(data))]
    task_fig = figs.per_task(data)
    parts.append(
        page.figure(task_fig)
        if task_fig is not None
        else _note("No per-task results: the run has a single task.")
    )
    page.section("quality", "Quality per generation", parts)

    lineage = lineage_figure(data)
    parts = [
        _note(
            "Edges are coloured and labelled by the operator that made the child; squares are seeds. "
            "The menu at the top right shows the lineage of any front member."
        )
    ]
    parts.append(page.figure(lineage) if lineage is not None else _note("No individual was evaluated yet."))
    page.section("lineage", "Lineage", parts)

    parts = []
    prob = figs.operator_probabilities(data)
    if prob is not None:
        parts.append(page.figure(prob))
    parts.append(page.figure(figs.operator_use(data)))
    table = figs.policy_table(data)
    parts.append(
        page.figure(table) if table is not None else _note("The store holds no operator credit for this run.")
    )
    page.section("operators", "Operators and the meta-policy", parts)

    page.section("families", "Design families", [page.figure(figs.families(data))])

    fail = figs.failures(data)
    if fail is None:
        parts = [_note("No genome's evaluation failed.")]
    else:
        parts = [page.figure(fail), _note("The most frequent reasons:"), _failure_table(data)]
    parts.append(_note(environment_text(data.environment) + "."))
    page.section("failures", "Failures: the genomes' own, and the environment's", parts)

    page.section("ledger", "Training ledger", _ledger_parts(data.ledger))

    if data.multi_fidelity:
        transfer = figs.fidelity_transfer(data, _overall_rho(data))
        parts = [
            _note(
                "How well the cheap first stage (min_steps) ranks the candidates it promotes, "
                "against their full-steps quality."
            )
        ]
        parts.append(
            page.figure(transfer) if transfer is not None else _note("No candidate was promoted yet.")
        )
        page.section("fidelity", "Fidelity transfer", parts)
    if data.ladder.get("ladder"):
        page.section("ladder", "Size ladder", _ladder_parts(data.ladder))
    return _assemble(data, page, refresh_s)


def _ledger_parts(ledger: dict[str, Any]) -> list[str]:
    """The run's training ledger per generation and in total (`evolution.report.ledger`)."""
    if not ledger.get("measured", True):
        return [_note("Not recorded: this space's evaluations are table look-ups, nothing is trained.")]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in LEDGER_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in ledger_cells(row)) + "</tr>"
        for row in (*ledger["generations"], ledger["total"])
    )
    return [
        f'<table class="ledger"><tr>{head}</tr>{body}</table>',
        *(_note(line.strip()) for line in ledger_notes(ledger)),
    ]


def _ladder_parts(summary: dict[str, Any]) -> list[str]:
    """`evolve run --ladder`'s ranking and its rank transfer (`evolution.scale.ladder_report`)."""
    from dogma_evolve.evolution.scale.ladder_report import ladder_lines

    lines = ladder_lines(
        summary["ladder"],
        summary["ladder_transfer"],
        summary["ladder_warning"],
        summary.get("ladder_regime"),
        summary.get("ladder_verdict"),
    )
    intro = _note(
        "The Pareto elite trained at 4 sizes (non-embedding parameters) after the last generation, "
        "each fitted L(N) = E + A·N^-α and ranked by its loss extrapolated to the target size."
    )
    items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in lines[1:])
    return [intro, f'<p>{html.escape(lines[0])}</p><ul class="ladder">{items}</ul>']


def _overall_rho(data: ReportData) -> float | None:
    import math

    from dogma_evolve.evaluation.transfer import spearman

    pairs = [b.low_high for b in data.births if b.low_high is not None]
    if len(pairs) < 3:
        return None
    rho = spearman([p[0] for p in pairs], [p[1] for p in pairs])
    return None if math.isnan(rho) else rho


def _assemble(data: ReportData, page: _Page, refresh_s: int | None) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    nav = "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t, _ in page.sections)
    body = "\n".join(
        f'<section id="{a}"><h2>{html.escape(t)}</h2>\n{b}\n</section>' for a, t, b in page.sections
    )
    live = f" · reloads every {refresh_s} s while the run is running" if refresh_s else ""
    status = html.escape(data.run.shown_status)  # interrupted: stored running, nobody drives it
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="dogma-figures" content="{page.figures}">
<meta name="dogma-generations" content="{data.run.generations}">
<meta name="dogma-status" content="{status}">
{refresh}
<title>evolve report · run {html.escape(data.run.id)}</title>
<style>{CSS}</style>
<script type="text/javascript">window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script>
<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>
</head>
<body>
<header><h1>DOGMA evolve · run {html.escape(data.run.id)}</h1>
<p>{status} · {data.run.generations} generations · {data.run.evaluated} evaluations ·
written {now}{live}</p></header>
<nav><a href="#overview">Overview</a>{nav}</nav>
<main>
<section id="overview"><h2>Overview</h2>{_overview(data)}</section>
{body}
</main>
</body>
</html>
"""


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and `os.replace`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(
    store: Store, run_id: str, path: str | os.PathLike[str], refresh_s: int | None = None
) -> int:
    """Build the report of run `run_id` and write it to `path`; its size in bytes."""
    with _collection_paused():
        text = build_html(collect(store, run_id), refresh_s)
    write_atomic(path, text)
    return len(text.encode("utf-8"))


class LiveReport:
    """An `on_event` callback for `Engine` that forwards every event and rewrites the
    report after each "committed" generation (while the run runs, the page reloads itself
    every LIVE_REFRESH_S seconds). When generations come faster than the report builds (a
    table space), a generation is skipped unless LIVE_OVERHEAD of the time since the last
    write would pay for it (`evolve run --report` writes the final state after the run)."""

    def __init__(self, store: Store, run_id: str, path: str | os.PathLike[str], forward: Event) -> None:
        self.store, self.run_id, self.path, self.forward = store, run_id, path, forward
        self.writes = 0
        self._last_end = 0.0
        self._last_cost = 0.0

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        self.forward(kind, data)
        if kind != "committed":
            return
        if self._last_cost and time.perf_counter() - self._last_end < self._last_cost / LIVE_OVERHEAD:
            return
        self._write(LIVE_REFRESH_S)

    def _write(self, refresh_s: int | None) -> None:
        start = time.perf_counter()
        try:
            write_report(self.store, self.run_id, self.path, refresh_s)
        except OSError as e:  # a report that cannot be written must not end the search
            sys.stderr.write(f"evolve: warning: report {self.path} not written: {e}\n")
            return
        self.writes += 1
        self._last_end = time.perf_counter()
        self._last_cost = self._last_end - start


def live_report(store: Store, run_id: str, path: str | os.PathLike[str], forward: Event) -> LiveReport:
    return LiveReport(store, run_id, path, forward)
