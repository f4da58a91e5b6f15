"""The driver killed with SIGKILL at random points and resumed until the run ends; replay of a
stored individual; `evolve audit` reading while a run writes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dogma_evolve.store.testing import execute_unchecked

pytestmark = pytest.mark.slow

RUN_ARGS = [
    "--population",
    "4",
    "--generations",
    "2",
    "--steps",
    "5",
    "--seed",
    "11",
    "--workers",
    "2",
    "--quiet",
]
POPULATION = (
    "SELECT i.genome_id FROM members m JOIN individuals i ON i.id = m.individual_id "
    "WHERE m.generation = 2 ORDER BY m.rank"
)


def evolve(*args: str, store: Path, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "dogma_evolve.evolution.cli.main", *args, "--store", f"sqlite:///{store}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def rows(store: Path, sql: str) -> list[tuple]:
    if not store.exists():
        return []
    try:
        with sqlite3.connect(store, timeout=30) as db:
            return db.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []  # tables not created yet


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict]:
    store = tmp_path_factory.mktemp("reference") / "evolve.db"
    return store, json.loads(evolve("run", *RUN_ARGS, "--json", store=store).stdout)


def test_replay_matches_bit_for_bit_and_notices_a_change(reference, tmp_path):
    store, result = reference
    best = str(result["best"]["id"])
    report = json.loads(evolve("replay", best, "--json", store=store).stdout)
    assert report["match"] is True, report
    assert report["metrics"]["loss"]["equal"] and report["metrics"]["accuracy"]["equal"]
    # a stored metric altered by one ulp is noticed: exit 1, the key marked unequal
    copy = tmp_path / "altered.db"
    copy.write_bytes(store.read_bytes())
    [(evaluation_id, metrics)] = rows(  # the row replay compares: the newest (a confirmed best has 3)
        copy,
        f"SELECT id, metrics FROM evaluations WHERE individual_id = {int(best)} "
        f"AND seed = {int(report['seed'])} ORDER BY id DESC LIMIT 1",
    )
    altered = json.loads(metrics)
    altered["loss"] = float.fromhex(float(altered["loss"]).hex()) * (1 + 2**-52)
    execute_unchecked(
        f"sqlite:///{copy}",
        [
            (
                "UPDATE evaluations SET metrics = :m WHERE id = :i",
                {"m": json.dumps(altered), "i": evaluation_id},
            )
        ],
    )
    proc = evolve("replay", best, "--json", store=copy, check=False)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["metrics"]["loss"]["equal"] is False


def audit_while_running(proc: subprocess.Popen, store: Path) -> bool:
    """`evolve audit` of the run's first individual, once a generation is committed: True
    when it answered correctly beside the live driver `proc`. The driver's process group is
    held (SIGSTOP) while the reader runs, so the reader meets a driver mid-run however slow
    the machine is, not one that finished while the reader imported its modules."""
    committed = rows(store, "SELECT last_generation FROM runs")
    if not committed or committed[0][0] < 0 or proc.poll() is not None:
        return False
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        if proc.poll() is not None:
            return False
        first = rows(store, "SELECT min(id) FROM individuals")[0][0]
        audit = evolve("audit", str(first), "--json", store=store)
        assert json.loads(audit.stdout)["id"] == first
        return proc.poll() is None
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group may be gone if it exited
            os.killpg(proc.pid, signal.SIGCONT)


#: Driver kills before the last resume: two make it repeated (each costs a driver's start-up:
#: torch, Ray and its workers), the second a kill of a resumed driver.
KILLS = 2


def attempts(store: Path) -> int:
    """Training attempts the store's drivers have started: one `leases` row each (a driver
    inserts its own rows, numbered after those of the drivers before it)."""
    found = rows(store, "SELECT count(*) FROM leases")
    return found[0][0] if found else 0


def test_repeated_sigkill_and_resume_loses_and_doubles_nothing(reference, tmp_path, tally):
    reference_store, reference_result = reference
    store = tmp_path / "killed.db"
    rng = random.Random(20240611)
    run_id, kills, audits, highest = None, 0, 0, -1

    def driver(*args: str) -> subprocess.Popen:
        cmd = [
            sys.executable,
            "-m",
            "dogma_evolve.evolution.cli.main",
            *args,
            "--json",
            "--quiet",
            "--store",
            f"sqlite:///{store}",
        ]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    while kills < KILLS:
        proc = driver(*(["run", "--resume", run_id] if run_id else ["run", *RUN_ARGS]))
        # A random point of the driver's work, not of its start-up (importing torch, starting
        # Ray): once it has started a random number of training attempts of its own, a random
        # delay more, so the kill lands mid-evaluation, mid-commit or between generations
        # however slow the machine is. The bound is for a hung driver, not a measured time.
        before, wanted, lag = attempts(store), rng.randint(1, 6), rng.uniform(0.0, 1.5)
        strike, deadline = None, time.monotonic() + 600
        try:
            while proc.poll() is None and (strike is None or time.monotonic() < strike):
                started = attempts(store) - before
                assert time.monotonic() < deadline, f"the driver started {started} of {wanted} attempts"
                # a reader during the run: answers, and the run goes on undisturbed
                if audits == 0 and audit_while_running(proc, store):
                    audits += 1
                if strike is None and started >= wanted:
                    strike = time.monotonic() + lag
                time.sleep(0.2)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        if proc.poll() is not None:
            break  # finished before the kill
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        committed = rows(store, "SELECT id, last_generation FROM runs")
        if committed:
            run_id, generation = committed[0]
            assert generation >= highest  # the generation counter never goes back
            highest = generation
    if run_id is None:
        pytest.fail("no run was created before the kills")
    proc = driver("run", "--resume", run_id)  # to the end, read while it runs
    while proc.poll() is None:
        if audits == 0 and audit_while_running(proc, store):
            audits += 1
        time.sleep(0.2)
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads(stdout)
    doubled = rows(
        store,
        "SELECT genome_id, task, fidelity, seed, count(*) FROM evaluations "
        "GROUP BY genome_id, task, fidelity, seed HAVING count(*) > 1",
    )
    births = rows(store, "SELECT generation, count(*) FROM individuals GROUP BY generation")
    same = rows(store, POPULATION) == rows(reference_store, POPULATION)
    lost = len(doubled) + (not same) + (rows(store, "SELECT status FROM runs") != [("finished",)])
    tally.add("driver SIGKILL at a random point + resume", injected=kills, lost=lost)
    assert doubled == []
    assert [g for g, _ in births] == [0, 1, 2]
    assert same and result["best"]["genome_id"] == reference_result["best"]["genome_id"]
    assert rows(store, "SELECT status, last_generation FROM runs") == [("finished", 2)]
    assert kills >= 1
    assert audits == 1, "no audit answered while a driver was running"
