"""The light commands load no torch: building the `evolve` parser (every command does) and
`evolve genome validate` leave torch and Ray unimported, and the packages they pass through
import their names on first use (PEP 562). Each check runs in a fresh interpreter, since
this one has long loaded torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dogma_evolve.genome import preset

HEAVY = ("torch", "ray")
WATCHED = (*HEAVY, "scipy")


def loaded_after(code: str) -> dict[str, bool]:
    """Which of WATCHED a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {WATCHED!r}}}))"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_building_the_parser_loads_no_torch() -> None:
    loaded = loaded_after("from dogma_evolve.evolution.cli.main import build_parser\nbuild_parser()")
    assert not any(loaded[m] for m in HEAVY), loaded


@pytest.mark.parametrize("source", ["preset:llama3-8b", "FILE"])
def test_genome_validate_loads_no_torch(source: str, tmp_path: Path) -> None:
    if source == "FILE":
        path = tmp_path / "g.yaml"
        path.write_text(preset("gpt2-small").to_yaml())
        source = str(path)
    code = (
        "from dogma_evolve.evolution.cli.main import main\n"
        f"assert main(['genome', 'validate', {source!r}]) == 0\n"
        f"assert main(['genome', 'validate', '--json', {source!r}]) == 0"
    )
    loaded = loaded_after(code)
    assert not any(loaded[m] for m in HEAVY), loaded


def test_the_torch_free_names_come_without_torch_or_scipy() -> None:
    code = (
        "from dogma_evolve import evaluation, evolution\n"
        "from dogma_evolve.evaluation import EvalRequest, EvalResult, STATUSES\n"
        "from dogma_evolve.evaluation.options import PRECISIONS\n"
        "from dogma_evolve.evaluation.scaling import LadderError, min_boot\n"
        "from dogma_evolve.evolution.config import RunConfig\n"
        "from dogma_evolve.evolution.objectives import OBJECTIVES, quality_of\n"
        "from dogma_evolve.evolution.strategies import STRATEGIES\n"
        # what reading a stored run passes through (`evolve report` loads torch only where it
        # builds a task's contract values or accounts a genome)
        "from dogma_evolve.evaluation.tasks import IGNORE_INDEX, Task, derive_seed\n"
        "from dogma_evolve.evaluation.precision import pool_precision, precision_of\n"
        "from dogma_evolve.evaluation.transfer import rank_transfer\n"
        "from dogma_evolve.evolution.rules import seeds_of, stored_result\n"
        "from dogma_evolve.evolution.transfer_audit import run_transfer\n"
        "from dogma_evolve.evolution.scale.ladder_report import ladder_summary\n"
        "from dogma_evolve.evolution.study.stored_run import StoredRun\n"
        "from dogma_evolve.evolution.report.ledger import read_ledger, run_ledger"
    )
    loaded = loaded_after(code)
    assert not any(loaded.values()), loaded


def test_every_public_name_of_the_lazy_packages_resolves() -> None:
    from dogma_evolve import evaluation, evolution
    from dogma_evolve.evaluation import scaling, tasks
    from dogma_evolve.evolution import study

    for package in (evaluation, scaling, evolution, tasks, study):
        assert sorted(package.__all__) == sorted(package._PUBLIC), package.__name__
        for name in package.__all__:
            value = getattr(package, name)
            assert value is getattr(sys.modules[package._PUBLIC[name]], name)
        with pytest.raises(AttributeError):
            _ = package.no_such_name
    # a submodule named like a function leaves the package's name to the function

    assert callable(evaluation.evaluate) and callable(scaling.compare)
    assert sys.modules["dogma_evolve.evaluation.evaluate"].evaluate is evaluation.evaluate


def test_the_parser_takes_its_choices_from_the_registries() -> None:
    from dogma_evolve.evolution.cli.main import build_parser
    from dogma_evolve.evolution.objectives import OBJECTIVES
    from dogma_evolve.evolution.strategies import STRATEGIES

    run = build_parser()._subparsers._group_actions[0].choices["run"]
    by_dest = {a.dest: a for a in run._actions}
    assert tuple(by_dest["strategy"].choices) == tuple(STRATEGIES)
    assert all(name in by_dest["objectives"].help for name in OBJECTIVES)
