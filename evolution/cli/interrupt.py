"""Ctrl-C that a long command cannot lose.

Python raises `KeyboardInterrupt` at whatever bytecode the main thread runs when SIGINT
arrives. If that is a finaliser (`__del__`, a weakref callback: Ray's object references and
SQLAlchemy's connections have them), the exception is printed as "Exception ignored in ..."
and dropped, and the command runs on to the end as if the key had never been pressed.
`CtrlC` remembers the press as well as raising it; `check()`, called where raising is safe
(the run's progress events), raises it again if it was swallowed."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any


class CtrlC:
    """A context that installs a SIGINT handler which records the press, then raises
    `KeyboardInterrupt` as Python's own does. Outside the main thread (where no handler
    can be installed) it does nothing and `check` never raises."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise `KeyboardInterrupt` if Ctrl-C was pressed inside this context (in the main
        thread only, where Python raises it too)."""
        if self.pressed and threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False


__all__ = ["CtrlC"]
