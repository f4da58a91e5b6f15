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
"""

from dogma_evolve.evolution.study.opening import DEFAULT_STORE, create_search, load_search
from dogma_evolve.evolution.study.results import COLUMNS, Individual
from dogma_evolve.evolution.study.search import Search

__all__ = ["COLUMNS", "DEFAULT_STORE", "Individual", "Search", "create_search", "load_search"]
