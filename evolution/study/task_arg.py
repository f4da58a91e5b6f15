"""The ``task=`` of `create_search`: a task's text, a task class or a task object, turned into
the text the run pins (`evaluation.tasks.imported`: ``MODULE:CLASS?settings``).

Ray workers rebuild a user's task from that text by importing ``MODULE`` and calling
``CLASS(**settings)``, so a class or an object is accepted when that rebuilds it:

* a class at the top level of an importable module: ``MODULE`` is its module;
* a class at the top level of the script being run (``__main__``): ``MODULE`` is the script's
  module name (``python my_search.py``: ``my_search``; ``python -m pkg.run``: ``pkg.run``).
  Workers import the script as that module, which runs its top level again, so the script
  must keep its search under ``if __name__ == "__main__":`` (the rule `multiprocessing`
  has too). The script is imported here first, as the workers will import it: a script that
  starts a search when imported is refused (`importing_script`), before anything is made;
* an object: its class as above, and its settings: the ``init`` fields of a dataclass, else
  what its ``settings()`` method returns (JSON values). ``CLASS(**settings)`` must draw the
  batches the object draws (checked on one batch), or it is refused.

Refused in one line (`UsageError`): a class defined inside a function, one of an interactive
session (``__main__`` without a file: a notebook, ``python -c``), a script whose file name is
no module name, an object whose settings cannot be read or do not rebuild it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

from dogma_evolve.evolution.errors import UsageError

#: the script modules being imported by `script_module` (a search started meanwhile is refused)
_IMPORTING: set[str] = set()


def importing_script() -> str | None:
    """The module name of a script `task_text` is importing right now, if any: a search made
    while it imports would run again in every Ray worker that imports the script."""
    return next(iter(_IMPORTING), None)


def task_text(task: Any) -> str:
    """The text that names ``task`` (a string as it is; a class or an object: module docstring)."""
    if isinstance(task, str):
        return task
    from dogma_evolve.evaluation.tasks.imported import canonical_text  # torch

    if isinstance(task, type):
        cls, settings = task, {}
    else:
        cls, settings = type(task), _settings_of(task)
    target = f"{_module_of(cls)}:{cls.__qualname__}"
    try:
        text = canonical_text(target, settings, None)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not isinstance(task, type):
        _check_rebuilt(task, text)
    return text


def _settings_of(task: Any) -> dict[str, Any]:
    """An object's settings: a dataclass's init fields, else its ``settings()``."""
    if dataclasses.is_dataclass(task):
        return {f.name: getattr(task, f.name) for f in dataclasses.fields(task) if f.init}
    settings = getattr(task, "settings", None)
    if callable(settings):
        found = settings()
        if isinstance(found, dict):
            return dict(found)
    raise UsageError(
        f"task object of class {type(task).__qualname__}: its settings cannot be read; make the "
        "class a dataclass (its fields are the settings), give it a settings() method returning "
        "a dict of its keyword arguments, or pass the class"
    )


def _module_of(cls: type) -> str:
    name = cls.__qualname__
    if "<locals>" in name:
        raise UsageError(
            f"task class {name} is defined inside a function; Ray workers import it by name: "
            "define it at the top level of a module or script"
        )
    if cls.__module__ != "__main__":
        return cls.__module__
    return script_module()


def script_module() -> str:
    """The module name under which workers import the running script (module docstring),
    after importing it so here."""
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    file = getattr(main, "__file__", None)
    if spec is not None and spec.name not in ("__main__", None):
        module = spec.name  # python -m pkg.module
    elif file and str(file).endswith(".py"):
        module = Path(file).stem
        if not module.isidentifier():
            raise UsageError(
                f"task class in script {file}: {module!r} is no module name, and Ray workers "
                "import the script by it: rename the file (letters, digits, underscores)"
            )
    else:
        raise UsageError(
            "the task class is defined in an interactive session (__main__ has no file), which "
            "Ray workers cannot import: put it in a .py file (a module of its own, or the script "
            "you run, with the search under if __name__ == '__main__':)"
        )
    found = importlib.util.find_spec(module) if module not in sys.modules else None
    if found is not None and file and found.origin and Path(found.origin).resolve() != Path(file).resolve():
        raise UsageError(
            f"task class in script {file}: the module name {module!r} imports {found.origin} "
            "instead; rename the script"
        )
    if module not in sys.modules:
        _IMPORTING.add(module)
        try:
            from dogma_evolve.genome.plugins import PluginError, import_module

            try:
                import_module(module)
            except PluginError as e:
                raise UsageError(f"task class in script {file}: {e}") from None
        finally:
            _IMPORTING.discard(module)
    return module


def _check_rebuilt(task: Any, text: str) -> None:
    """``CLASS(**settings)`` must draw what the object draws (one batch from one seed)."""
    import torch

    from dogma_evolve.evaluation.tasks.imported import load

    try:
        rebuilt = load(text)[0]
        mine = task.batch(torch.Generator().manual_seed(0), 2)
        theirs = rebuilt.batch(torch.Generator().manual_seed(0), 2)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - the user's code: one line, whatever it raised
        raise UsageError(f"task {text}: {type(e).__name__}: {e}") from None
    same = len(mine) == len(theirs) and all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=False))
    if not same:
        raise UsageError(
            f"task object of class {type(task).__qualname__} is not what {text} builds (another "
            "batch from the same seed): its settings must be its keyword arguments"
        )


__all__ = ["importing_script", "script_module", "task_text"]
