"""`create_search` and `load_search`: a `Search` from a store (Optuna's `create_study` and
`load_study` are the model).

``store`` is a SQLAlchemy URL (``sqlite:///evolve.db``, a PostgreSQL URL) or an open
`store.Store`. ``task`` is a task's text (``"text"``, the default, ``"suite"``, ``"mqar,compression"``,
``"my_tasks:Parity?length=12"``), a task class or a task object
(`evolution.study.task_arg`). Every other keyword is a `RunConfig` field (``population``,
``seed``, ``steps``, ``generations``, ``max_evaluations``, ``strategy``, ``objectives`` ...),
checked by `RunConfig` exactly as `evolve run` checks its options, and by
`evolution.preflight` (a genome budget no genome fits, a training past a text's epoch cap).
Every refusal is a one-line `UsageError` (a `StoreError` for the store itself) before a run
exists.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dogma_evolve.evolution.errors import UsageError, not_a_search
from dogma_evolve.evolution.study.running import RESUME_OVERRIDES
from dogma_evolve.evolution.study.search import Search
from dogma_evolve.evolution.study.task_arg import importing_script, task_text

if TYPE_CHECKING:
    from dogma_evolve.evolution.config import RunConfig
    from dogma_evolve.evolution.spaces.contract import SearchSpace
    from dogma_evolve.evolution.study.stored_run import StoredRun
    from dogma_evolve.store import Store

DEFAULT_STORE = "sqlite:///evolve.db"


def create_search(
    store: str | Store = DEFAULT_STORE,
    task: Any = "text",
    *,
    load_if_exists: bool = False,
    **options: Any,
) -> Search:
    """A new search (a run of kind `search`, nothing evaluated yet; `Search.optimize` runs
    it). With ``load_if_exists``, the newest search in the store made with the same settings
    (every `RunConfig` field but how far and where it runs, `RESUME_OVERRIDES`) is
    loaded instead, when there is one: a script that makes its search this way continues
    it when run again. A user's task is imported, checked and pinned to its code here."""
    _refuse_while_imported()
    from dogma_evolve.evolution.config import RunConfig
    from dogma_evolve.evolution.preflight import check_feasible, check_text

    unknown = sorted(set(options) - set(RunConfig.__dataclass_fields__) - {"task_code"})
    if unknown or "task_code" in options:
        bad = unknown or ["task_code"]
        raise UsageError(f"create_search: unknown setting {bad[0]!r} (the settings are RunConfig's fields)")
    try:
        config = RunConfig(task=task_text(task), **options)
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    space = check_feasible(config)  # the run's space, built once
    check_text(config, space)  # no training of the run repeats a text past the epoch cap
    opened, owns = _open(store, create=not config.memory_from)
    try:
        if config.memory_from:  # the run's id in full (the space reads none of it)
            config = replace(config, memory_from=opened.resolve_run(config.memory_from))
        if load_if_exists:
            found = _same_search(opened, config)
            if found is not None:
                overrides = {k: getattr(config, k) for k in RESUME_OVERRIDES if k in options}
                return Search(opened, found, overrides, owns_store=owns)
        stored = _new_run(opened, config, space)
    except BaseException:
        if owns:
            opened.close()
        raise
    return Search(opened, stored.run_id, owns_store=owns, stored=stored)


def load_search(store: str | Store = DEFAULT_STORE, run_id: str | None = None, **overrides: Any) -> Search:
    """The stored search ``run_id`` (an id or a unique prefix; default: the newest search).
    ``overrides`` are what a resumed search may take anew (`RESUME_OVERRIDES`: generations,
    workers, ray_address, timeout_s, the ladder's options). Reading it imports no task code;
    `Search.optimize` and `Search.export` import a user's task and refuse code that changed
    since the run pinned it."""
    _refuse_while_imported()
    bad = sorted(set(overrides) - set(RESUME_OVERRIDES))
    if bad:
        raise UsageError(
            f"load_search: {bad[0]!r} cannot change on a stored search; "
            f"it may take {', '.join(RESUME_OVERRIDES)}"
        )
    opened, owns = _open(store, create=False)
    try:
        if run_id is None:
            from dogma_evolve.evolution.report.summary import latest_run

            run_id = latest_run(opened)
        else:
            run_id = opened.resolve_run(run_id)
        record = opened.get_run(run_id)
        if record is None or record.kind != "search":
            if record is None:
                raise UsageError(f"run {run_id}: no run")
            raise UsageError(f"run {run_id}: {not_a_search(record.kind)}")
    except BaseException:
        if owns:
            opened.close()
        raise
    return Search(opened, run_id, {k: v for k, v in overrides.items() if v is not None}, owns_store=owns)


def _refuse_while_imported() -> None:
    module = importing_script()
    if module is not None:
        raise UsageError(
            f"{module}.py starts a search when it is imported, and every Ray worker imports it for "
            "its task class: put the search under if __name__ == '__main__':"
        )


def _open(store: str | Store, create: bool) -> tuple[Store, bool]:
    """(the store, whether this call opened it)."""
    from dogma_evolve.store import Store

    if isinstance(store, Store):
        return store, False
    if not isinstance(store, str):
        raise UsageError(f"store must be a SQLAlchemy URL or a store.Store, not {type(store).__name__}")
    return Store(store, create=create), True


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in RESUME_OVERRIDES}


def _same_search(store: Store, config: RunConfig) -> str | None:
    """The newest search of ``store`` stored with ``config``'s settings, or None."""
    wanted = _comparable(config.to_dict())
    for run in sorted(store.list_runs("search"), key=lambda r: r.created, reverse=True):
        from dogma_evolve.evolution.config import RunConfig

        try:
            stored = RunConfig.from_dict(run.config).to_dict()
        except ValueError:  # a run this version cannot read back: not the one asked for
            continue
        if _comparable(stored) == wanted:
            return run.id
    return None


def _new_run(store: Store, config: RunConfig, space: SearchSpace) -> StoredRun:
    """Create the run (the refusals first: `memory_from` of another space), held by nobody
    until `Search.optimize` binds an engine to it; no engine is built here."""
    from dogma_evolve.evolution.study.stored_run import StoredRun  # torch

    try:
        return StoredRun.create(store, config, space=space)
    except (KeyError, ValueError) as e:
        raise UsageError(str(e).strip("'\"")) from None


__all__ = ["DEFAULT_STORE", "create_search", "load_search"]
