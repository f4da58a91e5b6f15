"""Runs know they are dead: the engine holds its run, readers show a run nobody drives as
`interrupted`, refused options leave no run behind, Ctrl-C stops `evolve run` cleanly.

Time is never waited for: a killed driver is a claim written with an old heartbeat.
The SIGINT test runs a real (tiny) `evolve run` with Ray in a subprocess: marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.engine import Engine
from dogma_evolve.store import ArchiveIn, GenomeIn, IndividualIn, Store, by_slot
from dogma_evolve.store.liveness import INTERRUPTED, RunHeld
from dogma_evolve.store.testing import postgres_or_skip, scratch_database
from tests.in_process import evolve_in_process as cli

CONFIG = RunConfig(population=4, generations=1, steps=3, seed=3, max_params=60_000, task="mqar")
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)  # a heartbeat this old: the driver was killed


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store on each backend (PostgreSQL: EVOLVE_TEST_POSTGRES_URL)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'evolve.db'}"
        return
    with scratch_database(postgres_or_skip()) as scratch:
        yield scratch


def test_a_killed_drivers_run_is_shown_interrupted(url: str) -> None:
    with Store(url) as store:
        killed = store.create_run(CONFIG.to_dict(), CONFIG.seed, CONFIG.task)
        store.claim_run(killed, "host:1:dead", now=LONG_AGO)  # claimed, then never beat again
        live = store.create_run(CONFIG.to_dict(), CONFIG.seed, CONFIG.task, driver="host:2:live")
        done = store.create_run(CONFIG.to_dict(), CONFIG.seed, CONFIG.task)
        store.set_run_status(done, "finished", "1 offspring generations done")
        assert store.get_run(killed).status == "running"  # stored: nobody could write otherwise
    code, out, err = cli("runs", "--json", "--store", url)
    assert code == 0, err
    shown = {r["id"]: (r["status"], r["resume"]) for r in json.loads(out)}
    assert shown == {
        killed: (INTERRUPTED, f"evolve run --resume {killed}"),
        live: ("running", None),
        done: ("finished", None),
    }
    code, out, err = cli("runs", "--store", url)  # the table says it too
    assert code == 0 and f"evolve run --resume {killed}" in out and f"--resume {live}" not in out


def test_a_second_resume_of_a_live_run_is_refused(url: str) -> None:
    with Store(url) as store:
        first = Engine(CONFIG, store, None)  # creates the run and holds it
        run_id = first.run_id
        with pytest.raises(RunHeld, match=first.liveness.driver):
            Engine.resume(run_id, store, None)
        code, _, err = cli("run", "--resume", run_id, "--quiet", "--store", url)
        assert code == 2 and err.startswith("evolve: error: ") and err.count("\n") == 1, err
        assert f"evolve run --resume {run_id} once it has stopped" in err
        assert store.get_run(run_id).driver == first.liveness.driver  # the refusals took nothing
        first.liveness.release()  # the first driver stops
        second = Engine.resume(run_id, store, None)
        assert store.get_run(run_id).driver == second.liveness.driver
        with pytest.raises(RunHeld):  # and now the first is the one refused
            first.liveness.claim()


def test_a_resume_takes_over_a_killed_drivers_run(url: str) -> None:
    with Store(url) as store:
        run_id = store.create_run(CONFIG.to_dict(), CONFIG.seed, CONFIG.task)
        store.claim_run(run_id, "host:1:dead", now=LONG_AGO)
        engine = Engine.resume(run_id, store, None)
        run = store.get_run(run_id)
        assert run.driver == engine.liveness.driver and run.shown_status == "running"


def _plant_other_space_run(store: Store) -> str:
    """A finished run whose archive holds a genome no DOGMA space can parse."""
    run_id = store.create_run({"space": "nb201"}, 0, "cifar10")
    text = "cell: '|nor_conv_3x3~0|+|skip_connect~0|none~1|+|none~0|none~1|avg_pool_3x3~2|'\n"
    genome = GenomeIn("c" * 64, text, "cell")
    store.commit_generation(
        run_id,
        0,
        genomes=[genome],
        individuals=[IndividualIn(0, genome.id, seed=1)],
        members=[by_slot(0)],
        archive=[ArchiveIn(genome.id, {"quality": 0.9})],
    )
    store.set_run_status(run_id, "finished")
    return run_id


def test_memory_from_another_space_leaves_no_run_behind(url: str) -> None:
    with Store(url) as store:
        source = _plant_other_space_run(store)
        config = RunConfig(**{**CONFIG.to_dict(), "memory_from": source})
        with pytest.raises(ValueError, match="not dogma genomes"):
            Engine(config, store, None)
        assert [r.id for r in store.list_runs()] == [source]
    args = ("--population", "4", "--generations", "1", "--steps", "3", "--task", "mqar", "--quiet")
    code, _, err = cli("run", *args, "--memory-from", source, "--store", url)
    assert code == 2 and "not dogma genomes" in err, err
    with Store(url) as store:
        assert [r.id for r in store.list_runs()] == [source]


# -- Ctrl-C of a real evolve run ------------------------------------------------------------

# one training per candidate (`--confirm 1`): what is stopped and resumed here needs no more
TINY = "--steps 3 --population 4 --workers 1 --task mqar --min-steps 0 --confirm 1".split()


def _evolve(*argv: str, **popen: object) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, "-m", "dogma_evolve.evolution.cli", *argv]
    return subprocess.Popen(command, env=env, text=True, **popen)  # type: ignore[call-overload]


def _committed(url: str) -> tuple[str, int] | None:
    """(run id, last committed generation) once the store holds a run, else None."""
    if not Path(url.removeprefix("sqlite:///")).exists():
        return None
    with Store(url) as store:
        runs = store.list_runs()
        return (runs[0].id, runs[0].last_generation) if runs else None


@pytest.mark.slow  # Ray and a few tiny trainings, twice
def test_ctrl_c_stops_evolve_run_cleanly_and_resume_finishes_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    proc = _evolve(
        "run",
        *TINY,
        "--generations",
        "50",
        "--quiet",
        "--store",
        url,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 600  # a loaded 2-core machine; not a measured duration
        while (found := _committed(url)) is None or found[1] < 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no generation was committed"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run_id = found[0]
    assert proc.returncode == 130, err
    assert f"evolve run --resume {run_id}" in err and "Traceback" not in err, err
    with Store(url) as store:
        run = store.get_run(run_id)
        assert (run.status, run.driver, run.heartbeat) == ("running", None, None)
        assert run.shown_status == INTERRUPTED
        last = run.last_generation
        assert 0 <= last < 50
        births = store.individuals(run_id)
        assert births and max(b.generation for b in births) == last  # nothing of a later one
        assert len(store.population(run_id)) == 4
    code, out, _ = cli("runs", "--json", "--store", url)
    assert code == 0 and json.loads(out)[0]["resume"] == f"evolve run --resume {run_id}"
    resumed = _evolve(
        "run",
        "--resume",
        run_id,
        "--generations",
        str(last + 1),
        "--quiet",
        "--json",
        "--store",
        url,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err
    assert json.loads(out)["last_generation"] == last + 1
    with Store(url) as store:
        run = store.get_run(run_id)
        assert (run.status, run.shown_status, run.driver) == ("finished", "finished", None)
        assert run.last_generation == last + 1
