"""`evolve ... --task MODULE:CLASS`: a task class in a folder outside the project, searched
through the `evolve` command (its console script, so the folder is found as the current
directory, not through `python -m`) on real Ray workers, resumed, replayed, read back
without its code, and refused in one line when it cannot be used.

The searches are tiny (2 genomes, 10 steps) and share one store, in order: a search and its
resume; the same search again (every result reused); the code edited and searched from
another folder with the module's on PYTHONPATH (nothing reused, the workers find it too; the
resume refused); the module replaced by one that must never be imported (readers work).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dogma_evolve.evolution.cli.main import main

MODULE = "my_parity_task"
TASK = f"{MODULE}:Parity?length=6"
SOURCE = """
import torch

class Parity:
    name = "parity"
    train_batch_size = 8
    def __init__(self, length: int = 8):
        self.length = length
        self.vocab_size, self.seq_len, self.chance_accuracy = 3, length, 0.5
    def batch(self, generator, batch_size):
        x = torch.randint(2, (batch_size, self.length), generator=generator)
        y = torch.full_like(x, -100)
        y[:, -1] = x.sum(1) % 2
        return x, y
"""
TRAP = """
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text("a reader imported me")
raise SystemExit("a reader must not import this module")
"""
RUN = ["--population", "2", "--generations", "0", "--steps", "10", "--workers", "2", "--seed", "3"]
RUN += ["--max-params", "20000", "--confirm", "1", "--quiet"]  # (confirmation: not tested here)
EVOLVE = str(Path(sys.executable).with_name("evolve"))
# a user's shell: our tree off PYTHONPATH (a user's modules are found in the current folder)
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}


def evolve(
    work: Path, *args: str, check: bool = True, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`evolve ARGS --store work/evolve.db`, run in ``work`` (its current directory) or, with
    ``cwd``, there with ``work`` on ``PYTHONPATH`` instead."""
    cmd = [EVOLVE, *args, "--store", f"sqlite:///{work / 'evolve.db'}"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if cwd is not None:
        env["PYTHONPATH"] = str(work)
    proc = subprocess.run(cmd, cwd=cwd or work, env=env, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


ONE_PROCESS = r"""
import json, os, sys, tempfile
from dogma_evolve.evolution.cli.main import main
done = []
for argv in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        sys.stdout.flush(), sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
        try:
            code = main(argv)
        except SystemExit as exit:  # argparse's refusals
            code = exit.code
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2), os.close(saved[0]), os.close(saved[1])
        out.seek(0), err.seek(0)
        done.append([code, out.read(), err.read()])
print(json.dumps(done))
"""


def evolve_in_one_process(
    cwd: Path, commands: list[list[str]], env: dict[str, str] = USER_ENV
) -> list[subprocess.CompletedProcess[str]]:
    """`evolve ARGV` for each of ``commands`` in turn, in one fresh interpreter run in ``cwd``:
    each through the command's ``main`` (what its console script calls) with its stdout and
    stderr captured at the file descriptors; ``-P`` keeps ``cwd`` off ``sys.path``, as the
    console script does. One start (torch's import) for several commands that stop before
    any search, where each command's own process would pay it again."""
    proc = subprocess.run(
        [sys.executable, "-P", "-c", ONE_PROCESS, json.dumps(commands)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    return [subprocess.CompletedProcess(argv, *r) for argv, r in zip(commands, done, strict=True)]


def rows(work: Path, run_id: str) -> list[tuple[str, str, str]]:
    """(task, status, metrics JSON) of every evaluation row of ``run_id``."""
    with contextlib.closing(sqlite3.connect(work / "evolve.db")) as db:
        return db.execute(
            "SELECT task, status, metrics FROM evaluations WHERE run_id = ?", (run_id,)
        ).fetchall()


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, dict]:
    """A search on the user's task and its resume by one more generation."""
    work = tmp_path_factory.mktemp("work")
    (work / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    first = evolve(work, "run", "--task", TASK, *RUN, "--json")
    assert f"imported module {MODULE} from {work / MODULE}.py" in first.stderr
    run_id = json.loads(first.stdout)["run_id"]
    resumed = evolve(work, "run", "--resume", run_id, "--generations", "1", "--json")
    assert f"imported module {MODULE}" in resumed.stderr
    return work, json.loads(resumed.stdout)


@pytest.mark.slow
def test_a_user_task_is_searched_resumed_and_replayed(searched):
    work, result = searched
    assert result["last_generation"] == 1
    stored = rows(work, result["run_id"])
    assert len(stored) >= 3 and all(status == "ok" for _, status, _ in stored)
    [task] = {task for task, _, _ in stored}
    assert task.startswith(f"{TASK}#") and len(task) == len(TASK) + 17  # pinned to the code
    replay = evolve(work, "replay", str(result["best"]["id"]), "--json")
    assert json.loads(replay.stdout)["match"] is True
    assert f"imported module {MODULE}" in replay.stderr
    out = work / "exported"
    export = evolve(work, "export", "--run", result["run_id"], "--best", "-o", str(out), "--json")
    assert f"imported module {MODULE}" in export.stderr  # its example batch runs the task's code
    assert (out / "example.safetensors").exists()


@pytest.mark.slow
def test_a_result_is_reused_only_for_the_same_code(searched):
    work, result = searched
    again = json.loads(evolve(work, "run", "--task", TASK, *RUN, "--json").stdout)["run_id"]
    assert all("cached_from" in json.loads(m) for _, _, m in rows(work, again))  # same code: reused

    (work / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE) + "# an edit\n")
    elsewhere = work.parent / f"{work.name}-elsewhere"  # the module found through PYTHONPATH
    elsewhere.mkdir()
    edited = json.loads(evolve(work, "run", "--task", TASK, *RUN, "--json", cwd=elsewhere).stdout)["run_id"]
    edited_rows = rows(work, edited)
    assert edited_rows and not any("cached_from" in json.loads(m) for _, _, m in edited_rows)
    assert all(status == "ok" for _, status, _ in edited_rows)
    assert {t for t, _, _ in edited_rows}.isdisjoint(t for t, _, _ in rows(work, again))

    refused = evolve(work, "run", "--resume", result["run_id"], "--generations", "2", check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "changed since the task was pinned" in refused.stderr and "resuming run" in refused.stderr
    runs = json.loads(evolve(work, "runs", "--json").stdout)
    assert next(r for r in runs if r["id"] == result["run_id"])["generations"] == 2  # untouched


@pytest.mark.slow
def test_readers_show_the_recorded_task_without_importing_it(searched):
    work, result = searched
    (work / f"{MODULE}.py").write_text(TRAP)
    store = ["--store", f"sqlite:///{work / 'evolve.db'}"]
    best = str(result["best"]["id"])
    readers = [  # every reader in one process: any import of the module writes IMPORTED
        ["runs", "--json"],
        ["report", "--run", result["run_id"], "--json"],
        ["report", "--run", result["run_id"], "--html", str(work / "report.html")],
        ["audit", best, "--json"],
        ["ablate", best, "--list", "--json"],
    ]
    read = evolve_in_one_process(work, [[*command, *store] for command in readers])
    assert all(proc.returncode == 0 for proc in read), [proc.stderr for proc in read]
    runs = json.loads(read[0].stdout)
    assert all(r["task"].startswith(f"{TASK}#") for r in runs)
    report = json.loads(read[1].stdout)
    assert report["task"].startswith(f"{TASK}#") and len(report["generations"]) == 2
    assert (work / "report.html").is_file()
    assert not (work / "IMPORTED").exists()
    refused = evolve(work, "replay", str(result["best"]["id"]), check=False)  # training imports it
    assert refused.returncode == 2 and "cannot import module" in refused.stderr


def cli(*argv: str) -> tuple[int, str]:
    """(exit code, stderr) of `evolve ARGV` in this process."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, stderr.getvalue()


BROKEN = {
    "import": ("import no_such_dependency_zz\n", "Parity", "cannot import module"),
    "attribute": (SOURCE, "Parityy", "has no attribute 'Parityy'"),
    "shape": (
        SOURCE
        + "class Short(Parity):\n    def batch(self, g, b):\n        return super().batch(g, b)[0][:, 1:], "
        "super().batch(g, b)[1][:, 1:]\n",
        "Short",
        "not (2, 8)",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
@pytest.mark.parametrize("command", ["run", "scale", "calibrate"])
def test_a_task_that_cannot_be_used_is_one_line_before_any_run(tmp_path, monkeypatch, case, command):
    body, cls, message = BROKEN[case]
    name = f"broken_{case}_{command}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    store = tmp_path / "evolve.db"
    extra = {"run": [], "scale": ["preset:gpt2-small"], "calibrate": []}[command]
    code, stderr = cli(command, *extra, "--task", f"{name}:{cls}", "--store", f"sqlite:///{store}")
    assert code == 2 and message in stderr and stderr.count("\n") == 1, stderr
    assert not store.exists()  # refused before a store, let alone a run, was made


def test_a_run_config_records_the_task_and_reads_back_without_it(tmp_path, monkeypatch):
    from dogma_evolve.evolution.config import RunConfig

    name = "recorded_parity_task"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = RunConfig(task=f"suite,{name}:Parity?length=5")
    [pinned] = config.task_code
    assert config.tasks == ["suite", pinned] and config.task_code[pinned]["seq_len"] == 5
    stored = config.to_dict()
    (tmp_path / f"{name}.py").unlink()
    del sys.modules[name]
    assert RunConfig.from_dict(stored) == config and name not in sys.modules  # nothing imported
    assert "task_code" not in RunConfig().to_dict()  # a built-in run's config is as it was


@pytest.mark.parametrize("command", ["scale", "calibrate"])
def test_scale_and_calibrate_plan_on_the_pinned_task(tmp_path, monkeypatch, command):
    from dogma_evolve.evolution.cli import calibrate, scale
    from dogma_evolve.evolution.cli.main import build_parser

    name = f"planned_parity_{command}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    # (--minutes 0: plan only, no probe of the rungs' pace)
    extra = (
        ["preset:gpt2-small", "--sizes", "1e4,3e4,1e5,5e5", "--minutes", "0"]
        if command == "scale"
        else ["--random", "4"]
    )
    args = build_parser().parse_args([command, *extra, "--task", f"{name}:Parity?length=6"])
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        plan = scale.plans(args)[0] if command == "scale" else calibrate.plan_of(args)
    assert plan.task.startswith(f"{name}:Parity?length=6#") and f"imported module {name}" in stderr.getvalue()
