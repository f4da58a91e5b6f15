"""Progress on stderr (so `--json` keeps stdout clean): the live display of `evolve run`
(`RunProgress`) and the one-line-per-training printers of `evolve scale`, `evolve run
--ladder` (`ladder_point_printer`) and `evolve ablate` (`ablation_point_printer`). No torch:
the command line imports this module when it builds its parser."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dogma_evolve.evolution.objectives import quality_of


class RunProgress:
    """One bar per generation: evaluations done / to do, the run's best quality so far and its
    failed evaluations (`start` takes what a resumed run had stored: `prior`)."""

    def __init__(self, enabled: bool = True):
        self.console = Console(stderr=True, highlight=False)
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not enabled,
            transient=False,
        )
        self.task_id: Any = None
        self.generations: int | str = 0
        self.best = 0.0
        self.failed = 0
        self.t0 = time.perf_counter()

    def __enter__(self) -> RunProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def start(self, run_id: str, config: Any, prior: tuple[float, int] = (0.0, 0)) -> None:
        """``prior``: the best quality and the failures of the run's evaluations before this
        invocation (`prior_results`), so a resumed run's display goes on as the uninterrupted one's."""
        self.best, self.failed = prior
        generations = config.offspring_generations
        self.generations = "?" if generations == float("inf") else int(generations)
        if self.enabled:
            budget = f", budget {config.max_evaluations} evaluations" if config.max_evaluations else ""
            self.console.print(
                f"run {run_id}: population {config.population}, {self.generations} "
                f"generations after the seeds{budget}, task {config.task}, {config.steps} steps each"
            )

    def _note(self) -> str:
        return f"best quality {self.best:.3f}" + (f", {self.failed} failed" if self.failed else "")

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "generation":
            g = data["generation"]
            label = "seeds" if g == 0 else f"gen {g}/{self.generations}"
            self.task_id = self.progress.add_task(label, total=None, note=self._note())
        elif kind == "result":
            result = data["result"]
            if result.status == "ok":
                self.best = max(self.best, quality_of(result.metrics))
            else:
                self.failed += 1
            self.progress.update(self.task_id, total=data["total"], completed=data["done"], note=self._note())
        elif kind == "committed":
            report = data["report"]
            task = self.progress.tasks[-1] if self.progress.tasks else None
            total = task.total if task is not None and task.total is not None else 0
            note = (
                f"population best {report.best_quality:.3f} mean {report.mean_quality:.3f}, "
                f"{report.families} families, {report.cached} cached, {len(report.discarded)} discarded"
                + (f", {report.immigrants} immigrants" if report.immigrants else "")
                + (f", {report.explorers} explorers" if report.explorers else "")
                + (f", surrogate ρ {report.surrogate_rho:.2f}" if report.surrogate_rho is not None else "")
            )
            self.progress.update(self.task_id, total=total, completed=total, note=note)
            if self.enabled and not self.console.is_terminal:  # logs get one line per generation
                self.console.print(
                    f"generation {data['generation']}: {report.evaluated} evaluated"
                    f", {note}, {self.elapsed():.0f}s"
                )


def prior_results(rows: list[dict[str, Any]], joint_task: str | None = None) -> tuple[float, int]:
    """The best quality and the number of failures among a run's stored evaluation rows
    (`Search.evaluations()`) that the display counts as it runs: the trainings' results (not a
    copied cache hit, a row never trained, `filtered` by the pre-filter or an `invalid`
    violator, nor a run of several tasks' row on ``joint_task``, their mean)."""
    skipped = ("filtered", "invalid")
    real = [r for r in rows if not r["cached"] and r["status"] not in skipped and r["task"] != joint_task]
    best = max((quality_of(r["metrics"]) for r in real if r["status"] == "ok"), default=0.0)
    return best, sum(r["status"] != "ok" for r in real)


def finalist_printer(err: Console, started: float) -> Callable[[Any, Any, int, int], None]:
    """A progress callback for the finalists' long trainings (`evolve run --select-by long`):
    one line per trained finalist on ``err``, with the seconds since ``started``."""

    def on_point(rec: Any, p: Any, done: int, total: int) -> None:
        quality = p.metrics.get("quality") if p.status == "ok" else None
        what = f"quality {quality:.4f}" if isinstance(quality, int | float) else f"{p.status}"
        err.print(
            f"  finalist [{done}/{total}] individual {p.individual_id} ({p.genome_id[:12]}, search quality "
            f"{p.search_quality:.4f}), {p.steps:,} steps: {what}; {time.perf_counter() - started:.0f} s"
        )

    return on_point


def ladder_point_printer(err: Console, started: float) -> Callable[[Any, Any, int, int], None]:
    """A progress callback for size-ladder trainings (`evolve scale`, `evolve run --ladder`):
    one line per trained point on ``err``, with the seconds since ``started``
    (``time.perf_counter()``)."""

    def on_point(rec: Any, p: Any, done: int, total: int) -> None:
        what = f"loss {p.loss:.4f}" if p.loss is not None else f"{p.status}"
        seconds = p.metrics.get("train_seconds")
        took = f", {seconds:.1f} s" if isinstance(seconds, int | float) else ""
        err.print(
            f"  [{done}/{total}] {p.params:,} params (width {p.width}, depth {p.depth}), seed {p.replicate}, "
            f"{p.steps:,} steps ({p.tokens:,} tokens): {what}{took}; {time.perf_counter() - started:.0f} s"
        )

    return on_point


def ablation_point_printer(err: Console, plan: Any, started: float) -> Callable[[Any, int, int], None]:
    """A progress callback for ablation trainings (`evolve ablate`): one line per trained
    point of ``plan`` (`evolution.ablate.ablation.Plan`) on ``err``, with the seconds since
    ``started`` (``time.perf_counter()``)."""

    def on_point(p: Any, done: int, total: int) -> None:
        what = f"quality {quality_of(p.metrics):.4f}" if p.status == "ok" else f"{p.status}"
        seconds = p.metrics.get("train_seconds")
        took = f", {seconds:.1f} s" if isinstance(seconds, int | float) else ""
        task = f" on {p.task}" if len(plan.config.tasks) > 1 else ""
        err.print(
            f"  [{done}/{total}] {plan.variants[p.variant].name}, seed {p.replicate}{task}: {what}{took}; "
            f"{time.perf_counter() - started:.0f} s"
        )

    return on_point
