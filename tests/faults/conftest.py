"""Fault-injection tests: each test tallies the injections it made and what they lost
(rows missing or doubled, runs hung); the tally is printed at the end of the session."""

from __future__ import annotations

from collections import defaultdict

import pytest

_TALLY: dict[str, dict[str, int]] = defaultdict(lambda: {"injected": 0, "lost": 0})


class Tally:
    def add(self, fault: str, injected: int = 1, lost: int = 0) -> None:
        _TALLY[fault]["injected"] += injected
        _TALLY[fault]["lost"] += lost


@pytest.fixture
def tally() -> Tally:
    return Tally()


def pytest_terminal_summary(terminalreporter) -> None:
    if not _TALLY:
        return
    terminalreporter.section("fault injections")
    for fault, counts in sorted(_TALLY.items()):
        terminalreporter.write_line(f"{fault:<40} injected {counts['injected']:>3}   lost {counts['lost']}")
