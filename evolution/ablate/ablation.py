"""`evolve ablate ID`: retrain an individual with each module removed or replaced, and say what
each change does to its quality, with an interval.

**The variants** are the individual's genome (the baseline) and every change
``evolution.ablate.changes.derive_changes`` makes to it. Each trains like the individual did
in its run (``RunConfig`` of the run): on the run's task(s), for the full fidelity that the
run's budget gives it (``StoredRun.fidelity``, ``rules.fidelity``: the run's ``steps``, or
under a flops budget the steps of the same compute at its own cost), with the learning rate
``evaluation.evaluate`` applies to every DOGMA phenotype (the width rule), and its quality is
the engine's (``quality_of`` per task, the mean over several tasks, as ``Evaluator.combine``).

**Seeds.** Replicate k of *every* variant trains under the seed the run's engine gives the
baseline's replicate k (``rules.training_seed`` of (baseline id, task, k) under the run's
seed policy, as ``Evaluator.seed_for``: with the default seed
policy ``derive_seed("eval", id, task)`` and ``derive_seed(that, "repeat", k)``, as
``evolution.scale.train.seed_of``). The seed sets the task's data streams and ``torch.manual_seed``,
so replicate k of all variants sees the same batches in the same order, and the baseline's
replicate 0 has the key of the run's own evaluation: it is copied from the store, not trained.

**Statistics** (``evolution.ablate.stats``): the baseline's mean quality over its replicates
with a 95 % Student-t interval (mean ± t₀.₉₇₅,ₙ₋₁ · s/√n). For a change, ``mean`` is its mean quality and
``delta`` the mean of the paired differences d_k = q_change,k − q_baseline,k over the
replicates where both trained (``ok``), with the 95 % Student-t interval of that mean: a
paired t-interval, since replicate k of both shares the seed and the data order. An interval
needs two replicates; with one it is None. A failed training (nan, timeout, ...) is left out
of both and counted in ``failed``.

**The store.** An ablation is a run whose config says ``kind: "ablate"``; its ``ablation``
entry (genome, source run, task, steps, budget, seed policy, timeout) identifies it, so the
same command finds its run again: more seeds or other ``--only`` changes add points to it, and
a killed ``evolve ablate`` resumes. Every point (variant × replicate × task) is committed as
it arrives, as one generation: a birth whose ``change`` names the change and replicate, and
its evaluation row under the natural key ``(genome id, task, steps, seed)``. Before training,
each point is looked up: in the ablation's run it is done (whatever its status); a successful
row of another run (the source run's own evaluation, a search that met the same genome) is
copied with ``cached_from``, as the engine's cache does, when it trained in the ablation's
precision (the run's ``precision`` resolved where this command runs: ``auto`` is bf16 with
CUDA here, else fp32; every request carries it, and a bf16 ablation is another run). No
schema change.

**Training** goes through the driver of every training command
(``evolution.training_run.train_recorded``) on the same Ray ``EvaluationPool`` as ``evolve
run`` (leases logged to the ablation's run), replicate by replicate, so an interrupted
ablation holds whole replicates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dogma_evolve.evaluation.precision import LEGACY_PRECISION, pool_precision
from dogma_evolve.evolution.ablate.changes import Change, derive_changes, normalise
from dogma_evolve.evolution.ablate.defaults import DEFAULT_SEEDS, DEFAULT_TIMEOUT_S, MAX_SEEDS
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.rules import training_seed
from dogma_evolve.evolution.training_run import Point, TrainingRecorder
from dogma_evolve.genome import Genome
from dogma_evolve.store import IndividualRecord, Store

CONFIDENCE = 0.95
BASELINE = "baseline"


class AblateError(ValueError):
    """An ablation that cannot be made, with a one-line reason."""


@dataclass(frozen=True)
class Variant:
    """The baseline or one change, as trained: its genome, parameters and steps."""

    name: str
    what: str
    genome: Genome
    params: int
    steps: int


@dataclass(kw_only=True)
class AblationPoint(Point):
    """One training (`training_run.Point`) of one variant and replicate on one task."""

    variant: int
    replicate: int


@dataclass
class Plan:
    """The ablation of one individual: its variants × seeds × the run's tasks."""

    individual: int
    source_run: str
    config: RunConfig
    variants: list[Variant]
    skipped: list[Change]
    seeds: int
    timeout_s: float
    points: list[AblationPoint]
    precision: str = LEGACY_PRECISION  # resolved: fp32 or bf16
    run_id: str | None = None

    @property
    def baseline(self) -> Variant:
        return self.variants[0]

    def ablation_key(self) -> dict[str, Any]:
        """What identifies the ablation's run in the store (module docstring)."""
        c = self.config
        key: dict[str, Any] = {
            "genome_id": self.baseline.genome.id,
            "source_run": self.source_run,
            "task": c.task,
            "steps": c.steps,
            "budget": c.budget,
            "seed_policy": c.seed_policy,
            "timeout_s": self.timeout_s,
        }
        if self.precision != LEGACY_PRECISION:  # absent: fp32, as in a result's metrics
            key["precision"] = self.precision
        return key

    def run_config(self) -> dict[str, Any]:
        return {"individual": self.individual, "ablation": self.ablation_key()}


def search_individual(store: Store, record: IndividualRecord) -> IndividualRecord:
    """The individual of a search that ``record`` stands for: itself, or, when it was born in
    an ablation or a scale ladder (a genome-id prefix finds the newest birth of a genome, and
    an ablation's baseline is one), the newest birth of its genome in a search; ``AblateError``
    when no search holds the genome (its run config, the task and budget, would be unknown)."""
    kinds = {r.id: r.kind for r in store.list_runs()}
    if kinds.get(record.run_id) == "search":
        return record
    searches = [
        m
        for m in store.find_individuals_by_genome_prefix(record.genome_id)
        if kinds.get(m.run_id) == "search"
    ]
    if not searches:
        raise AblateError(
            f"individual {record.id} was born in an evolve {kinds[record.run_id]} run and no search holds "
            "its genome: its task and budget are unknown"
        )
    return max(searches, key=lambda m: m.id)


def make_plan(
    store: Store,
    record: IndividualRecord,
    seeds: int = DEFAULT_SEEDS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    only: Sequence[str] = (),
) -> Plan:
    """The ablation of ``record`` (module docstring); ``AblateError`` when it cannot be made:
    a run that is no DOGMA search, seeds out of range, an ``only`` name the genome has no
    change of."""
    from dogma_evolve.evolution.study.stored_run import StoredRun
    from dogma_evolve.phenotype import account

    if not 1 <= seeds <= MAX_SEEDS:
        raise AblateError(f"--seeds {seeds}: from 1 to {MAX_SEEDS}")
    record = search_individual(store, record)
    run = store.get_run(record.run_id)
    if run is None:  # pragma: no cover - an individual's run exists (foreign key)
        raise AblateError(f"individual {record.id}: no run {record.run_id}")
    if (run.config or {}).get("space", "dogma") != "dogma":
        raise AblateError(
            f"individual {record.id} is of the {run.config['space']} space: only DOGMA genomes are ablated"
        )
    stored = StoredRun.open(store, run.id)  # its config (fidelities, seeds), read once
    config = stored.config
    baseline = Genome.from_yaml(record.yaml)
    changes = derive_changes(baseline)
    if only:
        wanted = [normalise(n) for n in only]
        names = [c.name for c in changes]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise AblateError(f"no change {unknown[0]!r} of this genome; its changes: {', '.join(names)}")
        changes = [c for c in changes if c.name in wanted]

    def variant(name: str, what: str, genome: Genome) -> Variant:
        steps = stored.fidelity(genome, final=True)
        return Variant(name, what, genome, account(genome).params, steps)

    variants = [variant(BASELINE, "the individual as evolved", baseline)]
    variants += [variant(c.name, c.what, c.genome) for c in changes if c.genome is not None]
    points = [
        AblationPoint(
            v.genome.id,
            task,
            v.steps,
            training_seed(config.seed_policy, config.seed, config.task, baseline.id, task, k),
            variant=i,
            replicate=k,
        )
        for k in range(seeds)
        for i, v in enumerate(variants)
        for task in config.tasks
    ]
    skipped = [c for c in changes if c.genome is None]
    precision = pool_precision(config.precision, None)  # where this process would train
    return Plan(record.id, run.id, config, variants, skipped, seeds, timeout_s, points, precision)


# -- the store -------------------------------------------------------------------------------
class Recorder(TrainingRecorder):
    """An ablation's run in the store (``evolution.training_run``): found or created, its
    stored points read, new ones committed; trained by ``training_run.train_recorded`` in
    plan order (replicate by replicate)."""

    def __init__(self, store: Store, plan: Plan) -> None:
        super().__init__(
            store,
            "ablate",
            plan.run_config(),
            "ablation",
            plan.config.task,
            plan.precision,
            plan.points,
            plan.timeout_s,
        )
        self.plan = plan
        plan.run_id = self.run_id

    def genome_of(self, point: AblationPoint) -> Genome:
        return self.plan.variants[point.variant].genome

    def change_of(self, p: AblationPoint) -> dict[str, Any]:
        variant = self.plan.variants[p.variant]
        return {"op": "ablate", "change": variant.name, "replicate": p.replicate, "params": variant.params}


__all__ = [
    "BASELINE",
    "DEFAULT_SEEDS",
    "DEFAULT_TIMEOUT_S",
    "AblateError",
    "AblationPoint",
    "Plan",
    "Recorder",
    "Variant",
    "make_plan",
    "search_individual",
]
