"""Environment failures: an evaluation that failed because of the machine, not the genome.

A genome's own failures are typed statuses (`invalid`, `nan`, `oom` of its own size,
`timeout` at its own pace, `crash`); they are evidence about the genome and are stored.
A failure that no genome could avoid is not: an import error, a module of ours resolved
to another copy's file, a missing build tool, a full, read-only or forbidden file system,
a worker or node that died every time it was tried. Such a failure is a ``crash`` whose
reason starts with :data:`ENVIRONMENT_MARK`, so that it pickles and travels as any result
does; :func:`is_environment` reads it off a result.

The rule (only what is provably the machine's, checked along the exception's chain,
``__cause__``, ``__context__`` and what a Ray error wraps):

* ``ImportError`` (``ModuleNotFoundError`` included): a genome imports nothing; what our
  code or its dependencies import at call time is the installation's;
* ``OSError`` whose errno is ENOSPC, EDQUOT, EROFS or EACCES (a full disk, a read-only or
  forbidden directory: a genome writes no file of its own);
* ``FileNotFoundError`` for a compiler or build tool (``cc``, ``c++``, ``ninja``, ``nvcc``
  ...);
* any failure while a module of ours (``dogma_evolve.*``) in ``sys.modules`` comes from
  outside the ``dogma_evolve`` package this code was loaded from (:func:`foreign_module`,
  the worker's light equivalent of the command line's preflight).

Everything else stays the genome's: a shape mismatch, an ``AttributeError`` or
``TypeError`` raised by a block's code, a non-finite loss, an out-of-memory error.

The driver retries an environment failure like a transient one (`evaluation.dispatch`);
when every attempt failed so, the engine stops the run before committing the generation
(:class:`EnvironmentFailure`), so nothing about the genome is stored and ``--resume``
continues once the cause is fixed.
"""

from __future__ import annotations

import errno
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from .result import EvalResult, one_line

ENVIRONMENT_MARK = "environment failure:"
#: errno values of a file system a genome cannot have caused
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES})
#: programs whose absence is a missing build tool, never a genome's fault
BUILD_TOOLS = frozenset(
    {"cc", "c++", "gcc", "g++", "clang", "clang++", "ninja", "nvcc", "ld", "x86_64-linux-gnu-gcc"}
)
NAMESPACE = "dogma_evolve"


class EnvironmentFailure(RuntimeError):
    """Raised by the engine's evaluator when an evaluation failed for its environment on
    every attempt: the run stops before committing its generation. ``result`` is the
    failed evaluation (its reason starts with :data:`ENVIRONMENT_MARK`); the message is one
    line naming the cause and the genome nothing was recorded against."""

    def __init__(self, result: EvalResult) -> None:
        self.result = result
        super().__init__(
            f"{result.reason}; nothing was recorded against genome {result.genome_id[:12]} "
            f"({result.task}, {result.fidelity} steps)"
        )


def is_environment(result: EvalResult) -> bool:
    """Whether ``result`` is an environment failure (a ``crash`` marked by the worker or the
    driver, module docstring)."""
    return result.status == "crash" and is_environment_reason(result.reason)


def is_environment_reason(reason: str | None) -> bool:
    """Whether a stored reason (an evaluation's, a lease's) is an environment failure's."""
    return (reason or "").startswith(ENVIRONMENT_MARK)


def environment_reason(cause: str, host: str | None = None) -> str:
    """The reason of an environment failure: the mark, the cause and where it happened."""
    where = f" on {host}" if host else ""
    return one_line(f"{ENVIRONMENT_MARK} {cause}{where}")


def environment_cause(error: BaseException) -> str | None:
    """One line naming the environmental cause of ``error`` (module docstring's rule), or
    None when nothing along its chain is provably the machine's."""
    for link in _chain(error):
        if any(isinstance(getattr(link, name, None), BaseException) for name in ("cause", "client_exc")):
            continue  # a Ray error wrapping (and posing as) its cause: judge the cause itself
        if isinstance(link, ImportError):
            return _describe(link)
        if isinstance(link, FileNotFoundError) and Path(str(link.filename or "")).name in BUILD_TOOLS:
            return f"missing build tool {link.filename!s}: {_describe(link)}"
        if isinstance(link, OSError) and link.errno in ENVIRONMENT_ERRNOS:
            return f"file system ({errno.errorcode.get(link.errno or 0, link.errno)}): {_describe(link)}"
    return None


def foreign_module() -> str | None:
    """The first module of ours (``dogma_evolve.*``) loaded in this process from outside the
    ``dogma_evolve`` package this module came from, with its file; None when all are ours.
    Cheap (one pass over ``sys.modules``): run when an evaluation fails."""
    package = sys.modules.get(NAMESPACE)
    roots = [Path(p).absolute() for p in getattr(package, "__path__", ())]
    if not roots:
        return None
    for name, module in list(sys.modules.items()):
        if not name.startswith(NAMESPACE + "."):
            continue
        where = getattr(module, "__file__", None)
        if not where:
            continue
        path = Path(where).absolute()
        if not any(path.is_relative_to(root) for root in roots):
            return f"{name} resolves to {path}, outside {roots[0]}: another copy on the worker's path"
    return None


def classify_environment(error: BaseException | None) -> str | None:
    """The reason of an environment failure for ``error`` raised on this machine (None: no
    exception, a typed failure), or None when it is the genome's: the cause from
    :func:`environment_cause`, else a foreign module of ours (:func:`foreign_module`)."""
    cause = environment_cause(error) if error is not None else None
    if cause is None:
        foreign = foreign_module()
        if foreign is None:
            return None
        cause = f"{foreign}" + (f" ({_describe(error)})" if error is not None else "")
    return environment_reason(cause, socket.gethostname())


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it: ``__cause__``, ``__context__`` and a Ray error's ``cause``
    (a task's error) or ``client_exc`` (a system error: arguments that could not be
    unpickled), each once."""
    todo: list[BaseException] = [error]
    seen: set[int] = set()
    while todo:
        link = todo.pop(0)
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        wrapped = (getattr(link, "cause", None), getattr(link, "client_exc", None))  # Ray's errors
        for nxt in (*wrapped, link.__cause__, link.__context__):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def _describe(error: BaseException) -> str:
    message = str(error)
    return one_line(f"{type(error).__name__}: {message}" if message else type(error).__name__)


__all__ = [
    "BUILD_TOOLS",
    "ENVIRONMENT_ERRNOS",
    "ENVIRONMENT_MARK",
    "EnvironmentFailure",
    "classify_environment",
    "environment_cause",
    "environment_reason",
    "foreign_module",
    "is_environment",
    "is_environment_reason",
]
