"""A calibration as a run of kind ``calibrate``: plan it, find or create its run, train what
the store lacks on the evaluation pool, and summarise it (from the plan, or from the store
for `evolve report`).

**The run.** Its config holds ``calibration`` (what identifies it: task, full fidelity,
rungs, target, presets, random count, sampling seed, parameter budget, precision and
timeout) and ``panel`` (each member's name, genome id, parameters and seed per task), so
the same command finds its run again and a killed calibration resumes (with ``--plugin``,
its pinned plugins are part of that key, and ``plugins``/``plugin_code`` are stored as
`evolve run` stores them: the random genomes may draw their kinds); ``promote`` and
``floor`` are kept beside them as the statistics' defaults for `evolve report`. Each point
(member × fidelity × task) is one evaluation under the store's natural key ``(genome id,
task, steps, seed)``, committed as it arrives (``evolution.training_run.TrainingRecorder``:
a point stored in the run is done whatever its status; a successful row of another run
trained in this precision, such as a search's full-fidelity training of a preset, is
copied, not retrained). After training, each rung's correlations are written to the
``transfer`` table under named fidelities (``rung@60`` against ``full@300`` and
``target@3000``, and ``loss@60`` for the held-out loss's ranking,
``evolution.calibrate.stats.transfer_rows``) with the run's last generation, replacing an
earlier attempt's (``Store.put_ladder`` with no ladder rows).

**Training** goes through the driver of every training command
(``evolution.training_run.train_recorded``) on its Ray ``EvaluationPool``, its leases
logged to the run, the longest trainings first (the target, then the rungs downwards), which
keeps the workers busy to the end.

**A member's quality** at a fidelity is ``quality_of`` its metrics on the one task, the mean
over the tasks with several (as ``Evaluator.combine``); None when a task failed there.
**Its held-out loss** there is ``metrics["loss"]`` of the one task (``loss_of``): a search
promotes its first stage by held-out loss only when it has one task, so a calibration on
several ranks by quality alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dogma_evolve.evaluation.precision import pool_precision
from dogma_evolve.evaluation.tasks import derive_seed
from dogma_evolve.evaluation.transfer import MIN_PAIRS, RESAMPLES
from dogma_evolve.evolution.calibrate.defaults import DEFAULT_PROMOTE, DEFAULT_TIMEOUT_S
from dogma_evolve.evolution.calibrate.panel import (
    CalibrateError,
    Ladder,
    Member,
    make_ladder,
    make_panel,
    member_entry,
)
from dogma_evolve.evolution.calibrate.stats import rung_rows, transfer_rows
from dogma_evolve.evolution.calibrate.text import (
    Grown,
    TextTarget,
    family_of,
    grow_panel,
    label,
    text_rows,
    text_transfer_rows,
)
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import quality_of
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.evolution.training_run import Point, TrainingRecorder
from dogma_evolve.genome import Genome
from dogma_evolve.store import Store
from dogma_evolve.store.keys import EvalKey

KIND = "calibrate"


@dataclass(kw_only=True)
class CalibrationPoint(Point):
    """One training (`training_run.Point`) of one member at one fidelity on one task."""

    member: int
    size: float = 0.0  # a language-target point: the member grown this many times; 0 the fitness


@dataclass
class Plan:
    """A calibration: its panel, ladder and points (module docstring)."""

    task: str  # a task, or a comma list
    ladder: Ladder
    members: list[Member]
    presets: int | None
    random: int
    seed: int
    max_params: int
    precision: str  # resolved: fp32 or bf16
    timeout_s: float
    promote: float
    floor: float | None
    points: list[CalibrationPoint]
    run_id: str | None = None
    # the user's block kinds the panel may draw (`phenotype.plugins`), records by pinned text
    plugin_code: dict[str, dict[str, Any]] = field(default_factory=dict)
    text: TextTarget | None = None  # the language target (`evolution.calibrate.text`)
    grown: dict[tuple[int, float], Grown] = field(default_factory=dict)  # (member, size) -> its point
    stratify: bool = False  # random genomes drawn family by family
    from_runs: tuple[str, ...] = ()  # stored runs whose best genomes joined the panel

    @property
    def tasks(self) -> list[str]:
        return [t.strip() for t in self.task.split(",") if t.strip()]

    def calibration_key(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "steps": self.ladder.steps,
            "rungs": list(self.ladder.rungs),
            "target": self.ladder.target,
            "presets": self.presets,
            "random": self.random,
            "seed": self.seed,
            "max_params": self.max_params,
            "seed_policy": "genome",
            "precision": self.precision,
            "timeout_s": self.timeout_s,
        } | (
            ({"plugins": sorted(self.plugin_code)} if self.plugin_code else {})
            | ({"text": self.text.key()} if self.text else {})
            | ({"stratify": True} if self.stratify else {})
            | ({"from_runs": list(self.from_runs)} if self.from_runs else {})
        )

    def run_config(self) -> dict[str, Any]:
        seeds = {
            i: {p.task: p.seed for p in self.points if p.member == i and not p.size}
            for i in range(len(self.members))
        }
        panel = [member_entry(m, seeds[i]) for i, m in enumerate(self.members)]
        for i, m in enumerate(self.members if self.text else ()):
            panel[i]["family"] = family_of(m.genome)
        for (i, _), g in self.grown.items():  # what `evolve report` needs to find the text points
            panel[i].setdefault("text", {})[label(g.size)] = {
                "genome_id": g.genome.id,
                "params": g.params,
                "steps": g.steps,
                "seed": g.seed,
            }
        config = {
            "calibration": self.calibration_key(),
            "panel": panel,
            "promote": self.promote,
            "floor": self.floor,
        }
        if self.plugin_code:  # as `RunConfig.to_dict` stores them (`evolve replay` re-imports)
            config |= {"plugins": list(self.plugin_code), "plugin_code": self.plugin_code}
        return config


def make_plan(
    task: str,
    steps: int,
    rungs: Sequence[int],
    target: int,
    random: int,
    presets: int | None = None,
    seed: int = 0,
    max_params: int = RunConfig.max_params,
    precision: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    promote: float = DEFAULT_PROMOTE,
    floor: float | None = None,
    plugin_code: dict[str, dict[str, Any]] | None = None,
    text: TextTarget | None = None,
    stratify: bool = False,
    extra: Sequence[Member] = (),
    from_runs: Sequence[str] = (),
) -> Plan:
    """The calibration of the DOGMA space on ``task`` (module docstring of
    `evolution.calibrate.panel` for the panel, with ``extra`` members, the best of the stored
    runs ``from_runs``, after the presets); with ``text``, each member's training on the
    language target at each size too (`evolution.calibrate.text`); ``CalibrateError`` when it
    cannot be made."""
    if not 0.0 < promote <= 1.0:
        raise CalibrateError(f"--promote {promote:g}: more than 0 and at most 1")
    ladder = make_ladder(steps, tuple(rungs), target)
    try:
        plugin_code = dict(plugin_code or {})  # loaded already: RunConfig imports nothing
        config = RunConfig(
            task=task,
            steps=steps,
            max_params=max_params,
            precision=precision,
            plugins=tuple(plugin_code),
            plugin_code=plugin_code,
        )
        DogmaSpace.check_config(config)
    except ValueError as e:
        raise CalibrateError(" ".join(str(e).split())) from None
    space = DogmaSpace.from_config(config)
    members = make_panel(space, presets, random, seed, stratify=stratify, extra=extra)
    if len(members) < MIN_PAIRS:
        raise CalibrateError(f"a panel of {len(members)} genomes: at least {MIN_PAIRS} are needed to rank")
    grown = {(g.member, g.size): g for g in grow_panel(members, text)} if text else {}
    text_points = [
        CalibrationPoint(g.genome.id, text.task, g.steps, g.seed, member=g.member, size=g.size)
        for g in sorted(grown.values(), key=lambda g: -(g.steps or 0))
        if text is not None and g.steps is not None
    ]
    points = text_points + [
        CalibrationPoint(m.genome.id, t, f, derive_seed("eval", m.genome.id, t), member=i)
        for f in sorted(ladder.fidelities, reverse=True)
        for i, m in enumerate(members)
        for t in config.tasks
    ]
    return Plan(
        config.task,
        ladder,
        members,
        presets,
        random,
        seed,
        max_params,
        pool_precision(precision, None),
        timeout_s,
        promote,
        floor,
        points,
        plugin_code=config.plugin_code,
        text=text,
        grown=grown,
        stratify=stratify,
        from_runs=tuple(from_runs),
    )


class Recorder(TrainingRecorder):
    """A calibration's run in the store: found or created, its stored points read, new ones
    committed (``evolution.training_run``); trained by ``training_run.train_recorded`` in
    plan order."""

    def __init__(self, store: Store, plan: Plan) -> None:
        super().__init__(
            store,
            KIND,
            plan.run_config(),
            "calibration",
            plan.task,
            plan.precision,
            plan.points,
            plan.timeout_s,
        )
        self.plan = plan
        plan.run_id = self.run_id

    def genome_of(self, point: CalibrationPoint) -> Genome:
        if point.size:
            return self.plan.grown[(point.member, point.size)].genome
        return self.plan.members[point.member].genome

    def change_of(self, p: CalibrationPoint) -> dict[str, Any]:
        member = self.plan.members[p.member]
        if p.size:
            grown = self.plan.grown[(p.member, p.size)]
            return {
                "op": KIND,
                "member": member.name,
                "steps": p.steps,
                "params": grown.params,
                "size": p.size,
            }
        return {"op": KIND, "member": member.name, "steps": p.steps, "params": member.params}

    def put_transfer(self, rows: Sequence[dict[str, Any]], text: Sequence[dict[str, Any]] = ()) -> None:
        """Each rung's correlations (``rung_rows``) and, with a language target, each
        fidelity's against the text at each size (``text_rows``) in the ``transfer`` table,
        with the run's last generation (nothing when nothing is committed)."""
        if self.next_generation > 0:
            transfer = transfer_rows(rows, self.plan.ladder) + text_transfer_rows(
                text, self.plan.ladder.steps
            )
            self.store.put_ladder(self.run_id, self.next_generation - 1, [], transfer)


def combined(results: Sequence[tuple[str | None, dict[str, Any]]]) -> float | None:
    """A member's quality at one fidelity from its (status, metrics) per task: the mean of
    ``quality_of``; None when one is missing or failed."""
    if not results or any(status != "ok" for status, _ in results):
        return None
    return statistics.fmean(quality_of(metrics) for _, metrics in results)


def loss_of(results: Sequence[tuple[str | None, dict[str, Any]]]) -> float | None:
    """A member's held-out loss at one fidelity from its (status, metrics) per task:
    ``metrics["loss"]`` of its one task. None with several tasks (the engine promotes by
    held-out loss only when a run has one task, ``Evaluator.promoted``), when the training
    is missing or failed, or when the loss is missing or not finite."""
    if len(results) != 1:
        return None
    status, metrics = results[0]
    loss = metrics.get("loss")
    if status != "ok" or not isinstance(loss, int | float) or not math.isfinite(loss):
        return None
    return float(loss)


def _per_fidelity(
    plan: Plan, of: Callable[[Sequence[tuple[str | None, dict[str, Any]]]], float | None]
) -> dict[int, list[float | None]]:
    return {
        f: [
            of([(p.status, p.metrics) for p in plan.points if p.member == i and p.steps == f and not p.size])
            for i in range(len(plan.members))
        ]
        for f in plan.ladder.fidelities
    }


def qualities_of(plan: Plan) -> dict[int, list[float | None]]:
    """Fidelity -> each member's quality there (``combined``), in panel order."""
    return _per_fidelity(plan, combined)


def losses_of(plan: Plan) -> dict[int, list[float | None]]:
    """Fidelity -> each member's held-out loss there (``loss_of``), in panel order."""
    return _per_fidelity(plan, loss_of)


def summary(plan: Plan, resamples: int = RESAMPLES) -> dict[str, Any]:
    """The calibration's JSON-able summary: its settings, the panel (each member's quality
    and held-out loss per fidelity) and the rows of ``rung_rows`` (with the loss rankings on
    one task only)."""
    qualities, losses = qualities_of(plan), losses_of(plan)
    missing = {
        f: len({p.member for p in plan.points if p.steps == f and not p.size and p.status is None})
        for f in plan.ladder.fidelities
    }
    ranked = losses if len(plan.tasks) == 1 else None
    rows = rung_rows(qualities, plan.ladder, plan.promote, plan.floor, resamples, missing, ranked)
    panel = [
        {
            "name": m.name,
            "genome_id": m.genome.id,
            "params": m.params,
            "quality": {str(f): qualities[f][i] for f in plan.ladder.fidelities},
            "loss": {str(f): losses[f][i] for f in plan.ladder.fidelities},
        }
        for i, m in enumerate(plan.members)
    ]
    out = _document(plan.run_id, plan.task, plan.ladder, plan.promote, plan.floor, panel, rows) | {
        "presets": sum(m.name.startswith("preset:") for m in plan.members),
        "random": plan.random,
        "seed": plan.seed,
        "precision": plan.precision,
        "failed": sum(p.status not in (None, "ok") for p in plan.points),
        "missing": sum(p.status is None for p in plan.points),
    }
    if plan.text is None:
        return out
    by_point = {(p.member, p.size): p for p in plan.points if p.size}
    text_losses: dict[float, list[float | None]] = {}
    over: dict[float, int] = {}
    for size in plan.text.sizes:
        text_losses[size] = []
        for i in range(len(plan.members)):
            point = by_point.get((i, size))
            over[size] = over.get(size, 0) + (point is None)
            text_losses[size].append(None if point is None else loss_of([(point.status, point.metrics)]))
    families = [family_of(m.genome) for m in plan.members]
    params: dict[float, list[int | None]] = {
        size: [plan.grown[(i, size)].params for i in range(len(plan.members))] for size in plan.text.sizes
    }
    return out | _text_document(
        plan.text,
        plan.promote,
        qualities,
        ranked,
        plan.ladder.steps,
        text_losses,
        over,
        families,
        panel,
        resamples,
        params,
    )


def stored_summary(store: Store, run_id: str, resamples: int = RESAMPLES) -> dict[str, Any] | None:
    """The summary of the calibration run ``run_id`` from what the store holds (None when it
    is no calibration): its points as stored, the statistics recomputed with the run's
    ``promote`` and ``floor``; a point not trained yet counts as missing."""
    run = store.get_run(run_id)
    if run is None or run.kind != KIND:
        return None
    key, entries = run.config["calibration"], run.config["panel"]
    ladder = make_ladder(int(key["steps"]), tuple(key["rungs"]), int(key["target"]))
    promote, floor = float(run.config["promote"]), run.config.get("floor")
    qualities: dict[int, list[float | None]] = {f: [] for f in ladder.fidelities}
    losses: dict[int, list[float | None]] = {f: [] for f in ladder.fidelities}
    panel, missing, absent = [], 0, dict.fromkeys(ladder.fidelities, 0)
    for entry in entries:
        quality: dict[str, float | None] = {}
        loss: dict[str, float | None] = {}
        for f in ladder.fidelities:
            results = []
            for task, seed in entry["seeds"].items():
                rec = store.find_evaluation(*EvalKey(entry["genome_id"], task, f, int(seed)), run_id=run_id)
                missing += rec is None
                results.append((None, {}) if rec is None else (rec.status, rec.metrics))
            absent[f] += any(status is None for status, _ in results)
            quality[str(f)] = q = combined(results)
            qualities[f].append(q)
            loss[str(f)] = v = loss_of(results)
            losses[f].append(v)
        panel.append(
            {k: entry[k] for k in ("name", "genome_id", "params")} | {"quality": quality, "loss": loss}
        )
    one_task = len([t for t in str(key["task"]).split(",") if t.strip()]) == 1
    rows = rung_rows(qualities, ladder, promote, floor, resamples, absent, losses if one_task else None)
    out = _document(run_id, key["task"], ladder, promote, floor, panel, rows)
    out |= {
        "presets": sum(e["name"].startswith("preset:") for e in entries),
        "random": key["random"],
        "seed": key["seed"],
        "precision": key["precision"],
        "status": run.status,
        "missing": missing,
    }
    if "text" not in key:
        return out
    text = TextTarget(
        key["text"]["task"],
        tuple(key["text"]["sizes"]),
        float(key["text"]["tokens_per_param"]),
        key["text"].get("max_params"),
    )
    text_losses: dict[float, list[float | None]] = {size: [] for size in text.sizes}
    params: dict[float, list[int | None]] = {size: [] for size in text.sizes}
    over = dict.fromkeys(text.sizes, 0)
    for entry in entries:
        for size in text.sizes:
            grown = entry.get("text", {}).get(label(size))
            params[size].append(None if grown is None else int(grown["params"]))
            if grown is None or grown["steps"] is None:
                over[size] += 1
                text_losses[size].append(None)
                continue
            point = EvalKey(grown["genome_id"], text.task, int(grown["steps"]), int(grown["seed"]))
            rec = store.find_evaluation(*point, run_id=run_id)
            out["missing"] += rec is None
            text_losses[size].append(None if rec is None else loss_of([(rec.status, rec.metrics)]))
    families = [str(e.get("family", "unknown")) for e in entries]
    ranked = losses if one_task else None
    return out | _text_document(
        text, promote, qualities, ranked, ladder.steps, text_losses, over, families, panel, resamples, params
    )


def _text_document(
    text: TextTarget,
    promote: float,
    qualities: dict[int, list[float | None]],
    fitness_losses: dict[int, list[float | None]] | None,
    full: int,
    text_losses: dict[float, list[float | None]],
    over: dict[float, int],
    families: list[str],
    panel: list[dict[str, Any]],
    resamples: int,
    params: dict[float, list[int | None]],
) -> dict[str, Any]:
    """The language target's part of a summary (``text_rows``, with the members above the
    target's cap counted per size); each panel entry gains its family and its held-out text
    loss per size."""
    capped = {size: sum(map(text.capped, ns)) for size, ns in params.items()}
    for i, entry in enumerate(panel):
        entry["family"] = families[i]
        entry["text"] = {label(size): text_losses[size][i] for size in text.sizes}
    rows = text_rows(
        qualities,
        fitness_losses,
        full,
        text.sizes,
        text_losses,
        over,
        families,
        promote,
        resamples,
        params,
        capped,
    )
    return {"text": text.key() | {"rows": rows}}


def _document(
    run_id: str | None,
    task: str,
    ladder: Ladder,
    promote: float,
    floor: float | None,
    panel: list[dict[str, Any]],
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "task": task,
        "steps": ladder.steps,
        "rungs": list(ladder.rungs),
        "target": ladder.target,
        "promote": promote,
        "floor": floor,
        "panel": panel,
        "rows": rows,
    }


__all__ = [
    "KIND",
    "CalibrateError",
    "CalibrationPoint",
    "Plan",
    "Recorder",
    "combined",
    "loss_of",
    "losses_of",
    "make_plan",
    "qualities_of",
    "stored_summary",
    "summary",
]
