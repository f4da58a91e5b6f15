"""The rules that say what a stored run's results mean, as plain functions: the engine's
`Evaluator` applies them while it evaluates, and the readers (`study.stored_run.StoredRun`,
`report`, `export`, `ablate`, `training_run`) call them on what the store holds, without an
evaluator. Each takes the config values it needs.

- fitness: ``fitness(status, metrics, violation, objectives, quality_floor)``, the
  (quality, cost, ...) tuple selection acts on; ``stored_result(rows)``, an individual's
  status, metrics and fidelity from its stored rows; ``seeds_of(metrics)``;
- fidelity: ``fidelity(space, genome, final, ...)``, a candidate's training steps at the
  first stage or the full one (``budget_task``: what a flops budget scales by);
  ``promotions`` and ``promoted``: which of a first stage are trained in full;
- seed: ``training_seed(seed_policy, run_seed, run_task, genome_id, task, repeat)``;
- cache: ``reusable(record, precision, plugins)``, whether a row of another run may be
  copied (``cached_from``) instead of trained again, and ``cache_answer``, the look-up the
  engine's cache and `training_run.TrainingRecorder.lookup` both make with it;
  ``evaluations_spent``, the real evaluations a stored run has spent (for a resume).

See `evolution.evaluating` for what each rule is for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deap import tools

from dogma_evolve.evaluation.budget import step_flops, steps_for_flops
from dogma_evolve.evaluation.precision import precision_of
from dogma_evolve.evaluation.tasks import derive_seed
from dogma_evolve.evolution.objectives import FAILED_COST, objective_value, quality_of
from dogma_evolve.evolution.selection import quality_key, single_objective
from dogma_evolve.evolution.spaces.contract import Genotype, SearchSpace
from dogma_evolve.evolution.strategies import below_floor
from dogma_evolve.evolution.types import Candidate
from dogma_evolve.store import Store
from dogma_evolve.store.keys import EvalKey

if TYPE_CHECKING:
    from dogma_evolve.evaluation.tasks import Task

FAILED_QUALITY = -1e3  # below any score: a normalised accuracy under chance is negative
FILTERED = "filtered"  # the status of a child the pre-filter stopped (store.EVALUATION_STATUSES)
FLOPS_STEPS_CAP = 10  # a flops budget gives a candidate at most this many times `steps`

NICHE_SHARE = 0.25
"""Of a first stage's promoted places, the share kept for niches its order leaves out."""


# -- fitness ------------------------------------------------------------------------------------
def fitness(
    status: str | None,
    metrics: Mapping[str, Any],
    violation: Any,
    objectives: Sequence[str],
    quality_floor: float | None,
) -> tuple[float, ...]:
    """(quality, cost, ...) of an evaluated candidate, one entry per objective: the failed
    fitness unless ``status`` is "ok" and no hard constraint is broken (``violation``);
    below the quality floor, the quality with the worst costs."""
    n = len(objectives)
    if status != "ok" or violation:
        return (FAILED_QUALITY,) + (FAILED_COST,) * (n - 1)
    quality = quality_of(metrics)
    if below_floor(quality, quality_floor):
        # constrained domination (Deb et al. 2002): with the worst costs, every candidate
        # at or above the floor dominates it, and those below rank by quality alone
        return (quality,) + (FAILED_COST,) * (n - 1)
    return (quality,) + tuple(objective_value(metrics, o) for o in objectives[1:])


def seeds_of(metrics: Mapping[str, Any]) -> int:
    """How many training seeds a candidate's quality is the mean of (``quality_seeds``)."""
    return len(metrics.get("quality_seeds") or ()) or 1


def stored_result(rows: Sequence[Any]) -> tuple[str | None, dict[str, Any], int | str | None]:
    """(status, metrics, fidelity) of a stored individual from its rows on the run's task
    (`store.EvaluationRecord`s): the highest fidelity's first row; when it was repeated
    under further seeds (`RunConfig.repeats`), quality is the mean over the seeds;
    (None, {}, None) without rows."""
    if not rows:
        return None, {}, None
    best = max(rows, key=lambda e: (e.fidelity if isinstance(e.fidelity, int) else 0, e.id))
    first = min((e for e in rows if e.fidelity == best.fidelity), key=lambda e: e.id)
    metrics = dict(first.metrics or {})
    seeds = [quality_of(e.metrics or {}) for e in rows if e.fidelity == best.fidelity and e.status == "ok"]
    if len(seeds) > 1:
        metrics.update(quality=sum(seeds) / len(seeds), quality_seeds=seeds)
    return first.status, metrics, first.fidelity


# -- fidelity -----------------------------------------------------------------------------------
def budget_task(budget: str, task: str, task_code: Mapping[str, Mapping[str, Any]] | None) -> Task | None:
    """The task a flops budget scales each candidate's steps by (the run's first ``task``,
    its contract values from ``task_code`` when recorded); None under a steps budget."""
    from dogma_evolve.evaluation.tasks import task_facts  # every built-in task's code: torch

    return task_facts(task, task_code) if budget == "flops" else None


def fidelity(
    space: SearchSpace,
    genome: Genotype,
    final: bool,
    *,
    steps: int,
    first_fidelity: int | None,
    max_params: int,
    flops_task: Task | None,
) -> int:
    """Training steps of ``genome`` at the full stage (``final``) or the first one. A steps
    budget (``flops_task`` None): the space's full fidelity of ``steps``, or
    ``first_fidelity``. A flops budget: the steps that give the genome the compute of
    ``steps`` steps (``first_fidelity`` at the first stage) of a dense model of
    ``max_params`` parameters, at most `FLOPS_STEPS_CAP` times those steps."""
    if flops_task is None:
        return space.full_fidelity(steps) if final or first_fidelity is None else first_fidelity
    task = flops_task
    total = steps * step_flops(max_params, task.train_batch_size, task.seq_len)
    if not final and first_fidelity is not None:
        total *= first_fidelity / steps
    own = float(space.cost_metrics(genome).get("flops_per_token", max_params))
    trained = steps_for_flops(total, own, task.train_batch_size, task.seq_len)
    return min(trained, FLOPS_STEPS_CAP * (steps if final or first_fidelity is None else first_fidelity))


def promotions(ok: int, stage: int, promote: float) -> int:
    """How many of a first stage of ``stage`` candidates, ``ok`` of them successful, are
    trained in full: the ``promote`` fraction of the stage, at most the successful ones."""
    return min(ok, math.ceil(promote * stage)) if ok else 0


def with_niches(order: Sequence[int], niches: Sequence[str], k: int) -> list[int]:
    """The `k` of `order` (indices, best first) to promote: the first k − r, then for the
    r = ⌊k · NICHE_SHARE⌋ places left (none below 4 places) the best of each niche not yet
    promoted, in order, then the best of the rest. A first stage compares candidates that
    read the task alike; a child that changes how (DOGMA: `SearchSpace.niche`, its position
    scheme and first mixer) starts slower, and on the default run's seed 0 the children that
    dropped the positions for a recurrence first ranked 16th-29th of 32 at 60 steps, the
    8 promoted all learned-position ones (docs/results.md), though at 300 steps such
    children score 0.58-0.67 against 0.40."""
    reserved = int(k * NICHE_SHARE)
    chosen = list(order[: k - reserved])
    seen = {niches[i] for i in chosen}
    for i in order[k - reserved :]:
        if len(chosen) < k and niches[i] not in seen:
            chosen.append(i)
            seen.add(niches[i])
    taken = set(chosen)
    chosen += [i for i in order if i not in taken][: k - len(chosen)]
    return chosen


def promoted(
    ok: Sequence[Candidate], k: int, *, promote_by: str, tasks: int, niche: Callable[[Any], str]
) -> list[Candidate]:
    """The `k` first-stage candidates to train in full. Under several objectives:
    NSGA-II order on the first-stage fitness. Under one: by held-out loss, lowest first
    (``promote_by`` "loss", one task of ``tasks``, every loss finite; ties by
    `quality_key`), else by quality (`selection.quality_key`: ties to fewer parameters),
    with a share of the places kept for niches that order leaves out (`with_niches`, each
    genome's ``niche``). A first stage is short enough that most candidates' accuracy has
    not left chance, so quality ranks them on noise while the loss already tells the
    genomes that learn from the rest."""
    if not k:
        return []
    if not single_objective(ok):
        return list(tools.selNSGA2(ok, k))
    losses = [float(c.metrics.get("loss", math.nan)) for c in ok]
    if promote_by == "loss" and tasks == 1 and all(map(math.isfinite, losses)):
        order = sorted(range(len(ok)), key=lambda i: (losses[i], quality_key(ok[i])))
    else:
        order = sorted(range(len(ok)), key=lambda i: quality_key(ok[i]))  # `by_quality`'s order
    niches = [niche(c.genome) for c in ok]
    return [ok[i] for i in with_niches(order, niches, k)]


# -- seed ---------------------------------------------------------------------------------------
def training_seed(
    seed_policy: str, run_seed: int, run_task: str, genome_id: str, task: str, repeat: int = 0
) -> int:
    """The training seed of an evaluation of ``genome_id`` on ``task``; ``repeat`` > 0
    names a further seed of a survivor (`RunConfig.repeats`, `confirm`). ``seed_policy``
    "run": derived from (``run_seed``, genome id), and the task when it is not the run's
    own ``run_task``; "genome": from (genome id, task) alone, the same in every run."""
    if seed_policy == "run":
        if task == run_task:
            base = derive_seed(run_seed, genome_id)
        else:
            base = derive_seed(run_seed, genome_id, task)
    else:
        base = derive_seed("eval", genome_id, task)
    return base if repeat == 0 else derive_seed(base, "repeat", repeat)


# -- cache --------------------------------------------------------------------------------------
def reusable(record: Any, precision: str, plugins: Iterable[str]) -> bool:
    """Whether ``record``, a stored evaluation of another run under a key this run trains,
    may be copied into this run (``metrics["cached_from"]``) instead of trained again: it
    trained something (not `FILTERED`: the pre-filter of each run decides), in this run's
    ``precision`` (`evaluation.precision.precision_of`: absent, fp32), and with no plugin
    code (``metrics["plugins"]``) other than ``plugins``, the pinned plugins of this run."""
    return (
        record.status != FILTERED
        and precision_of(record.metrics) == precision
        and set(record.metrics.get("plugins") or ()) <= set(plugins)
    )


def cache_answer(
    store: Store, key: EvalKey, run_id: str, precision: str, plugins: Iterable[str]
) -> tuple[Any, bool]:
    """What the store answers for ``key`` in run ``run_id``: (record, True) for a row of the
    run itself that is not `FILTERED`; else (record, False) for the oldest row of the key
    in any run that is `reusable` (an older row in another precision does not hide it);
    else (None, False)."""
    rec = store.find_evaluation(*key, run_id=run_id)
    if rec is not None and rec.status != FILTERED:
        return rec, True
    for rec in store.key_evaluations(*key):
        if reusable(rec, precision, plugins):
            return rec, False
    return None, False


def evaluations_spent(store: Store, run_id: str, run_task: str, tasks: int) -> int:
    """Real evaluations run ``run_id``'s stored individuals hold (what a resumed run has
    spent): neither rows copied from other runs (``cached_from``), nor `FILTERED` rows
    (never trained), nor, with several ``tasks``, the run's per-task-mean rows (on
    ``run_task``)."""
    return sum(
        1
        for rec in store.individuals(run_id)
        for e in rec.evaluations
        if e.individual_id == rec.id
        and e.status != FILTERED
        and "cached_from" not in (e.metrics or {})
        and (tasks == 1 or e.task != run_task)
    )


__all__ = [
    "FAILED_COST",
    "FAILED_QUALITY",
    "FILTERED",
    "FLOPS_STEPS_CAP",
    "NICHE_SHARE",
    "budget_task",
    "cache_answer",
    "evaluations_spent",
    "fidelity",
    "fitness",
    "promoted",
    "promotions",
    "reusable",
    "seeds_of",
    "stored_result",
    "training_seed",
    "with_niches",
]
