"""`CtrlC`: a Ctrl-C that a finaliser swallowed is raised again at the next check."""

from __future__ import annotations

import os
import signal

import pytest

from dogma_evolve.evolution.cli.interrupt import CtrlC


class _SwallowsCtrlC:
    """Receives SIGINT inside its finaliser, where Python prints and drops the exception."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at one of these bytecodes, inside __del__
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the point
def test_a_ctrl_c_swallowed_by_a_finaliser_is_raised_at_the_next_check() -> None:
    with CtrlC() as ctrl_c:
        ctrl_c.check()  # nothing pressed yet
        _SwallowsCtrlC()  # dropped at once: "Exception ignored in ... KeyboardInterrupt"
        assert ctrl_c.pressed
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()


def test_ctrl_c_raises_as_python_does_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), CtrlC():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
    assert signal.getsignal(signal.SIGINT) is before
