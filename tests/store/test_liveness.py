"""Runs know who drives them (revision 0007, `store.liveness`): claim, beat, release, the
commit's fence, the shown status, and the migration on an old store.

Time is driven through the ``now`` the store methods take, never waited for; every test on
``store`` / ``store_url`` runs on SQLite and on PostgreSQL (``EVOLVE_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dogma_evolve.store import IndividualIn, Store, StoreError, by_slot
from dogma_evolve.store.liveness import (
    BEAT_EVERY_S,
    INTERRUPTED,
    STALE_AFTER_S,
    Heartbeat,
    RunHeld,
    RunLost,
    driver_token,
    shown_status,
)
from dogma_evolve.store.migrations.__main__ import main as migrations_main

FIXTURE = Path(__file__).parent / "fixtures" / "release_0_1.db"
OLD_RUN = "15ea3469eb87"  # the fixture's one run (finished)
T0 = datetime(2020, 1, 1, tzinfo=UTC)  # the past: a real clock reads these as stale


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_constants_beat_well_inside_the_stale_limit() -> None:
    assert 0 < BEAT_EVERY_S * 3 <= STALE_AFTER_S


def test_a_created_run_is_held_by_its_driver_and_released(store: Store) -> None:
    token = driver_token()
    run_id = store.create_run({}, seed=1, task="t", driver=token)
    run = store.get_run(run_id)
    assert run.driver == token and run.heartbeat is not None and run.shown_status == "running"
    assert store.release_run(run_id, token)
    run = store.get_run(run_id)
    assert (run.driver, run.heartbeat, run.status) == (None, None, "running")
    assert run.shown_status == INTERRUPTED  # stored running, nobody drives it
    assert not store.release_run(run_id, token)  # nothing left to release


def test_a_live_driver_is_refused_and_a_stale_one_taken_over(store: Store) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    assert store.claim_run(run_id, "a:1:x", stale_after_s=5, now=at(0)) is None
    with pytest.raises(RunHeld) as refused:
        store.claim_run(run_id, "b:2:y", stale_after_s=5, now=at(4))
    message = str(refused.value)
    assert "a:1:x" in message and "4 s ago" in message and "\n" not in message
    assert isinstance(refused.value, StoreError) and refused.value.driver == "a:1:x"
    assert store.get_run(run_id).driver == "a:1:x"  # the refusal changed nothing
    assert store.claim_run(run_id, "a:1:x", stale_after_s=5, now=at(4)) is None  # same token
    assert store.beat(run_id, "a:1:x", now=at(8))
    with pytest.raises(RunHeld):  # the beat at 8 keeps it alive at 12
        store.claim_run(run_id, "b:2:y", stale_after_s=5, now=at(12))
    assert store.claim_run(run_id, "b:2:y", stale_after_s=5, now=at(14)) == "a:1:x"  # taken over
    run = store.get_run(run_id)
    assert run.driver == "b:2:y" and run.heartbeat == at(14)
    assert not store.beat(run_id, "a:1:x", now=at(15))  # the old driver learns it lost the run
    assert not store.release_run(run_id, "a:1:x")  # and cannot release the new driver's claim
    assert store.get_run(run_id).heartbeat == at(14)


def test_claims_of_unknown_runs_and_bad_tokens_are_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="no run"):
        store.claim_run("nosuchrun", "a:1:x")
    run_id = store.create_run({}, seed=1, task="t")
    for bad in ("", "x" * 256):
        with pytest.raises(StoreError, match="driver token"):
            store.claim_run(run_id, bad)
    with pytest.raises(StoreError, match="driver token"):
        store.create_run({}, seed=1, task="t", driver="")


def test_the_shown_status(store: Store) -> None:
    assert shown_status("running", None) == INTERRUPTED  # no heartbeat: a store before 0007
    assert shown_status("running", at(0), now=at(60), stale_after_s=60) == "running"
    assert shown_status("running", at(0), now=at(61), stale_after_s=60) == INTERRUPTED
    assert shown_status("running", at(10), now=at(0), stale_after_s=60) == "running"  # clock ahead
    for stopped in ("finished", "failed"):
        assert shown_status(stopped, None) == stopped
    run_id = store.create_run({}, seed=1, task="t")
    store.claim_run(run_id, "a:1:x", now=at(0))  # long ago: the driver was killed
    run = store.get_run(run_id)
    assert run.status == "running" and run.shown_status == INTERRUPTED
    store.set_run_status(run_id, "finished")
    assert store.get_run(run_id).shown_status == "finished"


def test_a_driver_that_lost_its_run_cannot_commit(store: Store, helpers) -> None:
    genome = helpers.make_genome("a")
    run_id = store.create_run({}, seed=1, task="t")
    store.claim_run(run_id, "a:1:x", stale_after_s=5, now=at(0))
    store.claim_run(run_id, "b:2:y", stale_after_s=5, now=at(10))  # a was silent: taken over
    births = {"genomes": [genome], "individuals": [IndividualIn(0, genome.id, seed=1)]}
    with pytest.raises(RunLost, match="b:2:y"):
        store.commit_generation(run_id, 0, members=[by_slot(0)], driver="a:1:x", **births)
    assert store.get_run(run_id).last_generation == -1  # nothing of it was written
    store.commit_generation(run_id, 0, members=[by_slot(0)], driver="b:2:y", **births)
    assert store.get_run(run_id).last_generation == 0


def test_the_heartbeat_claims_beats_from_a_thread_and_releases(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    beats = threading.Semaphore(0)
    real = store.beat

    def counted(run: str, driver: str) -> bool:
        held = real(run, driver)
        beats.release()
        return held

    monkeypatch.setattr(store, "beat", counted)
    holder = Heartbeat(store, run_id, "a:1:x", every_s=0.01)
    with holder:
        claimed = store.get_run(run_id).heartbeat
        with holder:  # re-entered: the same claim, one thread
            assert beats.acquire(timeout=60) and beats.acquire(timeout=60)  # two beats came
        run = store.get_run(run_id)
        assert run.driver == "a:1:x" and run.heartbeat >= claimed  # the inner exit keeps it
        with pytest.raises(RunHeld):
            Heartbeat(store, run_id, "b:2:y").claim()
    run = store.get_run(run_id)
    assert (run.driver, run.heartbeat, holder.lost, holder._thread) == (None, None, None, None)


def test_a_heartbeat_that_finds_its_run_taken_over_says_so(store: Store) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    holder = Heartbeat(store, run_id, "a:1:x", every_s=0.01, stale_after_s=5)
    with holder:
        later = datetime.now(UTC) + timedelta(days=1)  # a silent for a day
        store.claim_run(run_id, "b:2:y", stale_after_s=5, now=later)  # taken over
        assert holder._thread is not None
        holder._thread.join(timeout=60)  # the loop ends at its first beat after the takeover
        assert holder.lost is not None and "a:1:x" in holder.lost
    assert store.get_run(run_id).driver == "b:2:y"  # a's exit leaves b's claim alone


def test_a_refused_claim_in_a_with_block_starts_no_thread(store: Store) -> None:
    run_id = store.create_run({}, seed=1, task="t", driver="a:1:x")
    holder = Heartbeat(store, run_id, "b:2:y")
    with pytest.raises(RunHeld):
        with holder:
            pass
    assert holder._thread is None and store.get_run(run_id).driver == "a:1:x"


def test_an_old_store_upgrades_to_runs_with_no_driver_and_downgrades(tmp_path: Path, helpers) -> None:
    copy = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, copy)
    url = f"sqlite:///{copy}"
    with Store(url) as store:  # upgrades release 0.1 -> 0007
        run = store.get_run(OLD_RUN)
        assert (run.driver, run.heartbeat, run.shown_status) == (None, None, "finished")
        store.set_run_status(OLD_RUN, "running")  # as a driver of release 0.1 killed mid-run
        assert store.get_run(OLD_RUN).shown_status == INTERRUPTED
        store.claim_run(OLD_RUN, "a:1:x")
        assert store.get_run(OLD_RUN).shown_status == "running"
    assert migrations_main(["--url", url, "downgrade", "0006"]) == 0
    columns = {row[1] for row in _pragma_columns(copy)}
    assert "heartbeat" not in columns and "driver" not in columns and "kind" in columns
    assert migrations_main(["--url", url, "upgrade", "head"]) == 0
    with Store(url) as store:
        assert store.get_run(OLD_RUN).driver is None  # the downgrade dropped who held it


def test_a_downgrade_drops_the_claim_on_each_backend(store_url: str) -> None:
    with Store(store_url) as store:
        run_id = store.create_run({}, seed=1, task="t", driver="a:1:x")
    assert migrations_main(["--url", store_url, "downgrade", "0006"]) == 0
    with Store(store_url) as store:  # upgrades 0006 -> 0007 again
        run = store.get_run(run_id)
        assert (run.driver, run.heartbeat, run.shown_status) == (None, None, INTERRUPTED)


def _pragma_columns(path: Path) -> list[tuple]:
    import sqlite3

    with sqlite3.connect(path) as connection:
        return list(connection.execute("PRAGMA table_info(runs)"))


def test_a_driver_killed_on_this_host_is_taken_over_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL leaves a fresh heartbeat; a driver process of this host that is gone is known
    dead without waiting for the stale limit (crash-exact resume right after a kill -9)."""
    import socket
    import subprocess
    import sys

    from dogma_evolve.store import Store
    from dogma_evolve.store.liveness import RunHeld, driver_token, gone_here

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid now names no process (reuse within this test is not a concern)
    dead = f"{socket.gethostname()[:160] or 'host'}:{child.pid}:deadbeef"
    assert gone_here(dead) and not gone_here(driver_token()) and not gone_here("elsewhere:1:ab")
    with Store(f"sqlite:///{tmp_path / 'kill.db'}") as store:
        run_id = store.create_run({}, seed=0, task="mqar", driver=dead)
        assert store.get_run(run_id).shown_status == "interrupted"  # type: ignore[union-attr]
        assert store.claim_run(run_id, driver_token()) == dead  # taken over, no stale wait
        other = store.create_run({}, seed=0, task="mqar", driver="elsewhere:1:ab")
        try:
            store.claim_run(other, driver_token())
        except RunHeld:
            pass
        else:
            raise AssertionError("a fresh driver of another host must hold its run")
