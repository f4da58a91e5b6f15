"""Evolution: the DEAP loop that breeds, evaluates, selects and records DOGMA genomes.

    create_search(store, task=..., **settings) / load_search(store, run_id)   a `Search` from
                                                Python: optimize, best_individual, pareto_front,
                                                evaluations_dataframe, export (evolution.study)
    Engine(RunConfig(...), store, pool).run()   one search, committed generation by generation
    Engine.resume(run_id, store, pool)          continue a run from its last committed generation
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

_EXPORTS = {
    "create_search": "evolution.study",
    "load_search": "evolution.study",
    "Search": "evolution.study",
    "Individual": "evolution.study",
    "Engine": "evolution.engine",
    "RunConfig": "evolution.config",
    "best_of": "evolution.engine",
    "derive_seed": "evolution.engine",
    "MUTATIONS": "evolution.spaces.dogma.operators",
    "Discard": "evolution.spaces.contract",
    "vary": "evolution.spaces.dogma.operators",
    "repair": "evolution.spaces.dogma.repair",
    "pareto_front": "evolution.selection",
    "export_individual": "evolution.export",
    "DogmaSpace": "evolution.spaces.dogma.space",
    "SPACES": "evolution.spaces.registry",
    "SearchSpace": "evolution.spaces.contract",
    "InProcessPool": "evaluation.table",
    "TableEvaluator": "evaluation.table",
    "OperatorPolicy": "evolution.policy",
    "STRATEGIES": "evolution.strategies",
    "make_strategy": "evolution.strategies",
    "OBJECTIVES": "evolution.objectives",
    "NB201Space": "evolution.spaces.nb201",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'evolution' has no attribute {name!r}")
