"""SQLite behaviour: WAL, busy timeout, BEGIN IMMEDIATE, readers, damaged files."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event, text

from dogma_evolve.store import IndividualIn, Store, StoreError, by_slot


@pytest.fixture
def store_url(db_path: Path) -> str:
    """This module is about SQLite itself: its tests run on a SQLite file only."""
    return f"sqlite:///{db_path}"


def _commit_one(store: Store, helpers, run_id: str, generation: int) -> dict[int, int]:
    genome = helpers.make_genome(f"{run_id}-{generation}")
    return store.commit_generation(
        run_id,
        generation,
        genomes=[genome],
        individuals=[IndividualIn(0, genome.id, generation)],
        members=[by_slot(0)],
    )


def test_pragmas_are_set(store: Store, db_path: Path) -> None:
    engines = store._engines
    for engine in (engines.write, engines.read):
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
    with engines.read.connect() as connection:
        assert connection.execute(text("PRAGMA query_only")).scalar() == 1
    # WAL is a property of the file: a plain connection sees it too
    plain = sqlite3.connect(db_path)
    assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    plain.close()


def test_writes_begin_immediate_and_reads_do_not(store: Store, helpers) -> None:
    seen: dict[str, list[str]] = {"write": [], "read": []}

    def recorder(kind: str):
        def record(conn, cursor, statement, parameters, context, executemany) -> None:
            if statement.startswith(("BEGIN", "INSERT", "UPDATE", "DELETE")):
                seen[kind].append(statement.split(" (")[0].split(" INTO ")[0])

        return record

    event.listen(store._engines.write, "before_cursor_execute", recorder("write"))
    event.listen(store._engines.read, "before_cursor_execute", recorder("read"))
    run_id = store.create_run({}, seed=1, task="t")
    _commit_one(store, helpers, run_id, 0)
    store.population(run_id)
    store.list_runs()
    assert seen["write"][0] == "BEGIN IMMEDIATE"
    assert seen["write"].count("BEGIN IMMEDIATE") == 2
    assert seen["read"] == ["BEGIN", "BEGIN"]


def test_readers_are_not_blocked_by_a_writer(store: Store, helpers, db_path: Path) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    ids = _commit_one(store, helpers, run_id, 0)
    writer = sqlite3.connect(db_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE runs SET status = 'failed'")
    try:
        # the write lock is held by another connection; reads still answer at once
        assert [i.id for i in store.population(run_id)] == [ids[0]]
        assert store.get_run(run_id).status == "running"
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_writer_waits_for_the_lock_instead_of_failing(store: Store, helpers, db_path) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")

    def release() -> None:
        time.sleep(0.5)
        holder.execute("COMMIT")

    thread = threading.Thread(target=release)
    thread.start()
    started = time.monotonic()
    _commit_one(store, helpers, run_id, 0)
    waited = time.monotonic() - started
    thread.join()
    holder.close()
    assert waited >= 0.4  # it queued behind the lock and then committed
    assert store.get_run(run_id).last_generation == 0


def test_lock_held_past_the_timeout_is_a_store_error(db_path: Path, helpers) -> None:
    # retry_seconds=0: no riding out (test_outage.py retries past the busy timeout)
    with Store(f"sqlite:///{db_path}", busy_timeout=0.1, retry_seconds=0) as store:
        run_id = store.create_run({}, seed=1, task="t")
        holder = sqlite3.connect(db_path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError, match="locked"):
                _commit_one(store, helpers, run_id, 0)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert store.get_run(run_id).last_generation == -1


def _damaged_files(tmp_path: Path, helpers) -> dict[str, Path]:
    good = tmp_path / "good.db"
    with Store(f"sqlite:///{good}") as store:
        run_id = store.create_run({"blob": "x" * 20_000}, seed=1, task="t")
        for generation in range(3):
            _commit_one(store, helpers, run_id, generation)
    content = good.read_bytes()
    page_size = int.from_bytes(content[16:18], "big")
    assert len(content) >= 4 * page_size  # big enough to cut whole pages off

    files = {
        "junk": b"this is not a database\n" * 100,
        "short": content[:50],
        "cut mid-page": content[: len(content) // 2 + 123],
        "cut at a page": content[: len(content) - 2 * page_size],
        "header then junk": content[:100] + b"\xab" * (page_size - 100),
        # a consistent one-page header over junk: only SQLite itself can tell
        "one page of junk": content[:28]
        + (1).to_bytes(4, "big")
        + content[32:100]
        + b"\xab" * (page_size - 100),
    }
    paths = {}
    for name, data in files.items():
        path = tmp_path / (name.replace(" ", "_") + ".db")
        path.write_bytes(data)
        paths[name] = path
    return paths


def test_damaged_file_is_refused_and_left_untouched(tmp_path: Path, helpers) -> None:
    for name, path in _damaged_files(tmp_path, helpers).items():
        before = path.read_bytes()
        with pytest.raises(StoreError) as caught:
            Store(f"sqlite:///{path}")
        message = str(caught.value)
        assert "\n" not in message and str(path) in message, name
        assert path.read_bytes() == before, name
        assert not Path(f"{path}-wal").exists(), name


def test_missing_folder_and_in_memory(tmp_path: Path, helpers) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store(f"sqlite:///{tmp_path}/missing/evolve.db")
    with Store("sqlite://") as store:
        run_id = store.create_run({"a": 1}, seed=1, task="t")
        _commit_one(store, helpers, run_id, 0)
        assert store.get_run(run_id).generations == 1
    with pytest.raises(StoreError, match="closed"):
        store.list_runs()
