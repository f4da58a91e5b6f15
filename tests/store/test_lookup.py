"""Run-id prefixes, bulk look-ups by id, and opening a store to read without creating one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dogma_evolve.store import IndividualIn, Store, StoreError
from dogma_evolve.store.testing import postgres_or_skip, scratch_database


def _runs(store: Store, ids: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs with these ids (a run's id is the first 12 hex digits of a uuid4)."""
    import dogma_evolve.store.store as module

    for ident in ids:
        monkeypatch.setattr(module.uuid, "uuid4", lambda ident=ident: type("U", (), {"hex": ident})())
        assert store.create_run({}, 0, "mqar") == ident


def test_resolve_run_by_unique_prefix(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    _runs(store, ["abc123000000", "abc456000000", "a_c%00000000"], monkeypatch)
    assert store.resolve_run("abc1") == "abc123000000"
    assert store.resolve_run(" abc456000000 ") == "abc456000000"
    with pytest.raises(StoreError, match="ambiguous: 2 runs"):
        store.resolve_run("abc")
    with pytest.raises(StoreError, match="no run 'abd'"):
        store.resolve_run("abd")
    with pytest.raises(StoreError, match="must not be empty"):
        store.resolve_run("  ")
    assert store.resolve_run("a_c%") == "a_c%00000000"  # wildcards are taken literally
    with pytest.raises(StoreError, match="no run"):
        store.resolve_run("%")


def test_individuals_by_id_in_bulk(store: Store, helpers) -> None:
    run = store.create_run({}, 0, "mqar")
    genomes = [helpers.make_genome(f"g{k}") for k in range(3)]
    ids = store.commit_generation(
        run, 0, genomes=genomes, individuals=[IndividualIn(k, g.id, k) for k, g in enumerate(genomes)]
    )
    wanted = [ids[2], ids[0], ids[2], 10**6]
    found = store.individuals_by_id(wanted)
    assert [r.id for r in found] == sorted({ids[0], ids[2]})
    assert [r.yaml for r in found] == [genomes[0].yaml, genomes[2].yaml]


def test_a_reader_refuses_a_missing_or_empty_sqlite_file(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    with pytest.raises(StoreError, match="no store at .*does not exist"):
        Store(f"sqlite:///{missing}", create=False)
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match="is empty"):
        Store(f"sqlite:///{empty}", create=False)
    assert empty.stat().st_size == 0


def test_a_reader_refuses_a_database_that_is_not_a_store(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(StoreError, match="holds no evolve store"):
        Store(f"sqlite:///{other}", create=False)
    with sqlite3.connect(other) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"notes"}
    with pytest.raises(StoreError, match="holds no evolve store"):
        Store("sqlite://", create=False)  # in memory: always new, never a store to read


def test_a_reader_opens_an_existing_store_on_either_backend(store_url: str) -> None:
    with Store(store_url) as writer:
        run = writer.create_run({}, 0, "mqar")
    with Store(store_url, create=False) as reader:
        assert reader.resolve_run(run[:6]) == run


def test_a_reader_refuses_an_empty_postgres_database_and_creates_nothing() -> None:
    from sqlalchemy import create_engine, inspect

    with scratch_database(postgres_or_skip()) as url:
        with pytest.raises(StoreError, match="holds no evolve store"):
            Store(url, create=False)
        engine = create_engine(url)
        try:
            with engine.connect() as connection:
                assert inspect(connection).get_table_names() == []
        finally:
            engine.dispose()


def test_a_postgres_database_that_does_not_exist_is_one_line() -> None:
    from sqlalchemy.engine import make_url

    url = make_url(postgres_or_skip()).set(database="evolve_no_such_database")
    with pytest.raises(StoreError) as refused:
        Store(url.render_as_string(hide_password=False), create=False)
    message = str(refused.value)
    assert "\n" not in message and "evolve_no_such_database" in message
