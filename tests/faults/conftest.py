"""Fault-injection tests: each test tallies the injections it made and what they lost
(rows missing or doubled, runs hung); the tally is printed at the end of the session."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

from store.testing import POSTGRES_URL_ENV, REQUIRE_POSTGRES_ENV, postgres_base_url

_TALLY: dict[str, dict[str, int]] = defaultdict(lambda: {"injected": 0, "lost": 0})


class Tally:
    def add(self, fault: str, injected: int = 1, lost: int = 0) -> None:
        _TALLY[fault]["injected"] += injected
        _TALLY[fault]["lost"] += lost


@pytest.fixture
def tally() -> Tally:
    return Tally()


def postgres_or_skip() -> str:
    url = postgres_base_url()
    if url is None:
        reason = f"PostgreSQL tests need {POSTGRES_URL_ENV} (run them with .ci/with-postgres)"
        if os.environ.get(REQUIRE_POSTGRES_ENV):
            pytest.fail(reason + f"; {REQUIRE_POSTGRES_ENV} is set", pytrace=False)
        pytest.skip(reason)
    return url


def pytest_terminal_summary(terminalreporter) -> None:
    if not _TALLY:
        return
    terminalreporter.section("fault injections")
    for fault, counts in sorted(_TALLY.items()):
        terminalreporter.write_line(f"{fault:<40} injected {counts['injected']:>3}   lost {counts['lost']}")
