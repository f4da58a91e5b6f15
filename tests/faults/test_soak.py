"""The soak (`benchmarks/soak.py`): a search on the soak's own durable PostgreSQL server across
two Ray nodes, its driver SIGKILLed at random moments (and, in the full soak, a worker node
killed mid-evaluation and the server crash-restarted), resumed after each, and compared with
an uninterrupted run of the same seed: the same best, front, evaluation count and stored
metrics, no lease left running, no duplicate row, `evolve check` clean.

The short soak (three driver kills) runs with the slow tests, in CI too. The full soak
(ten driver kills, a worker node kill, a crash-restart) is marked `soak`, which the test
run leaves out (pyproject's addopts): `python -m pytest -m soak tests/faults/test_soak.py`,
or `python -m benchmarks.soak` for its table alone.

Both need PostgreSQL's server programs (initdb, pg_ctl: the soak starts its own server, not
CI's, which runs without durable commits); without them they skip, or fail where
EVOLVE_REQUIRE_POSTGRES is set (CI). Readers poll the run throughout; their failures are
counted and printed (making readers never fail is issue 22's item 3), not asserted here.
"""

from __future__ import annotations

import pytest

pytest.importorskip("ray")
pytest.importorskip("psycopg")

from benchmarks.soak import DRIVER, NODE, POSTGRES, SEARCH, Outcome, Plan, run_soak, table  # noqa: E402
from benchmarks.soak_infra import postgres_bindir  # noqa: E402
from dogma_evolve.store.testing import skip_unless_required  # noqa: E402

#: The short soak's search: one offspring generation (the full soak's has twenty), each
#: candidate trained under one seed (the full soak confirms the best under three): the kills
#: are drawn from the reference's pace, so a shorter run makes every life of the soak shorter.
SHORT = (*SEARCH[:2], "--generations", "1", *SEARCH[4:], "--confirm", "1")


def _server_or_skip() -> None:
    if postgres_bindir() is None:
        skip_unless_required("the soak starts its own PostgreSQL server and found no initdb")


def _soak(plan: Plan) -> Outcome:
    _server_or_skip()
    outcome = run_soak(plan)
    print(table(outcome))  # pytest shows it with -s, or with the failure
    return outcome


def _struck(outcome: Outcome, kind: str) -> int:
    return sum(event.kind == kind for event in outcome.events)


def _assert_identical(outcome: Outcome) -> None:
    verdict = outcome.verdict
    assert verdict["faults"] == [], table(outcome)  # no lease left running, no duplicate
    assert verdict["differences"] == [], table(outcome)  # best, front, births, metrics
    assert verdict["identical"]
    assert outcome.check["ok"], outcome.check  # evolve check: leases, keys, artifacts' sha256
    assert outcome.readers["polls"] > 0  # the readers ran beside the writer


@pytest.mark.slow
def test_short_soak_three_driver_kills_end_as_the_uninterrupted_run() -> None:
    outcome = _soak(Plan(kills=3, node_kills=0, restarts=0, readers=1, search=SHORT, seed=1, max_s=900))
    assert _struck(outcome, DRIVER) == 3, table(outcome)
    assert len(outcome.lives) >= 4  # each kill was followed by a resume
    _assert_identical(outcome)


@pytest.mark.slow
@pytest.mark.soak
def test_full_soak() -> None:
    outcome = _soak(Plan(max_s=3600))
    assert _struck(outcome, DRIVER) >= 10, table(outcome)
    assert _struck(outcome, NODE) >= 1 and _struck(outcome, POSTGRES) == 1, table(outcome)
    _assert_identical(outcome)
