"""End to end through the `evolve` command, on real Ray workers and a real SQLite store.

A tiny run (population 4, 2 generations) is audited back to its seeds and exported; the
export is loaded in a subprocess where none of our packages can be imported. A second run
with the same seed is killed with SIGKILL after a committed generation and resumed: nothing
is lost, nothing doubled, and it ends with the uninterrupted run's population, front and best.

The runs train each candidate under one seed (`--confirm 1`): confirming the best under
further seeds, and a resume after a SIGKILL reproducing it, are tests/evolution/test_confirm.py's
and tests/faults/test_driver_faults.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

RUN_ARGS = "--population 4 --generations 2 --steps 20 --seed 7 --workers 2 --confirm 1".split()


def evolve(*args: str, store: Path, check: bool = True, **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "dogma_evolve.evolution.cli.main", *args, "--store", f"sqlite:///{store}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, dict]:
    store = tmp_path_factory.mktemp("run") / "evolve.db"
    proc = evolve("run", *RUN_ARGS, "--json", store=store)
    return store, json.loads(proc.stdout)


def test_run_reports_best_and_pareto_front(finished_run):
    store, result = finished_run
    assert set(result) >= {"run_id", "best", "pareto"}
    assert set(result["best"]) >= {"id", "genome_id", "metrics"}
    assert result["pareto"] and all("metrics" in p for p in result["pareto"])
    runs = json.loads(evolve("runs", "--json", store=store).stdout)
    [run] = runs
    assert run["id"] == result["run_id"] and run["status"] == "finished"
    assert run["generations"] == 3 and run["evaluated"] >= 8


def test_audit_reaches_the_seeds(finished_run):
    store, result = finished_run
    audit = json.loads(evolve("audit", str(result["best"]["id"]), "--json", store=store).stdout)
    for key in (
        "sequence",
        "regions",
        "genome_id",
        "parents",
        "operator",
        "change",
        "metrics",
        "params",
        "active_params",
        "state_bytes_per_token",
        "ancestry",
    ):
        assert key in audit
    assert audit["genome_id"] == result["best"]["genome_id"]
    # the roots: generation 0's seeds, or random genomes of a later generation (the surrogate's
    # picks from the whole space, immigrants); none has parents
    seeds = [s for s in audit["ancestry"] if s["operator"] is None]
    assert seeds and all(not s["parents"] for s in seeds)
    for step in audit["ancestry"]:
        if step["operator"] is not None:
            assert step["parents"] and step["change"]["op"] == step["operator"]
    by_prefix = json.loads(evolve("audit", result["best"]["genome_id"][:10], "--json", store=store).stdout)
    assert by_prefix["genome_id"] == result["best"]["genome_id"]


def test_export_loads_with_torch_alone(finished_run, tmp_path):
    store, result = finished_run
    out = tmp_path / "model"
    evolve("export", "--run", result["run_id"], "--best", "-o", str(out), store=store)
    assert {p.name for p in out.iterdir()} >= {
        "model.pt2",
        "model.safetensors",
        "genome.yaml",
        "README.md",
        "example.safetensors",
    }
    # A clean interpreter (-I -S: no site hooks, so the editable install's .pth is not read)
    # that sees the installed third-party packages only: none of ours can be imported.
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    script = textwrap.dedent(f"""
        import sys
        sys.path.append({site_packages!r})
        try:
            __import__("dogma_evolve")
        except ImportError:
            pass
        else:
            raise SystemExit("package dogma_evolve is importable")
        import torch
        from safetensors.torch import load_file
        program = torch.export.load({str(out / "model.pt2")!r}).module()
        example = load_file({str(out / "example.safetensors")!r})
        got = program(example["input"])
        assert torch.allclose(got, example["output"], atol=1e-5), (got - example["output"]).abs().max()
        print("ok", tuple(got.shape))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout
    assert proc.stdout.startswith("ok")


def _rows(store: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(store) as db:
        return db.execute(sql).fetchall()


def test_sigkill_after_a_committed_generation_then_resume(finished_run, tmp_path):
    reference_store, reference = finished_run
    store = tmp_path / "killed.db"
    cmd = [
        sys.executable,
        "-m",
        "dogma_evolve.evolution.cli.main",
        "run",
        *RUN_ARGS,
        "--json",
        "--quiet",
        "--store",
        f"sqlite:///{store}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 300
    try:
        while time.time() < deadline:
            if store.exists():
                try:
                    rows = _rows(store, "SELECT last_generation FROM runs")
                except sqlite3.OperationalError:
                    rows = []
                if rows and rows[0][0] >= 0:
                    break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        else:
            pytest.fail("no generation was committed in time")
    finally:
        with contextlib.suppress(ProcessLookupError):  # the driver and every Ray process
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    [(run_id, committed)] = _rows(store, "SELECT id, last_generation FROM runs")
    assert committed in (0, 1)
    before = _rows(store, "SELECT id, genome_id, generation, slot FROM individuals ORDER BY id")

    result = json.loads(evolve("run", "--resume", run_id, "--json", "--quiet", store=store).stdout)
    assert result["run_id"] == run_id
    after = _rows(store, "SELECT id, genome_id, generation, slot FROM individuals ORDER BY id")
    assert after[: len(before)] == before  # nothing lost
    assert _rows(store, "SELECT max(generation) FROM individuals")[0][0] == 2
    doubled = _rows(
        store,
        "SELECT genome_id, task, fidelity, seed, count(*) FROM evaluations "
        "GROUP BY genome_id, task, fidelity, seed HAVING count(*) > 1",
    )
    assert doubled == []  # nothing doubled
    # Same seed, same config: the interrupted run ends where the uninterrupted one did.
    population = (
        "SELECT i.genome_id FROM members m JOIN individuals i ON i.id = m.individual_id "
        "WHERE m.generation = 2 ORDER BY m.rank"
    )
    assert _rows(store, population) == _rows(reference_store, population)
    assert result["best"]["genome_id"] == reference["best"]["genome_id"]
    # and prints its front: the stored run's, not the candidates the resuming invocation saw
    front = [p["genome_id"] for p in result["pareto"]]
    assert front == [p["genome_id"] for p in reference["pareto"]]
