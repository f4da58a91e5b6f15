"""Alembic migrations: a new store equals the models, an old store upgrades and resumes.

``fixtures/release_0_1.db`` was written by release 0.1 (before Alembic); every test works
on a copy of it, never on the file itself (opening a store upgrades it).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import shutil
import sqlite3
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from dogma_evolve.store import (
    EvaluationIn,
    GenomeIn,
    IndividualIn,
    LeaseIn,
    LineageIn,
    Store,
    StoreError,
    TransferIn,
    by_id,
    by_slot,
    migrations,
)
from dogma_evolve.store.migrations.__main__ import main as migrations_main
from dogma_evolve.store.models import LEGACY_SCHEMA_VERSION, Base

FIXTURE = Path(__file__).parent / "fixtures" / "release_0_1.db"
RUN_ID = "15ea3469eb87"  # the one run in the fixture: task mqar, generations 0 and 1
HEAD = "0008"


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """A copy of the release 0.1 store, as a user would have it on disk."""
    copy = tmp_path / "release_0_1.db"
    shutil.copyfile(FIXTURE, copy)
    return copy


def _schema_diff(url: str) -> list:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {name for (name,) in rows}


def test_the_revisions_are_a_line_ending_at_head() -> None:
    assert migrations.heads() == {HEAD}
    assert [s.revision for s in migrations.script().walk_revisions()] == [
        "0008",
        "0007",
        "0006",
        "0005",
        "0004",
        "0003",
        "0002",
        "0001",
    ]


def test_a_new_store_is_created_by_the_migrations_and_equals_the_models(store_url: str, helpers) -> None:
    with Store(store_url) as store:
        store.create_run({}, seed=1, task="t")
    assert _schema_diff(store_url) == []
    assert helpers.scalar(store_url, "SELECT version_num FROM alembic_version") == HEAD
    assert helpers.scalar(store_url, "SELECT version FROM schema_version") == LEGACY_SCHEMA_VERSION


def test_a_failing_migration_leaves_the_store_as_it_was(store_url: str, helpers) -> None:
    # a view where the baseline creates its last table: the upgrade fails half-way
    helpers.execute_unchecked(store_url, [("CREATE VIEW leases AS SELECT 1 AS x", {})])
    with pytest.raises(StoreError, match="leases") as caught:
        Store(store_url)
    assert "\n" not in str(caught.value)
    engine = create_engine(store_url)
    try:
        assert inspect(engine).get_table_names() == []  # runs, genomes, ... rolled back
    finally:
        engine.dispose()


def test_release_0_1_store_upgrades_and_resumes_through_the_api(old_store: Path, helpers) -> None:
    url = f"sqlite:///{old_store}"
    assert "alembic_version" not in _tables(old_store)
    before = helpers.row_counts(url)
    with Store(url) as store:
        run = store.get_run(RUN_ID)
        assert (run.status, run.task, run.last_generation, run.evaluated) == ("finished", "mqar", 1, 8)
        assert run.kind == "search"  # its config has no "kind" key: a search (revision 0006)
        members = store.population(RUN_ID)
        births = store.individuals(RUN_ID)
        assert len(members) == 4 and len(births) == 8
        assert all(m.status == "ok" and m.metrics for m in members)
        assert all(step.operator is None for step in store.ancestry(members[0].id) if not step.parents)
        assert store.policy(RUN_ID) and store.archive(RUN_ID)
        assert {lease.state for lease in store.leases(RUN_ID)} == {"done"}
        weights = [store.get_artifact(b.id, "weights") for b in births]
        assert any(w is not None for w in weights)  # sha256-checked bytes of release 0.1

        # resume: one more generation, a child of a survivor of generation 1
        parent = members[0]
        yaml_text = parent.yaml + "# resumed\n"
        child = GenomeIn(hashlib.sha256(yaml_text.encode()).hexdigest(), yaml_text, parent.sequence)
        ids = store.commit_generation(
            RUN_ID,
            2,
            genomes=[child],
            individuals=[IndividualIn(0, child.id, seed=11, operator="point", change={"op": "point"})],
            evaluations=[
                EvaluationIn(child.id, "mqar", 5, 11, "ok", {"accuracy": 0.5}, individual=by_slot(0))
            ],
            lineage=[LineageIn(0, by_id(parent.id), "point", {"op": "point"})],
            members=[by_slot(0)] + [by_id(m.id) for m in members[1:]],
        )
        store.update_leases(RUN_ID, [LeaseIn(child.id, "mqar", 5, 11, attempt=1, state="done")])
        store.set_run_status(RUN_ID, "finished")
    with Store(url) as store:  # reopened: at head already, nothing to do
        assert store.get_run(RUN_ID).last_generation == 2
        [resumed] = [m for m in store.population(RUN_ID) if m.id == ids[0]]
        assert resumed.parents == [parent.id] and resumed.metrics == {"accuracy": 0.5}
        assert store.ancestry(resumed.id)[1].individual_id == parent.id
    after = helpers.row_counts(url)
    assert after["individuals"] == before["individuals"] + 1
    assert after["evaluations"] == before["evaluations"] + 1
    assert helpers.scalar(url, "SELECT version_num FROM alembic_version") == HEAD
    # release 0.1 refuses a store whose schema_version is above its own 2
    assert helpers.scalar(url, "SELECT version FROM schema_version") == LEGACY_SCHEMA_VERSION > 2
    assert _schema_diff(url) == []


@pytest.mark.slow
def test_release_0_1_store_resumes_through_the_cli(old_store: Path) -> None:
    url = f"sqlite:///{old_store}"
    with sqlite3.connect(old_store) as connection:
        earlier = connection.execute("SELECT id, genome_id FROM individuals ORDER BY id").fetchall()
    command = [
        sys.executable,
        "-m",
        "dogma_evolve.evolution.cli.main",
        "run",
        "--resume",
        RUN_ID,
        "--generations",
        "2",
    ]
    command += ["--workers", "1", "--quiet", "--json", "--store", url]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["run_id"] == RUN_ID
    with Store(url) as store:
        run = store.get_run(RUN_ID)
        assert (run.status, run.last_generation) == ("finished", 2)
        births = store.individuals(RUN_ID)
    assert [(b.id, b.genome_id) for b in births if b.generation <= 1] == earlier
    assert any(b.generation == 2 for b in births)


def test_a_store_older_than_the_version_table_is_adopted(old_store: Path, helpers) -> None:
    """Stores written before schema_version 2 had no leases and no schema_version table."""
    with sqlite3.connect(old_store) as connection:
        connection.execute("DROP TABLE leases")
        connection.execute("DROP TABLE schema_version")
    url = f"sqlite:///{old_store}"
    with Store(url) as store:
        assert store.get_run(RUN_ID).last_generation == 1
        assert store.leases(RUN_ID) == []
        store.update_leases(RUN_ID, [LeaseIn("ab" * 32, "mqar", 5, 1, attempt=1, state="running")])
        assert len(store.leases(RUN_ID, "running")) == 1
    assert helpers.scalar(url, "SELECT version FROM schema_version") == LEGACY_SCHEMA_VERSION
    assert _schema_diff(url) == []


def _open_old(url: str, barrier, results) -> None:
    try:
        barrier.wait(timeout=60)
        with Store(url) as store:
            results.put(store.get_run(RUN_ID).last_generation)
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put(traceback.format_exc())


def test_processes_opening_an_old_store_at_once_upgrade_it_once(old_store: Path, helpers) -> None:
    url = f"sqlite:///{old_store}"
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(4), context.Queue()
    processes = [context.Process(target=_open_old, args=(url, barrier, results)) for _ in range(4)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    assert outcomes == [1, 1, 1, 1]
    assert helpers.row_counts(url, ("alembic_version", "schema_version", "individuals")) == {
        "alembic_version": 1,
        "schema_version": 1,
        "individuals": 8,
    }


def test_opening_a_store_at_head_takes_no_write_lock(db_path: Path) -> None:
    url = f"sqlite:///{db_path}"
    with Store(url) as store:
        run_id = store.create_run({}, seed=1, task="t")
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a driver in the middle of a commit
    try:
        with Store(url, busy_timeout=0.1) as store:
            assert store.get_run(run_id).status == "running"
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_the_command_line_downgrades_and_upgrades_a_store(db_path: Path, capsys) -> None:
    url = f"sqlite:///{db_path}"
    Store(url).close()
    assert migrations_main(["--url", url, "downgrade", "0001"]) == 0
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT version FROM schema_version").fetchall() == [(2,)]
    assert migrations_main(["--url", url, "downgrade", "base"]) == 0
    assert _tables(db_path) == {"alembic_version"}
    assert migrations_main(["--url", url, "upgrade", "head"]) == 0
    assert migrations_main(["--url", url, "current"]) == 0
    assert HEAD in capsys.readouterr().out
    assert _schema_diff(url) == []
    assert migrations_main(["heads"]) == 0  # no store needed to list the revisions
    assert migrations_main(["--url", url, "downgrade", "nope"]) == 1


def test_a_release_0_1_store_gains_the_stop_reason_and_keeps_its_runs(tmp_path: Path) -> None:
    copy = tmp_path / "old.db"
    shutil.copy(FIXTURE, copy)
    with Store(f"sqlite:///{copy}") as store:
        (run,) = store.list_runs()
        assert run.stop_reason is None  # the column is new: old runs have none
        store.set_run_status(run.id, "finished", reason="evaluation budget spent")
        assert store.get_run(run.id).stop_reason == "evaluation budget spent"


# -- runs.kind (revision 0006): backfilled from the config key of older stores ----------------

#: Runs as programs before revision 0006 wrote them: the kind, if any, in the config.
KEYED_RUNS = {
    "0123456789ab": ({"kind": "scale", "ladder": {"genome_id": "ab" * 32}}, "scale"),
    "123456789abc": ({"kind": "ablate", "individual": 3, "ablation": {"seeds": 2}}, "ablate"),
    "23456789abcd": ({"strategy": "random", "rungs": [{"kind": "scale"}]}, "search"),  # nested: no kind
}


def _plant_keyed_runs(url: str, helpers) -> None:
    insert = (
        "INSERT INTO runs (id, created, status, config, seed, task, last_generation) "
        "VALUES (:id, :created, 'finished', :config, 0, 'mqar', -1)"
    )
    helpers.execute_unchecked(
        url,
        [
            (insert, {"id": run_id, "created": f"2027-01-0{n + 1} 00:00:00", "config": json.dumps(config)})
            for n, (run_id, (config, _)) in enumerate(KEYED_RUNS.items())
        ],
    )


def test_a_release_0_1_store_gains_the_run_kind_from_the_config_key(old_store: Path, helpers) -> None:
    url = f"sqlite:///{old_store}"
    _plant_keyed_runs(url, helpers)  # into the 0.1 schema, before any migration ran
    with Store(url) as store:
        kinds = {run.id: run.kind for run in store.list_runs()}
        assert kinds == {RUN_ID: "search"} | {run_id: kind for run_id, (_, kind) in KEYED_RUNS.items()}
        assert [run.id for run in store.list_runs("search")] == [RUN_ID, "23456789abcd"]
        assert store.get_run("0123456789ab").config == KEYED_RUNS["0123456789ab"][0]  # key kept
    assert _schema_diff(url) == []


def test_the_run_kind_is_backfilled_on_each_backend_and_survives_a_downgrade(store_url: str, helpers) -> None:
    assert migrations_main(["--url", store_url, "upgrade", "0005"]) == 0
    _plant_keyed_runs(store_url, helpers)
    with Store(store_url) as store:  # upgrades 0005 -> 0006
        assert {run.id: run.kind for run in store.list_runs()} == {
            run_id: kind for run_id, (_, kind) in KEYED_RUNS.items()
        }
        newer = store.create_run({"steps": 5}, seed=1, task="mqar", kind="ablate")  # no config key
    assert migrations_main(["--url", store_url, "downgrade", "0005"]) == 0
    # revision 0005's programs read the kind from the config: the downgrade wrote it there
    text = helpers.scalar(store_url, f"SELECT config FROM runs WHERE id = '{newer}'")
    assert json.loads(text) == {"kind": "ablate", "steps": 5}
    with Store(store_url) as store:
        assert store.get_run(newer).kind == "ablate"
        assert store.get_run("0123456789ab").config == KEYED_RUNS["0123456789ab"][0]  # unchanged
        assert [run.id for run in store.list_runs("scale")] == ["0123456789ab"]
    assert _schema_diff(store_url) == []


def test_transfer_rows_gain_ranked_by_quality_and_a_downgrade_keeps_only_those(
    store_url: str, helpers
) -> None:
    assert migrations_main(["--url", store_url, "upgrade", "0007"]) == 0
    helpers.execute_unchecked(
        store_url,
        [
            (
                "INSERT INTO runs (id, created, status, config, seed, task, last_generation, kind) "
                "VALUES ('0123456789ab', '2027-01-01 00:00:00', 'finished', '{}', 0, 'mqar', 1, 'search')",
                {},
            ),
            (
                "INSERT INTO transfer (run_id, generation, lower_fidelity, higher_fidelity, n, spearman) "
                "VALUES ('0123456789ab', 0, '3', '5', 6, 0.5)",
                {},
            ),
        ],
    )
    with Store(store_url) as store:  # upgrades 0007 -> 0008: the old row was ranked by quality
        (old,) = store.transfer("0123456789ab")
        assert (old.generation, old.n, old.spearman, old.ranked_by) == (0, 6, 0.5, "quality")
        store.commit_generation(
            "0123456789ab", 2, members=[], transfer=[TransferIn(3, 5, 8, 0.7, ranked_by="loss")]
        )
        assert [t.ranked_by for t in store.transfer("0123456789ab")] == ["quality", "loss"]
        with pytest.raises(StoreError, match="ranked_by must be one of"):
            store.commit_generation(
                "0123456789ab", 3, members=[], transfer=[TransferIn(3, 5, 8, ranked_by="x")]
            )
    assert _schema_diff(store_url) == []
    # revision 0007's programs would read a loss row as quality: the downgrade removes it
    assert migrations_main(["--url", store_url, "downgrade", "0007"]) == 0
    assert helpers.scalar(store_url, "SELECT COUNT(*) FROM transfer") == 1
    assert helpers.scalar(store_url, "SELECT spearman FROM transfer") == 0.5
