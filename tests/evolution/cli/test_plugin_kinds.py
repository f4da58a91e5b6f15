"""`evolve run --plugin MODULE`: a user's block kind (the docs' gated DeltaNet, one file) and
a user's task, both in a folder outside the project, searched through the `evolve` command on
real Ray workers, resumed, replayed and exported; read back without the plugin's code; and
refused in one line wherever it cannot be used. `evolve plugin check` passes the example and
fails a block that peeks at future tokens, naming the causality check.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.evolution.cli.test_user_task import SOURCE as TASK_SOURCE  # the task tests' user task
from tests.evolution.cli.test_user_task import (
    TRAP,  # a module a reader must never import
    USER_ENV,
    evolve_in_one_process,
)
from tests.phenotype.test_standalone import assert_package_works, check_in_fresh_interpreter

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "gated_deltanet.py"
EVOLVE = str(Path(sys.executable).with_name("evolve"))
TASK = "my_parity_task:Parity?length=6"
# seed 21 draws a gated_deltanet genome into generation 0 (of 4: presets, then random genomes)
RUN = ["--plugin", "gated_deltanet", "--task", TASK, "--population", "4", "--generations", "0"]
RUN += ["--steps", "10", "--workers", "2", "--seed", "21", "--max-params", "20000", "--confirm", "1"]
RUN += ["--quiet"]  # (--confirm 1: confirmation is not tested here)


def evolve(work: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`evolve ARGS --store work/evolve.db`, run in ``work`` (its modules found there)."""
    cmd = [EVOLVE, *args, "--store", f"sqlite:///{work / 'evolve.db'}"]
    proc = subprocess.run(cmd, cwd=work, env=USER_ENV, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def evolve_each(work: Path, *commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """`evolve COMMAND --store work/evolve.db` for each command, in turn, in one process run
    in ``work`` (`test_user_task.evolve_in_one_process`): for commands that stop before a
    search, such as refusals."""
    store = ["--store", f"sqlite:///{work / 'evolve.db'}"]
    return evolve_in_one_process(work, [[*command, *store] for command in commands])


def plugin_genomes(work: Path) -> list[tuple[str, str]]:
    """(genome id, evaluation status) of every evaluated genome holding the plugin's kind."""
    with contextlib.closing(sqlite3.connect(work / "evolve.db")) as db:
        return db.execute(
            "SELECT g.id, e.status FROM genomes g JOIN evaluations e ON e.genome_id = g.id "
            "WHERE g.yaml LIKE '%gated_deltanet%'"
        ).fetchall()


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, dict]:
    """The example plugin checked, searched with on a user's task, and resumed."""
    work = tmp_path_factory.mktemp("work")
    shutil.copyfile(EXAMPLE, work / "gated_deltanet.py")
    (work / "my_parity_task.py").write_text(textwrap.dedent(TASK_SOURCE))
    check = evolve(work, "plugin", "check", "gated_deltanet")
    assert "kind gated_deltanet (sequence) passes" in check.stdout and "causality" in check.stdout
    first = evolve(work, "run", *RUN, "--json")
    assert f"imported module gated_deltanet from {work / 'gated_deltanet.py'}" in first.stderr
    run_id = json.loads(first.stdout)["run_id"]
    resumed = evolve(work, "run", "--resume", run_id, "--generations", "1", "--json")
    assert "plugin gated_deltanet#" in resumed.stderr  # re-imported, pinned to its code
    return work, json.loads(resumed.stdout)


@pytest.mark.slow
def test_a_plugin_kind_is_searched_resumed_replayed_and_exported(searched, tmp_path):
    work, result = searched
    assert result["last_generation"] == 1
    stored = plugin_genomes(work)
    assert stored and all(status == "ok" for _, status in stored)  # trained on the Ray workers
    with contextlib.closing(sqlite3.connect(work / "evolve.db")) as db:
        (config,) = db.execute("SELECT config FROM runs WHERE id = ?", (result["run_id"],)).fetchone()
    [pinned] = json.loads(config)["plugins"]
    assert pinned.startswith("gated_deltanet#") and json.loads(config)["plugin_code"][pinned]["kinds"] == [
        "gated_deltanet"
    ]

    genome_id = stored[0][0][:12]
    replay = evolve(work, "replay", genome_id, "--json")
    assert json.loads(replay.stdout)["match"] is True
    assert f"plugin {pinned}: imported module gated_deltanet" in replay.stderr

    out = tmp_path / "exported"
    evolve(work, "export", "--id", genome_id, "-o", str(out))
    assert (out / "dogma_model" / "plugins" / "gated_deltanet.py").is_file()  # the block's code
    results = check_in_fresh_interpreter([out], tmp_path)  # neither ours nor the plugin on the path
    assert_package_works(results[str(out)], out)

    hf = tmp_path / "hf"  # the export loads it through transformers and compares the logits
    evolve(work, "export", "--id", genome_id, "-o", str(hf), "--format", "hf")
    assert "from .dogma_blocks_base import" in (hf / "dogma_plugins_gated_deltanet.py").read_text()


@pytest.mark.slow
def test_readers_never_import_the_plugin_and_other_code_is_refused(searched, tmp_path):
    source, result = searched
    work = tmp_path / "copy"
    shutil.copytree(source, work, ignore=shutil.ignore_patterns("__pycache__"))
    run_id, genome_id = result["run_id"], plugin_genomes(work)[0][0][:12]
    (work / "gated_deltanet.py").write_text(TRAP)
    # the readers in one process: any import of the plugin writes IMPORTED
    read = evolve_each(
        work, ["report", "--run", run_id], ["runs"], ["lineage", genome_id], ["check"], ["audit", genome_id]
    )
    assert all(proc.returncode == 0 for proc in read), [proc.stderr[-2000:] for proc in read]
    assert "T:gated_deltanet" in read[-1].stdout  # the stored kind's name, from the recorded gene
    assert not (work / "IMPORTED").exists()

    (work / "gated_deltanet.py").write_text(EXAMPLE.read_text() + "# an edit\n")
    for refused in evolve_each(
        work,
        ["run", "--resume", run_id, "--generations", "2"],
        ["replay", genome_id],
        ["export", "--id", genome_id, "-o", str(tmp_path / "never")],
    ):
        assert refused.returncode == 2, refused.stderr[-2000:]
        [line] = [x for x in refused.stderr.splitlines() if x.startswith("evolve: error: ")]
        assert "plugin gated_deltanet: its code has fingerprint" in line and "needs the code" in line
    assert not (tmp_path / "never").exists()

    # the same search with the edited code: only results that did not use the plugin are reused
    again = json.loads(evolve(work, "run", *RUN, "--json").stdout)["run_id"]
    with contextlib.closing(sqlite3.connect(work / "evolve.db")) as db:
        rows = db.execute(
            "SELECT g.yaml LIKE '%gated_deltanet%', e.metrics FROM evaluations e "
            "JOIN genomes g ON g.id = e.genome_id WHERE e.run_id = ?",
            (again,),
        ).fetchall()
    assert any(uses for uses, _ in rows) and any(not uses for uses, _ in rows)
    for uses, metrics in rows:
        assert ("cached_from" in json.loads(metrics)) is not bool(uses), (uses, metrics[:200])


PEEK = """
    def forward(self, x):
        return super().forward(x.roll(-1, 1))  # reads the next token: not causal
"""


def plugin_module(work: Path, name: str, source: str) -> None:
    (work / f"{name}.py").write_text(textwrap.dedent(source))


def kind_module(kind: str, spec_role: str | None = '"sequence"', block: str = "sequence") -> str:
    """A plugin that subclasses the example's block under another kind's name."""
    role = f", role={spec_role}" if spec_role else ""
    return f"""
        import dataclasses
        from dogma_evolve.genome import KindSpec, register_kind
        from dogma_evolve.genome.schema import integer
        from gated_deltanet import GatedDeltaNet, GatedDeltaNetConfig, _derive
        from dogma_evolve.phenotype.blocks.base import BlockConfig

        register_kind(KindSpec("{kind}", ("T",), {{"heads": integer(2, 1, 8), "head_dim": integer(0, 0, 64)}},
                      derive=_derive{role}))

        @dataclasses.dataclass(frozen=True)
        class Config(GatedDeltaNetConfig, kind="{kind}", role="{block}"):
            def build(self):
                return Block(self)

        class Block(GatedDeltaNet):
            pass
    """


@pytest.mark.slow
def test_plugin_check_fails_a_block_that_peeks_at_future_tokens(tmp_path):
    shutil.copyfile(EXAMPLE, tmp_path / "gated_deltanet.py")
    plugin_module(tmp_path, "peeking", kind_module("peeking") + textwrap.indent(PEEK, "        "))
    proc = evolve(tmp_path, "plugin", "check", "peeking", check=False)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert any(line.startswith("plugin peeking: kind peeking: causality: ") for line in lines), lines
    assert all(line.startswith("plugin peeking: kind peeking: ") for line in lines)  # one per failure


@pytest.mark.slow
def test_plugins_that_break_the_registration_are_refused_in_one_line(tmp_path):
    shutil.copyfile(EXAMPLE, tmp_path / "gated_deltanet.py")
    plugin_module(tmp_path, "no_role", kind_module("no_role", spec_role=None))
    plugin_module(tmp_path, "clash", kind_module("attention"))
    plugin_module(tmp_path, "wrong_role", kind_module("wrong_role", block="channel"))
    plugin_module(
        tmp_path,
        "gene_only",
        "from dogma_evolve.genome import KindSpec, register_kind\n"
        'register_kind(KindSpec("gene_only", ("T",), role="sequence"))\n',
    )
    plugin_module(tmp_path, "nothing", "X = 1\n")
    cases = {
        "no_role": "gene kind 'no_role' states no role",
        "clash": "gene kind 'attention' registered twice",
        "wrong_role": "role 'channel' is not its gene's role 'sequence'",
        "gene_only": "gene kind 'gene_only' has no block",
        "nothing": "registers no block kind",
        "not_a_module_here": "No module named 'not_a_module_here'",
    }
    # each in turn in one process; each case's module is its own, as its gene kinds are
    checked = evolve_each(tmp_path, *(["plugin", "check", module] for module in cases))
    for (module, reason), proc in zip(cases.items(), checked, strict=True):
        assert proc.returncode == 2, (module, proc.stdout, proc.stderr)
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("evolve: error: ") and reason in line, (module, line)


@pytest.mark.slow
def test_a_run_refuses_a_plugin_it_cannot_use_before_making_a_store(tmp_path):
    shutil.copyfile(EXAMPLE, tmp_path / "gated_deltanet.py")
    plugin_module(tmp_path, "peeking", kind_module("peeking") + textwrap.indent(PEEK, "        "))
    cases = {
        ("--plugin", "peeking"): "plugin peeking: kind peeking fails the block contract: causality: ",
        ("--plugin", "gated_deltanet#0000000000000000"): "not 0000000000000000",
        ("--plugin", "not_a_module_here"): "cannot import module 'not_a_module_here'",
        ("--plugin", "gated_deltanet", "--space", "nb201"): "the nb201 space has none",
    }
    refused = evolve_each(tmp_path, *(["run", *args, "--generations", "0"] for args in cases))
    for (args, reason), proc in zip(cases.items(), refused, strict=True):
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        [line] = proc.stderr.strip().splitlines()
        assert reason in line, (args, line)
    assert not (tmp_path / "evolve.db").exists()


@pytest.mark.slow
def test_the_python_api_exports_a_plugin_run_as_evolve_export_does(searched, tmp_path):
    """`Search.export` imports the run's pinned block kinds first (as `evolve export` does)."""
    work, result = searched
    genome_id = plugin_genomes(work)[0][0]
    out = tmp_path / "api"
    script = textwrap.dedent(
        f"""
        from dogma_evolve.evolution.study import load_search
        with load_search("sqlite:///{work / "evolve.db"}", "{result["run_id"]}") as search:
            ind = next(i for i in search.individuals() if i.genome_id == "{genome_id}")
            search.export("{out}", ind)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "dogma_model" / "plugins" / "gated_deltanet.py").is_file()
