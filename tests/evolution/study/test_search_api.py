"""Search from Python (`evolution.study`): make, run, stop, resume and read a search.

These run on NAS-Bench-201 (each evaluation a table look-up: no Ray, no training), which
goes through the same library calls, engine and store as a DOGMA search; the DOGMA path with a
user's task class on Ray workers is the README's example (`test_readme_example.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dogma_evolve.evolution import create_search, load_search
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.study import COLUMNS, Search
from dogma_evolve.evolution.study.running import STOPPED
from dogma_evolve.evolution.types import GenerationReport
from dogma_evolve.store import Store, StoreError

NB201 = {"task": "cifar10", "space": "nb201", "population": 4, "seed": 7}


def births(store: Store, run_id: str) -> list[tuple[int, int, str]]:
    return [(r.generation, r.slot, r.genome_id) for r in store.individuals(run_id)]


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'search.db'}"


def test_optimize_runs_generations_and_calls_back_after_each_commit(url: str) -> None:
    search = create_search(url, **NB201)
    assert search.run.last_generation == -1 and search.evaluations() == []
    seen: list[tuple[int, int, float]] = []

    def track(s: Search, report: GenerationReport) -> None:
        # called after the commit: the store already holds the generation and its best
        seen.append((report.generation, s.run.last_generation, s.best_individual.quality))

    search.optimize(generations=2, callbacks=[track])
    assert [(g, last) for g, last, _ in seen] == [(0, 0), (1, 1), (2, 2)]
    assert [q for *_, q in seen] == sorted(q for *_, q in seen)  # the best never gets worse
    assert search.run.status == "finished" and search.run.stop_reason == "2 offspring generations done"
    search.optimize(generations=1)  # one more: generation 3
    assert search.run.last_generation == 3
    before = sum(1 for row in search.evaluations() if not row["cached"])
    search.optimize(evaluations=3)  # exactly three more real evaluations
    assert sum(1 for row in search.evaluations() if not row["cached"]) == before + 3
    assert "evaluation budget" in (search.run.stop_reason or "")


def test_what_a_search_found_is_read_back_by_the_engines_rules(url: str) -> None:
    search = create_search(url, **NB201)
    search.optimize(generations=3)
    people = search.individuals()
    assert len(people) == len(births(search.store, search.run_id))
    evaluated = [i for i in people if i.status == "ok" and i.final]
    best = search.best_individual
    assert best.quality == max(i.quality for i in evaluated)
    assert best.params == min(i.params for i in evaluated if i.quality == best.quality)
    front = search.pareto_front
    assert front[0].quality == best.quality
    for a in front:  # nobody evaluated dominates a member of the front
        assert not any(
            b.quality >= a.quality and b.params <= a.params and (b.quality, b.params) != (a.quality, a.params)
            for b in evaluated
        )
    rows = search.evaluations()
    assert len(rows) == search.run.evaluated and all(tuple(r) == COLUMNS for r in rows)
    assert {r["individual"] for r in rows} == {i.id for i in people if i.status is not None}
    again = load_search(url)  # the newest search, read anew from the store
    assert again.run_id == search.run_id and again.best_individual == best and again.evaluations() == rows


def test_the_evaluations_table_as_a_dataframe(url: str) -> None:
    pandas = pytest.importorskip("pandas")
    search = create_search(url, **NB201)
    search.optimize(generations=1)
    frame = search.evaluations_dataframe()
    rows = search.evaluations()
    assert isinstance(frame, pandas.DataFrame) and len(frame) == len(rows)
    assert list(frame["individual"]) == [r["individual"] for r in rows]
    assert list(frame["metrics.accuracy"]) == [r["metrics"]["accuracy"] for r in rows]


def test_without_pandas_the_dataframe_points_to_the_plain_rows(url: str, monkeypatch) -> None:
    search = create_search(url, **NB201)
    search.optimize(generations=0)
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an environment without pandas imports
    with pytest.raises(ImportError, match=r"needs pandas.*evaluations\(\)"):
        search.evaluations_dataframe()
    assert len(search.evaluations()) == 4


def test_a_failing_callback_stops_after_the_commit_and_the_search_resumes_as_if_never_stopped(
    url: str, tmp_path: Path
) -> None:
    class Boom(RuntimeError):
        pass

    def fail_at_1(search: Search, report: GenerationReport) -> None:
        if report.generation == 1:
            raise Boom("my tracker is down")

    search = create_search(url, **NB201)
    with pytest.raises(Boom, match="my tracker is down"):
        search.optimize(generations=3, callbacks=[fail_at_1])
    run = search.run
    assert run.last_generation == 1  # generation 1 was committed before its callback ran
    assert run.status == "running" and run.driver is None  # shown interrupted: resumable
    assert run.shown_status == "interrupted"
    search.optimize(generations=2)  # 1 + 2: to generation 3, as the uninterrupted one
    other = create_search(f"sqlite:///{tmp_path / 'other.db'}", **NB201)
    other.optimize(generations=3)
    assert births(search.store, search.run_id) == births(other.store, other.run_id)


def test_stop_from_a_callback_ends_the_search_as_finished(url: str) -> None:
    search = create_search(url, **NB201)
    search.optimize(generations=5, callbacks=[lambda s, r: s.stop() if r.generation == 1 else None])
    assert search.run.last_generation == 1
    assert (search.run.status, search.run.stop_reason) == ("finished", STOPPED)
    search.optimize(generations=1)  # a later call goes on
    assert search.run.last_generation == 2


def test_load_if_exists_continues_the_search_of_the_same_settings(url: str) -> None:
    first = create_search(url, **NB201)
    first.optimize(generations=1)
    same = create_search(url, load_if_exists=True, workers=3, **NB201)  # where it runs may differ
    assert same.run_id == first.run_id and same.overrides == {"workers": 3}
    other = create_search(url, load_if_exists=True, **{**NB201, "seed": 8})
    assert other.run_id != first.run_id
    fresh = create_search(url, **NB201)  # without load_if_exists: a new search
    assert fresh.run_id not in (first.run_id, other.run_id)
    assert load_search(url, first.run_id[:6]).run_id == first.run_id


def _local_class() -> type:
    class Local:  # workers could not import it by name
        pass

    return Local


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda url: create_search(url, **NB201, populaton=4), "unknown setting 'populaton'"),
        (lambda url: create_search(url, task="no_such_task"), "unknown task 'no_such_task'"),
        (lambda url: create_search(url, **{**NB201, "population": 1}), "population must be at least 2"),
        (lambda url: create_search(url, task=_local_class()), "defined inside a function"),
        (lambda url: create_search(url, task=3), "settings cannot be read"),
        (lambda url: load_search(url), "does not exist"),
    ],
)
def test_bad_input_is_one_line_before_anything_is_made(url: str, tmp_path: Path, call, message) -> None:
    with pytest.raises(UsageError if "exist" not in message else StoreError, match=message) as caught:
        call(url)
    assert "\n" not in str(caught.value)
    if "exist" not in message:
        assert not (tmp_path / "search.db").exists()


def test_load_search_refuses_what_a_stored_search_cannot_change(url: str) -> None:
    create_search(url, **NB201)
    with pytest.raises(UsageError, match="'seed' cannot change on a stored search"):
        load_search(url, seed=3)
    with pytest.raises(StoreError, match="no run 'ffffffff'"):
        load_search(url, "ffffffff")
