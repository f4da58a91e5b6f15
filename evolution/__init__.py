"""Evolution: the DEAP loop that breeds, evaluates, selects and records DOGMA genomes.

    create_search(store, task=..., **settings) / load_search(store, run_id)   a `Search` from
                                                Python: optimize, best_individual, pareto_front,
                                                evaluations_dataframe, export (evolution.study)
    Engine(RunConfig(...), store, pool).run()   one search, committed generation by generation
    Engine.resume(run_id, store, pool)          continue a run from its last committed generation
    StoredRun.open(store, run_id) / .create(store, config)   a stored run opened once: config,
                                                space, best(), front(); Engine.bind(run, pool)
    rules (evolution.rules)                     fitness, fidelity, promotion, seed and cache rules
                                                as plain functions (engine and readers share them)
    SPACES / DogmaSpace / NB201Space            search spaces behind one protocol (spaces/contract.py)
    make_strategy("nsga2"|"aging"|"local"|"random")   who breeds and who survives (STRATEGIES;
                                                "regularized": aging's old name, for stored runs)
    OBJECTIVES                                  what a run selects on, read from the metrics
    OperatorPolicy                              meta-policy memory: operator credit, bandit
    InProcessPool / TableEvaluator              pools without Ray (evaluation.table)
    export_individual(store, record, out_dir, fmt="standalone"|"hf")   a standalone model
                                                directory, or a transformers one

The `evolve` command lives in `evolution.cli.main`. Names are imported on first use (PEP 562)
so that `evolve genome validate` answers without loading torch.
"""

from importlib import import_module
from typing import Any

_PUBLIC = {
    "create_search": "dogma_evolve.evolution.study",
    "load_search": "dogma_evolve.evolution.study",
    "Search": "dogma_evolve.evolution.study",
    "Individual": "dogma_evolve.evolution.study",
    "Engine": "dogma_evolve.evolution.engine",
    "StoredRun": "dogma_evolve.evolution.study.stored_run",
    "RunConfig": "dogma_evolve.evolution.config",
    "best_of": "dogma_evolve.evolution.engine",
    "derive_seed": "dogma_evolve.evolution.engine",
    "MUTATIONS": "dogma_evolve.evolution.spaces.dogma.operators",
    "Discard": "dogma_evolve.evolution.spaces.contract",
    "vary": "dogma_evolve.evolution.spaces.dogma.operators",
    "repair": "dogma_evolve.evolution.spaces.dogma.repair",
    "pareto_front": "dogma_evolve.evolution.selection",
    "export_individual": "dogma_evolve.evolution.export",
    "DogmaSpace": "dogma_evolve.evolution.spaces.dogma.space",
    "SPACES": "dogma_evolve.evolution.spaces.registry",
    "SearchSpace": "dogma_evolve.evolution.spaces.contract",
    "InProcessPool": "dogma_evolve.evaluation.table",
    "TableEvaluator": "dogma_evolve.evaluation.table",
    "OperatorPolicy": "dogma_evolve.evolution.policy",
    "STRATEGIES": "dogma_evolve.evolution.strategies",
    "make_strategy": "dogma_evolve.evolution.strategies",
    "OBJECTIVES": "dogma_evolve.evolution.objectives",
    "NB201Space": "dogma_evolve.evolution.spaces.nb201",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'dogma_evolve.evolution' has no attribute {name!r}")
