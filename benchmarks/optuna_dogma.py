"""Optuna over the DOGMA space: what a user would write instead of the engine.

`suggest_genome(trial, pinned, max_params)` is a define-by-run parametrisation of the
space the engine's random sampler draws from (`evolution.spaces.dogma.seeds.random_genome`):

- structure: `d_model` among the seed widths (`SEED_WIDTHS`), `positions`, `norm`;
- `regions`: 1-2 coding regions; each with `c{k}_copies` (1-2; 2 puts a promoter with
  two copies before it) and `c{k}_bases` (1-3) bases, each a base type `c{k}_b{j}_base`
  (T: sequence mixer, A: channel mixer) and a kind among that type's coding kinds
  (`c{k}_b{j}_{T|A}_kind`: one parameter per base type, so every name has one fixed
  distribution, as Optuna's samplers need);
- `gate`: none, or a regulatory gate region that activates or represses the first
  coding region;
- a budget check: a genome that does not validate or is over `max_params` is pruned
  (`suggest_genome` returns None) and costs nothing.

`run_optuna` drives Optuna's default sampler (`TPESampler`, seeded with the run seed)
with ask/tell until the run's summed training FLOPs reach the budget. Every trial is
trained through the same pool as the engine's runs, at the full fidelity, under the
seed the engine's `seed_policy="run"` would give it (`derive_seed(run seed, genome id)`),
and committed to the same kind of store as one generation (one birth, its evaluation
row with the space's cost metrics), so `benchmarks.search_flops` reads it exactly like an
engine run. A repeated proposal is answered from the store (free, like the engine's
cache). The trial's parameters and distributions are stored with the birth (`change`),
so an interrupted run resumes with its trials replayed into a fresh study (pruned
proposals, which cost nothing, are not replayed). The run's stored config records Optuna's
version (`"optuna"`): TPE's proposals may change between releases (the DOGMA benchmark's
Optuna runs changed between two stops, most likely 5.0.0 -> 5.1.0, unrecorded then), so a
run is resumed or reported only under the version that began it (`version_mismatch`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from dogma_evolve.evaluation import EvalRequest
from dogma_evolve.evaluation.precision import pool_precision
from dogma_evolve.evaluation.protocol import Pool
from dogma_evolve.evaluation.tasks import derive_seed
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import quality_of
from dogma_evolve.evolution.spaces.dogma.seeds import SEED_WIDTHS
from dogma_evolve.evolution.spaces.registry import SPACES
from dogma_evolve.genome import KINDS, Genome, GenomeError
from dogma_evolve.phenotype import account
from dogma_evolve.store import EvaluationIn, GenomeIn, IndividualIn, Store, by_slot

POSITIONS = ("rope", "learned", "sinusoidal", "none")
NORMS = ("rmsnorm", "layernorm")
MAX_REGIONS, MAX_BASES, MAX_COPIES = 2, 3, 2
GATES = ("none", "activates", "represses")
MAX_IDLE = 200  # proposals in a row that train nothing (pruned or repeated): stop
OPERATOR = "optuna"


def coding_kinds(base: str) -> tuple[str, ...]:
    """The kinds a coding base of type `base` can take (as `random_base` draws them)."""
    return tuple(k for k, s in KINDS.items() if base in s.bases and "coding" in s.regions)


def suggest_genome(trial: Any, pinned: dict[str, Any], max_params: int) -> Genome | None:
    """The trial's genome (module docstring), or None when it is invalid or over budget."""
    settings = {
        "d_model": trial.suggest_categorical("d_model", SEED_WIDTHS),
        "positions": trial.suggest_categorical("positions", POSITIONS),
        "norm": trial.suggest_categorical("norm", NORMS),
        **pinned,
    }
    regions: list[dict[str, Any]] = [{"id": "s0", "type": "structural", "settings": settings}]
    for k in range(trial.suggest_int("regions", 1, MAX_REGIONS)):
        copies = trial.suggest_int(f"c{k}_copies", 1, MAX_COPIES)
        if copies > 1:
            regions.append({"id": f"p{k}", "type": "promoter", "settings": {"copies": copies}})
        bases = []
        for j in range(trial.suggest_int(f"c{k}_bases", 1, MAX_BASES)):
            base = trial.suggest_categorical(f"c{k}_b{j}_base", ("T", "A"))
            kind = trial.suggest_categorical(f"c{k}_b{j}_{base}_kind", coding_kinds(base))
            bases.append({"base": base, "kind": kind, "params": {}})
        regions.append({"id": f"c{k}", "type": "coding", "bases": bases})
    edges: list[dict[str, Any]] = []
    gate = trial.suggest_categorical("gate", GATES)
    if gate != "none":
        regions.insert(
            1, {"id": "r0", "type": "regulatory", "bases": [{"base": "C", "kind": "gate", "params": {}}]}
        )
        edges.append({"source": "r0", "target": "c0", "kind": gate})
    try:
        genome = Genome.from_dict({"regions": regions, "edges": edges})
    except GenomeError:
        return None
    return genome if account(genome).params <= max_params else None


def _replay(study: Any, store: Store, run_id: str) -> int:
    """Add the run's stored trials to `study`; how many generations were stored."""
    import optuna
    from optuna.distributions import json_to_distribution

    record = store.get_run(run_id)
    for rec in store.individuals(run_id):
        change = rec.change if isinstance(rec.change, dict) else {}
        if rec.operator != OPERATOR or "params" not in change:
            continue
        rows = [e for e in rec.evaluations if e.individual_id == rec.id]
        distributions = {k: json_to_distribution(v) for k, v in change["distributions"].items()}
        if rows and rows[0].status == "ok":
            value, state = quality_of(rows[0].metrics or {}), optuna.trial.TrialState.COMPLETE
        else:
            value, state = None, optuna.trial.TrialState.FAIL
        study.add_trial(
            optuna.trial.create_trial(
                params=change["params"], distributions=distributions, value=value, state=state
            )
        )
    return 0 if record is None else record.generations


def version_mismatch(run_config: Mapping[str, Any]) -> str | None:
    """Why a stored Optuna run may not be resumed or reported under the installed Optuna
    (None: it may; runs stored before the version was recorded pass)."""
    began = run_config.get("optuna")
    if began is None:
        return None
    import optuna

    now = optuna.__version__
    return None if began == now else f"began under Optuna {began}, not {now}: resume it under {began}"


def run_optuna(
    store: Store,
    config: RunConfig,
    pool: Pool,
    budget_flops: float,
    run_id: str | None = None,
    flops_of: Callable[[Store, str, RunConfig], int] | None = None,
) -> str:
    """Run (or resume, given `run_id`) Optuna's default sampler on the DOGMA space until
    the run's training FLOPs reach `budget_flops`; the run's id in `store`."""
    import optuna
    from optuna.distributions import distribution_to_json

    from benchmarks.search_flops import run_flops

    flops_of = flops_of or run_flops
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = SPACES[config.space].from_config(config)
    pinned = dict(getattr(space, "pinned", {}))
    if run_id is None:
        run_id = store.create_run(
            {**config.to_dict(), "arm": OPERATOR, "optuna": optuna.__version__}, config.seed, config.task
        )
    elif why := version_mismatch(getattr(store.get_run(run_id), "config", None) or {}):
        raise ValueError(f"run {run_id} {why}")
    store.set_run_status(run_id, "running")
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=config.seed))
    generation = _replay(study, store, run_id)
    idle, reason = 0, "training-FLOP budget reached"
    precision = pool_precision(config.precision, pool)
    while flops_of(store, run_id, config) < budget_flops:
        if idle >= MAX_IDLE:
            reason = f"{MAX_IDLE} proposals in a row trained nothing"
            break
        trial = study.ask()
        genome = suggest_genome(trial, pinned, config.max_params)
        if genome is None or space.violation(genome) is not None:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            idle += 1
            continue
        seed = derive_seed(config.seed, genome.id)  # Evaluator.seed_for under seed_policy="run"
        stored = store.find_evaluation(genome.id, config.task, config.steps, seed, run_id=run_id)
        if stored is not None:  # a repeated proposal: the stored result, free
            idle += 1
            if stored.status == "ok":
                study.tell(trial, quality_of(stored.metrics or {}))
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        idle = 0
        request = EvalRequest(
            genome_yaml=genome.to_yaml(),
            genome_id=genome.id,
            task=config.task,
            fidelity=config.steps,
            seed=seed,
            timeout_s=config.timeout_s,
            precision=precision,
        )
        start = time.perf_counter()
        (result,) = pool.evaluate([request])
        change = {
            "params": dict(trial.params),
            "distributions": {k: distribution_to_json(d) for k, d in trial.distributions.items()},
        }
        metrics = {**result.metrics, **space.cost_metrics(genome)}
        store.commit_generation(
            run_id,
            generation,
            genomes=[GenomeIn(genome.id, genome.to_yaml(), genome.sequence_view())],
            individuals=[IndividualIn(0, genome.id, seed, OPERATOR, change)],
            evaluations=[
                EvaluationIn(
                    genome.id,
                    config.task,
                    config.steps,
                    seed,
                    result.status,
                    metrics,
                    result.reason,
                    result.wall_seconds or (time.perf_counter() - start),
                    by_slot(0),
                )
            ],
            members=[by_slot(0)],
        )
        generation += 1
        if result.status == "ok":
            study.tell(trial, quality_of(metrics))
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    store.set_run_status(run_id, "finished", reason)
    return run_id


__all__ = ["OPERATOR", "coding_kinds", "run_optuna", "suggest_genome"]
