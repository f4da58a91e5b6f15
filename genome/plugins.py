"""Loading a user's code: ``MODULE:ATTR`` imports, entry points, and fingerprints of code.

This is the one place where the project imports code it does not ship (a user's task
today; a user's block kind later, through the same functions), so what it does is kept
plain and checkable:

* :func:`import_object` imports ``MODULE`` and follows ``ATTR`` (dotted for a nested
  class); a module that is not importable from ``sys.path`` is looked for in the current
  directory too, which is appended to ``sys.path`` (last, so a file of the current
  directory never shadows an installed package). Every failure is one :class:`PluginError`.
* :func:`entry_point` reads an installed distribution's entry point (``group``, ``name``)
  from the package metadata, without importing anything.
* :func:`code_fingerprint` hashes the source of the code an object comes from: the
  ``.py`` files of its top-level package (or the single file of a top-level module), so
  an edit to any of them changes the fingerprint; the installed distribution's version
  is recorded beside it where there is one.

Nothing here runs on import, and this module imports nothing else of the project but the
old names' aliases (`genome.legacy_names`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from dogma_evolve.genome import legacy_names

#: hex digits of a fingerprint: 64 bits, to tell versions of one user's code apart
FINGERPRINT_CHARS = 16


class PluginError(ValueError):
    """User code that cannot be imported, found or fingerprinted (one line)."""


@dataclass(frozen=True)
class CodeFingerprint:
    """The fingerprint of a module's code: ``digest`` (hex) of the source files under
    ``root`` (a package folder or one module file), ``files`` of them, and ``version``, the
    installed distribution's ``name version`` where the package comes from one, else None."""

    digest: str
    root: str
    files: int
    version: str | None


def split_target(text: str) -> tuple[str, str]:
    """``MODULE:ATTR`` -> (module, attr); a malformed target is a :class:`PluginError`."""
    module, sep, attr = text.partition(":")
    if not sep or not _dotted(module) or not _dotted(attr):
        raise PluginError(f"{text!r} is not MODULE:NAME (a dotted module path, a colon, a name)")
    return module, attr


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def import_module(module: str) -> object:
    """Import ``module``; from the current directory too when it is not found elsewhere.
    A user's module written before the namespace (``from genome import ...``) still loads:
    the old names alias ours (`genome.legacy_names`)."""
    legacy_names.install()
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        cwd = os.getcwd()
        top = module.split(".")[0]
        if error.name != top or cwd in sys.path or "" in sys.path:
            raise PluginError(_import_failure(module, error)) from None
    except (Exception, SystemExit) as error:  # whatever the user's module raises on import
        raise PluginError(_import_failure(module, error)) from None
    sys.path.append(cwd)  # as `python -m` would find it, but after every installed package
    importlib.invalidate_caches()
    try:
        return importlib.import_module(module)
    except (Exception, SystemExit) as error:  # as above
        raise PluginError(_import_failure(module, error)) from None


def _import_failure(module: str, error: BaseException) -> str:
    detail = " ".join(str(error).split()) or type(error).__name__
    return f"cannot import module {module!r}: {type(error).__name__}: {detail}"


def import_object(target: str) -> object:
    """The object ``MODULE:ATTR`` names (see the module docstring)."""
    module_name, attr = split_target(target)
    found = import_module(module_name)
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise PluginError(f"module {module_name!r} has no attribute {attr!r}") from None
    return found


def entry_point(group: str, name: str) -> str | None:
    """The ``MODULE:ATTR`` that an installed distribution registers as ``name`` in entry-point
    ``group``, or None; nothing is imported. Two distributions registering one name is a
    :class:`PluginError` (which one would win depends on the install order)."""
    found = {ep.value for ep in importlib.metadata.entry_points(group=group, name=name)}
    if len(found) > 1:
        raise PluginError(
            f"entry point {name!r} of {group} is registered {len(found)} times: {sorted(found)}"
        )
    return found.pop() if found else None


def entry_point_names(group: str) -> list[str]:
    """The names registered in entry-point ``group``, sorted (nothing is imported)."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=group)})


def code_fingerprint(module_name: str) -> CodeFingerprint:
    """The fingerprint of the code of the (imported) module ``module_name``: see the module
    docstring. A module without source files (built in, made at run time, ``__main__``) is a
    :class:`PluginError`: its code could change unnoticed."""
    top_name = module_name.split(".")[0]
    top = sys.modules.get(top_name)
    if top is None or top_name == "__main__":
        raise PluginError(f"cannot fingerprint {module_name!r}: it is not an importable module")
    folders = list(getattr(top, "__path__", None) or [])
    if folders:
        roots = [Path(folder) for folder in folders]
        files = sorted((f for root in roots for f in root.rglob("*.py")), key=lambda f: str(f))
        shown = str(roots[0])
    else:
        file = getattr(top, "__file__", None)
        if not file or not file.endswith(".py"):
            raise PluginError(f"cannot fingerprint {module_name!r}: it has no Python source file")
        roots, files, shown = [Path(file).parent], [Path(file)], file
    if not files:
        raise PluginError(f"cannot fingerprint {module_name!r}: no .py files under {shown}")
    digest = hashlib.sha256()
    for file in files:
        base = next(root for root in roots if file.is_relative_to(root))
        digest.update(file.relative_to(base).as_posix().encode() + b"\0")
        digest.update(file.read_bytes() + b"\0")
    return CodeFingerprint(digest.hexdigest()[:FINGERPRINT_CHARS], shown, len(files), _version(top_name))


def _version(top_name: str) -> str | None:
    """``name version`` of the installed distribution providing package ``top_name``."""
    names = importlib.metadata.packages_distributions().get(top_name) or []
    if len(names) != 1:
        return None
    try:
        return f"{names[0]} {importlib.metadata.version(names[0])}"
    except importlib.metadata.PackageNotFoundError:
        return None


__all__ = [
    "FINGERPRINT_CHARS",
    "CodeFingerprint",
    "PluginError",
    "code_fingerprint",
    "entry_point",
    "entry_point_names",
    "import_module",
    "import_object",
    "split_target",
]
