"""Readers beside writers (issue 22, item 3): the commands that only read open a store
read-only, and never fail nor disturb a search that writes to it meanwhile.

* A reader never writes: a store at an older schema revision is refused in one line that
  names the command that upgrades it, and left byte-identical (SQLite) or at its revision
  (PostgreSQL); a store at head whose file is not in WAL mode stays so; a read-only
  :class:`Store` refuses every write.
* A real `evolve run` (Ray worker, tiny trainings, two generations) writes while two reader
  processes (`tests/store/readers.py`) poll it every half second through `runs`, `report`,
  `report --html`, `check`, `audit`, `lineage`, `blame` and `diff`: every call succeeds, the
  run finishes, and it stores what the same seeded run stored with nobody reading (statuses
  and the metrics that measure the model; timings aside). Marked slow: it trains.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.evolution.cli.main import main
from dogma_evolve.evolution.cli.replay import compared
from dogma_evolve.store import IndividualIn, Store, StoreError, by_slot
from dogma_evolve.store.migrations import heads
from dogma_evolve.store.migrations.__main__ import main as migrations_main
from dogma_evolve.store.testing import postgres_or_skip, scratch_database

FIXTURE = Path(__file__).parent / "fixtures" / "release_0_1.db"
ROOT = Path(__file__).parents[2]
#: the reader commands refused on an older store (each needs the store's tables to answer)
#: generations the writer commits beside the readers of the checkpoint test
GENERATIONS = 60
READERS = [["runs"], ["runs", "--json"], ["report"], ["report", "--html", "{folder}/r.html"], ["audit", "1"]]


def _digest(path: Path) -> str:
    """The sha256 of a SQLite file, once it is sure no write waits in a WAL beside it: a
    reader of a WAL-mode file may leave the -wal and -shm that SQLite reads it through, but
    never a frame in the -wal (it would be a write)."""
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _journal_mode(path: Path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0])


def _refused(capsys: pytest.CaptureFixture[str], url: str, argv: list[str], folder: Path) -> str:
    """The one line a reader command answers with on ``url``, exit 2, nothing on stdout."""
    code = main([*(a.replace("{folder}", str(folder)) for a in argv), "--store", url])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "", captured
    assert captured.err.startswith("evolve: error: cannot open") and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize("argv", READERS, ids=lambda argv: " ".join(argv))
def test_a_release_0_1_store_is_refused_by_a_reader_and_left_byte_identical(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old.db"
    shutil.copy(FIXTURE, old)
    before = _digest(old)
    line = _refused(capsys, f"sqlite:///{old}", argv, tmp_path)
    assert "release 0.1" in line and "only reads never upgrades it" in line
    assert f"python -m dogma_evolve.store.migrations --url 'sqlite:///{old}' upgrade head" in line
    assert _digest(old) == before
    assert not (tmp_path / "r.html").exists()


def test_an_older_revision_is_refused_by_readers_and_left_as_it_is(
    store_url: str, helpers: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store(store_url) as store:
        store.create_run({}, 1, "mqar")
    assert migrations_main(["--url", store_url, "downgrade", "0006"]) == 0
    capsys.readouterr()
    path = Path(store_url.removeprefix("sqlite:///")) if store_url.startswith("sqlite") else None
    before = _digest(path) if path else None
    (newest,) = heads()
    for argv in READERS:
        line = _refused(capsys, store_url, argv, tmp_path)
        assert f"revision 0006, older than this program's {newest}" in line and "upgrade head" in line
    with pytest.raises(StoreError, match="only reads never upgrades"):
        Store(store_url, readonly=True)
    assert helpers.scalar(store_url, "SELECT version_num FROM alembic_version") == "0006"
    if path is not None:
        assert _digest(path) == before
    # what the message names upgrades it, and the readers read it then
    assert migrations_main(["--url", store_url, "upgrade", "head"]) == 0
    assert main(["runs", "--store", store_url]) == 0


def test_a_reader_leaves_a_store_at_head_byte_identical_and_out_of_wal(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{db_path}"
    with Store(url) as store:
        run = store.create_run({}, 1, "mqar")
    with sqlite3.connect(db_path) as connection:  # a copy kept in rollback-journal mode
        assert connection.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    before = sorted(db_path.parent.iterdir()), _digest(db_path)
    assert main(["runs", "--json", "--store", url]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == run
    assert main(["check", "--json", "--store", url]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    # a file in rollback-journal mode is read through no -wal: nothing at all appears
    assert (sorted(db_path.parent.iterdir()), _digest(db_path)) == before
    assert _journal_mode(db_path) == "delete"


def test_a_read_only_store_reads_and_refuses_every_write(store_url: str, helpers: Any) -> None:
    genome = helpers.make_genome("a")
    with Store(store_url) as store:
        run = store.create_run({}, 1, "mqar")
    with Store(store_url, readonly=True) as reader:
        assert reader.readonly and [r.id for r in reader.list_runs()] == [run]
        with pytest.raises(StoreError, match="create_run: the store was opened read-only"):
            reader.create_run({}, 2, "mqar")
        with pytest.raises(StoreError, match="read-only"):
            reader.commit_generation(run, 0, genomes=[genome])
        with pytest.raises(StoreError, match="read-only"):
            reader.set_run_status(run, "finished")
    assert helpers.row_counts(store_url, ("runs", "genomes")) == {"runs": 1, "genomes": 0}


def test_a_reader_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    with pytest.raises(StoreError, match="does not exist"):
        Store(f"sqlite:///{missing}", readonly=True)
    assert list(tmp_path.iterdir()) == []


def test_readers_open_a_sqlite_store_while_checkpoints_run(db_path: Path, helpers: Any) -> None:
    """A checkpoint copies the WAL into the file header first: a reader that opened the file
    then read a header counting pages the file did not hold yet and refused the store as
    truncated (98% of the opens of a reader beside a busy writer, measured). Here a writer
    commits generations and checkpoints after each, as a long run does every 1,000 pages,
    while this thread opens the store read-only and reads it, again and again."""
    url = f"sqlite:///{db_path}"
    with Store(url) as store:
        run = store.create_run({}, 1, "mqar")
    failures: list[str] = []
    done = threading.Event()

    def write() -> None:
        try:
            with Store(url) as store, sqlite3.connect(db_path) as raw:
                for g in range(GENERATIONS):
                    genomes = [helpers.make_genome(f"{g}-{k}-{'x' * 2000}") for k in range(8)]
                    births = [IndividualIn(k, genome.id, k) for k, genome in enumerate(genomes)]
                    members = [by_slot(k) for k in range(8)]
                    store.commit_generation(run, g, genomes=genomes, individuals=births, members=members)
                    raw.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception as exc:  # noqa: BLE001 - reported by the test
            failures.append(f"writer: {exc}")
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    opened = 0
    while not done.is_set():
        try:
            with Store(url, readonly=True) as reader:
                assert reader.get_run(run) is not None
                assert len(reader.population(run)) in (0, 8)  # none before generation 0
            opened += 1
        except StoreError as exc:
            failures.append(str(exc))
    writer.join()
    assert failures == [] and opened > 0, (opened, failures[:3])


# -- readers polling a real run ---------------------------------------------------------------

#: two generations, each a commit the readers meet (the run exists from before Ray starts, so
#: they poll it running for seconds before the first); one training seed per genome, since
#: confirming the best (`--confirm`) is no write of another kind, only more trainings
RUN = ["--population", "4", "--generations", "1", "--steps", "5", "--min-steps", "0", "--workers", "1"]
RUN += ["--confirm", "1", "--task", "mqar", "--seed", "5", "--quiet", "--json"]


def _evolve(*argv: str, **popen: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, "-m", "dogma_evolve.evolution.cli", *argv]
    return subprocess.Popen(command, env=env, text=True, cwd=ROOT, **popen)


def _search(url: str) -> dict[str, Any]:
    proc = _evolve("run", *RUN, "--store", url, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    return dict(json.loads(out))


def stored(url: str) -> dict[str, Any]:
    """What a run stored that does not depend on the machine: its status, births, members
    and evaluations (status and the metrics that measure the model)."""
    with Store(url, readonly=True) as store:
        (run,) = store.list_runs()
        births = store.individuals(run.id)
        evaluations = {
            (e.genome_id, e.task, e.fidelity, e.seed): (e.status, _measured(e.metrics))
            for b in births
            for e in b.evaluations
        }
        members = [[m.genome_id for m in store.population(run.id, g)] for g in range(run.generations)]
        return {
            "status": (run.status, run.shown_status, run.last_generation, run.evaluated),
            "births": [(b.generation, b.slot, b.genome_id, b.operator) for b in births],
            "members": members,
            "evaluations": evaluations,
        }


def _measured(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics that measure the model, not the machine (`dogma_evolve.evolution.cli.replay.compared`)."""
    return {k: v for k, v in metrics.items() if compared(k)}


@pytest.fixture(scope="module")
def unread(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The seeded run with nobody reading it (on SQLite; both backends store the same)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('unread') / 'evolve.db'}"
    _search(url)
    return stored(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'evolve.db'}"
        return
    with scratch_database(postgres_or_skip()) as scratch:
        yield scratch


@pytest.mark.slow  # Ray and tiny trainings, twice (once for both backends)
def test_readers_polling_a_run_never_fail_and_change_nothing(
    url: str, unread: dict[str, Any], tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    readers = []
    for name, extra in (("full", ()), ("light", ("--light",))):
        folder = tmp_path / name
        folder.mkdir()
        argv = [str(folder / "log"), str(stop), str(folder), *extra]
        command = [sys.executable, "-m", "tests.store.readers", url, *argv]
        proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        readers.append((folder / "log", proc))
    try:
        result = _search(url)
    finally:
        stop.touch()
        for _, proc in readers:
            proc.communicate(timeout=300)
    calls = [json.loads(line) for log, _ in readers for line in log.read_text().splitlines()]
    judged = [c for c in calls if c["phase"] == "polling"]
    _summary(calls)
    failed = [c for c in judged if c["code"] != 0]
    assert not failed, failed[:5]
    # before the run existed the store was missing or being created: never an older one
    assert not [c for c in calls if "older than this program" in c["error"]]
    for _, proc in readers:
        assert proc.returncode == 0, proc.stderr
    # the readers read while the run wrote, and every command answered the stored run; which
    # commands fall inside the run's few seconds depends on the machine's speed (a quiet CI
    # machine finished the run before the individual commands' first round), so only `runs`
    # and at least one heavier reader are required to have answered a running run
    while_running = {" ".join(c["argv"][:1]) for c in judged if c["run"] == "running"}
    answered = {" ".join(c["argv"][:1]) for c in judged}
    assert "runs" in while_running and len(while_running) >= 2, while_running
    assert answered >= {"runs", "report", "check", "audit", "lineage", "blame", "diff"}, answered
    assert stored(url) == unread
    assert unread["status"][0] == "finished"
    assert result["run_id"] in (tmp_path / "full" / "report.html").read_text()  # the last one written


def _summary(calls: list[dict[str, Any]]) -> None:
    """What the readers did, for `pytest -s` (the numbers of the issue's note)."""
    judged = [c for c in calls if c["phase"] == "polling"]
    counts: dict[str, list[Any]] = {}
    for c in judged:
        key = " ".join(c["argv"][:2]) if c["argv"][0] == "report" else c["argv"][0]
        count = counts.setdefault(key, [0, 0, 0, 0.0])
        count[0] += 1
        count[3] += c["cpu"]
        count[1] += c["run"] == "running"
        count[2] += c["code"] != 0
    print(f"\nreader calls: {len(calls)} ({len(calls) - len(judged)} before the run existed)")
    for key, (n, running, failed, cpu) in sorted(counts.items()):
        print(f"  {key:<16} {n:>4} calls, {running:>4} while it ran, {failed} failed, {cpu:6.1f} s CPU")
    waiting = sorted({c["error"] for c in calls if c["phase"] == "waiting" and c["code"] != 0})
    print(f"  answers before the run existed: {waiting}")
