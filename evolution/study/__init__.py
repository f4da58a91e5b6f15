"""Search from Python: make or load a stored search, run it generation by generation, read
what it found (Optuna's `create_study` / `optimize` / `best_trial` / `trials_dataframe` are
the model). `evolve run` is a thin layer over it.

    from dogma_evolve.evolution import create_search

    search = create_search("sqlite:///evolve.db", task=MyTask, population=8, steps=40, seed=0)
    search.optimize(generations=2, callbacks=[lambda search, report: print(report.best_quality)])
    search.best_individual        # Individual: id, genome_id, sequence, quality, params, metrics
    search.pareto_front           # [Individual], quality ↑ parameters ↓
    search.evaluations_dataframe()  # one row per evaluation (pandas; evaluations(): plain dicts)
    search.export("best-model")   # a standalone model directory; format="hf": transformers

    create_search(store, task, *, load_if_exists=False, **RunConfig fields) -> Search
    load_search(store, run_id=None, **overrides) -> Search   the newest search by default

Modules: `opening` (create, load), `search` (`Search`), `running` (one `optimize`: pool,
callbacks, stop), `results` (`Individual`, the front, the table), `task_arg` (a task class or
object as the text workers rebuild it from).

Names are imported on first use (PEP 562, `evaluation.lazy`), so that a reader of one of its
torch-free modules (`stored_run`, which `evolve report` uses) does not load the whole search.
"""

from typing import TYPE_CHECKING

from dogma_evolve.evaluation.lazy import install

if TYPE_CHECKING:  # the names as type checkers see them; at run time, __getattr__
    from dogma_evolve.evolution.study.opening import DEFAULT_STORE, create_search, load_search
    from dogma_evolve.evolution.study.results import COLUMNS, Individual
    from dogma_evolve.evolution.study.search import Search

_PUBLIC = {
    "COLUMNS": "dogma_evolve.evolution.study.results",
    "DEFAULT_STORE": "dogma_evolve.evolution.study.opening",
    "Individual": "dogma_evolve.evolution.study.results",
    "Search": "dogma_evolve.evolution.study.search",
    "create_search": "dogma_evolve.evolution.study.opening",
    "load_search": "dogma_evolve.evolution.study.opening",
}
__getattr__ = install(__name__, _PUBLIC)

__all__ = ["COLUMNS", "DEFAULT_STORE", "Individual", "Search", "create_search", "load_search"]
