"""``--plugin MODULE`` beyond `evolve run`: the commands that build genomes from a file or a
preset (`genome validate`, `genome show`, `scale`, `calibrate`) import a user's block kinds
first, name them on stderr, send them to their workers and record them in their run; without
``--plugin`` a genome holding such a kind is refused in one line that names ``--plugin``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.evaluation.protocol import OnResult
from dogma_evolve.evolution.cli import calibrate as calibrate_cli
from dogma_evolve.evolution.cli import scale as scale_cli
from dogma_evolve.store import Store
from tests.evolution.cli.test_user_task import USER_ENV, evolve_in_one_process
from tests.evolution.scale.test_train import LawPool
from tests.evolution.stopping_pools import StoppingPool
from tests.in_process import evolve_in_process as evolve
from tests.phenotype.plugin_helpers import EXAMPLES, loaded_plugin

EVOLVE = str(Path(sys.executable).with_name("evolve"))
GENOME = """\
dogma: 1
regions:
- {id: s0, type: structural, settings: {d_model: 16, vocab: 61, max_len: 64, positions: rope}}
- {id: p1, type: promoter, settings: {copies: 1}}
- id: c1
  type: coding
  bases:
  - {base: T, kind: gated_deltanet, params: {heads: 2}}
  - {base: A, kind: swiglu}
"""


def evolve_process(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`evolve ARGS` in its own process, run in ``work`` (the plugin found there)."""
    return subprocess.run(
        [EVOLVE, *args], cwd=work, env=USER_ENV, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def work(tmp_path: Path) -> Path:
    shutil.copyfile(EXAMPLES / "gated_deltanet.py", tmp_path / "gated_deltanet.py")
    (tmp_path / "gdn.yaml").write_text(GENOME)
    return tmp_path


def test_genome_validate_and_show_take_plugin_and_name_it_when_missing(work):
    # the commands in turn in one process (the plugin loaded from the third on), each through
    # `evolve`'s main with its output captured at the file descriptors
    *refusals, valid, shown, missing = evolve_in_one_process(
        work,
        [
            ["genome", "validate", "gdn.yaml"],
            ["genome", "show", "gdn.yaml"],
            ["genome", "validate", "gdn.yaml", "--plugin", "gated_deltanet", "--json"],
            ["genome", "show", "gdn.yaml", "--plugin", "gated_deltanet", "--json"],
            ["genome", "validate", "gdn.yaml", "--plugin", "not_a_module_here"],
        ],
    )
    for refused in refusals:
        assert refused.returncode == 2, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith("evolve: error: gdn.yaml: ") and "unknown kind 'gated_deltanet'" in line
        assert "--plugin MODULE" in line, line

    assert valid.returncode == 0, valid.stderr
    [said] = valid.stderr.strip().splitlines()
    assert said.startswith("evolve: plugin gated_deltanet#") and (
        f"imported module gated_deltanet from {work / 'gated_deltanet.py'}" in said
    )
    genome_id = json.loads(valid.stdout)["genome_id"]

    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["genome_id"] == genome_id and data["params"] > 0 and data["state_bytes_fixed"] > 0
    assert "T:gated_deltanet" in data["sequence"]

    assert missing.returncode == 2
    [line] = missing.stderr.strip().splitlines()
    assert "cannot import module 'not_a_module_here'" in line


class RecordingLawPool(LawPool):
    """The known-law pool (`tests.evolution.scale.test_train`) that keeps its requests."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[EvalRequest] = []

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: OnResult | None = None
    ) -> list[EvalResult]:
        self.seen.extend(requests)
        return super().evaluate(requests, on_result)


def test_scale_imports_the_plugin_sends_it_to_the_workers_and_records_it(work, monkeypatch):
    db = work / "s.db"
    argv = ["scale", str(work / "gdn.yaml"), "--sizes", "4k,16k,64k,256k", "--tokens", "200k"]
    argv += ["--seeds", "2", "--json", "--store", f"sqlite:///{db}"]
    code, _, err = evolve(*argv)
    assert code == 2 and "unknown kind 'gated_deltanet'" in err and "--plugin MODULE" in err
    assert err.count("\n") == 1 and not db.exists()

    pool = RecordingLawPool()
    monkeypatch.setattr(scale_cli, "_pool", lambda args, store, todo: pool)
    with loaded_plugin("gated_deltanet", work) as record:
        code, out, err = evolve(*argv, "--plugin", "gated_deltanet")
        assert code == 0, err
        pinned = record["pinned"]
        assert f"evolve: plugin {pinned}: imported module gated_deltanet" in err
        data = json.loads(out)
        assert data["trained"] == 8 and all(p["status"] == "ok" for p in data["points"])
        assert {r.plugins for r in pool.seen} == {(pinned,)}  # the workers import it
        with Store(f"sqlite:///{db}", create=False) as store:
            run = store.get_run(data["run_id"])
        assert run is not None and run.config["plugins"] == [pinned]
        assert run.config["plugin_code"][pinned]["kinds"] == ["gated_deltanet"]
        assert run.config["ladder"]["plugins"] == [pinned]  # other code: another ladder


def test_calibrate_draws_the_plugin_kind_trains_it_and_records_it(work, monkeypatch):
    db = work / "c.db"
    argv = ["calibrate", "--task", "mqar", "--steps", "10", "--rungs", "5,10", "--target", "20"]
    argv += ["--presets", "2", "--random", "2", "--max-params", "100000", "--seed", "0"]
    argv += ["--plugin", "gated_deltanet", "--json", "--store", f"sqlite:///{db}"]
    monkeypatch.setattr(calibrate_cli, "_pool", lambda args, store, run_id: StoppingPool(None))
    with loaded_plugin("gated_deltanet", work) as record:
        code, out, err = evolve(*argv)
        assert code == 0, err
        pinned = record["pinned"]
        assert f"evolve: plugin {pinned}: imported module gated_deltanet" in err
        data = json.loads(out)
        with Store(f"sqlite:///{db}", create=False) as store:
            run = store.get_run(data["run_id"])
        assert run is not None
        assert run.config["plugins"] == [pinned] and run.config["calibration"]["plugins"] == [pinned]
        with contextlib.closing(sqlite3.connect(db)) as c:
            uses = c.execute(
                "SELECT e.status, e.metrics FROM evaluations e JOIN genomes g ON g.id = e.genome_id "
                "WHERE e.run_id = ? AND g.yaml LIKE '%gated_deltanet%'",
                (run.id,),
            ).fetchall()
        assert len(uses) == 3  # the member that draws the kind, at 5, 10 and 20 steps
        assert all(status == "ok" and json.loads(m)["plugins"] == [pinned] for status, m in uses)


def test_scale_of_a_stored_individual_imports_its_runs_plugins_and_records_them(work, monkeypatch):
    from dogma_evolve.evaluation.table import TableEvaluator
    from dogma_evolve.evolution.config import RunConfig
    from dogma_evolve.evolution.engine import Engine

    db = f"sqlite:///{work / 'r.db'}"
    monkeypatch.setattr(scale_cli, "_pool", lambda args, store, todo: LawPool())
    with loaded_plugin("gated_deltanet", work) as record:
        pinned = record["pinned"]
        with Store(db) as store:  # seed 17 draws the plugin's kind into generation 0
            config = RunConfig(
                population=4,
                generations=0,
                steps=2,
                task="bytelm",
                max_params=100_000,
                seed=17,
                plugins=("gated_deltanet",),
            )
            engine = Engine(config, store, TableEvaluator(lambda request: {"loss": 1.0}))
            engine.run()
            [individual, *_] = [r for r in store.individuals(engine.run_id) if "gated_deltanet" in r.yaml]
        code, out, err = evolve("scale", str(individual.id), "--tokens", "100k", "--json", "--store", db)
        assert code == 0, err
        assert f"evolve: plugin {pinned}: imported module gated_deltanet" in err
        with Store(db, create=False) as store:
            run = store.get_run(json.loads(out)["run_id"])
        assert run is not None and run.config["plugins"] == [pinned]


@pytest.mark.slow
def test_calibrate_with_a_plugin_trains_it_on_ray(work):
    """The command's own pool in its own process: a Ray worker imports the plugin from the
    command's folder (12 trainings of at most 20 steps, one worker: about a minute); `evolve
    replay` of the plugin's member re-imports it from the run's record."""
    db = work / "ray.db"
    argv = ["calibrate", "--task", "mqar", "--steps", "10", "--rungs", "5,10", "--target", "20"]
    argv += ["--presets", "2", "--random", "2", "--max-params", "100000", "--seed", "0"]
    argv += ["--plugin", "gated_deltanet", "--workers", "1", "--json", "--store", f"sqlite:///{db}"]
    proc = evolve_process(work, *argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"imported module gated_deltanet from {work / 'gated_deltanet.py'}" in proc.stderr
    data = json.loads(proc.stdout)
    assert data["trained"] == 12 and data["failed"] == 0
    with contextlib.closing(sqlite3.connect(db)) as c:
        uses = c.execute(
            "SELECT e.status, e.metrics, g.id FROM evaluations e JOIN genomes g ON g.id = e.genome_id "
            "WHERE g.yaml LIKE '%gated_deltanet%'"
        ).fetchall()
    assert len(uses) == 3 and all(status == "ok" and "plugins" in json.loads(m) for status, m, _ in uses)
    # a later command re-imports the plugin the calibration's run recorded
    replay = evolve_process(work, "replay", uses[0][2][:12], "--json", "--store", f"sqlite:///{db}")
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert "evolve: plugin gated_deltanet#" in replay.stderr and json.loads(replay.stdout)["match"] is True
