"""`evolve run --select-by long`: the search's finalists trained 1,000 steps, the best of them
the run's best in every reader (`run`'s summary, `report`, `best_individual`, `export --best`),
and a stage killed between the search and its end resumed without retraining.

Nothing trains: the pool is a table in which a GRU design is the better one after the search's
300 steps and an attention design the better one after 1,000 (attention learns slower and
further), so the rule is seen choosing another individual than the search's own best.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.evaluation import EvalRequest
from dogma_evolve.evaluation.table import TableEvaluator
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.report.summary import best_individual
from dogma_evolve.evolution.study import running as study_running
from dogma_evolve.evolution.study.finalists import FINALISTS, LONG_STEPS
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import account
from dogma_evolve.store import Store
from tests.in_process import evolve_in_process as _evolve


def _table(request: EvalRequest) -> dict[str, Any]:
    """A design's quality by its family and its training steps (module docstring), a little
    lower the larger it is, so that the individuals are told apart."""
    genome = Genome.from_yaml(request.genome_yaml)
    n = account(genome).non_embedding_params
    kinds = {b.gene.kind for r in genome.regions for b in r.bases}
    long = request.fidelity >= LONG_STEPS
    if "attention" in kinds:
        quality = 0.9 if long else 0.5
    else:
        quality = 0.85 if long else 0.8
    quality -= n * 1e-9
    return {"quality": quality, "accuracy": quality, "params": n, "loss": 1 - quality}


class StoppingTable(TableEvaluator):
    """The table pool; with ``stop_after``, a Ctrl-C after that many of the finalists'
    trainings (the requests at ``LONG_STEPS``), as a killed command would stop."""

    def __init__(self) -> None:
        super().__init__(_table)
        self.stop_after: int | None = None
        self.long_requests = 0

    def evaluate(self, requests: Any, on_result: Any = None) -> Any:
        def counted(result: Any) -> None:
            if on_result is not None:
                on_result(result)
            if result.fidelity >= LONG_STEPS:
                self.long_requests += 1
                if self.stop_after is not None and self.long_requests >= self.stop_after:
                    raise KeyboardInterrupt

        return super().evaluate(requests, counted)


@pytest.fixture
def table_pool(monkeypatch: pytest.MonkeyPatch) -> StoppingTable:
    pool = StoppingTable()
    monkeypatch.setattr(study_running, "pool_for", lambda engine, store: nullcontext(pool))
    return pool


RUN = ["run", "--population", "8", "--generations", "0", "--task", "compression", "--min-steps", "0"]
RUN += ["--objectives", "quality", "--confirm", "1"]


def _families(store: Store, ids: list[int]) -> list[str]:
    out = []
    for i in ids:
        record = store.individual(i)
        assert record is not None
        kinds = {b.gene.kind for r in Genome.from_yaml(record.yaml).regions for b in r.bases}
        out.append("attention" if "attention" in kinds else "other")
    return out


def test_the_best_finalist_after_the_long_trainings_is_the_runs_best_everywhere(
    tmp_path: Path, table_pool: StoppingTable
) -> None:
    db = f"sqlite:///{tmp_path / 'long.db'}"
    code, out, err = _evolve(*RUN, "--select-by", "long", "--store", db, "--json")
    assert code == 0, err
    data = json.loads(out)
    finalists = data["finalists"]
    assert 2 <= len(finalists) <= FINALISTS and table_pool.long_requests == len(finalists)
    assert len({f["genome_id"] for f in finalists}) == len(finalists)  # one a genome
    assert all(f["steps"] == LONG_STEPS and f["status"] == "ok" for f in finalists)
    searched = [f["search_quality"] for f in finalists]
    assert searched == sorted(searched, reverse=True)  # the search's order
    chosen = max(finalists, key=lambda f: f["quality"])
    assert data["selected_by"] == "long" and data["best"]["id"] == chosen["individual_id"]
    with Store(db, create=False) as store:
        # the rule chose another individual than the search's best: attention, after 1,000 steps
        families = _families(store, [f["individual_id"] for f in finalists])
        assert families[0] == "other" and "attention" in families
        assert _families(store, [chosen["individual_id"]]) == ["attention"]
        assert best_individual(store, data["run_id"]).id == chosen["individual_id"]
        (select,) = store.list_runs("select")
        assert select.config["finalists_of"] == data["run_id"] and select.status == "finished"
    code, _, err = _evolve("run", "--resume", select.id, "--store", db)
    assert code == 2 and "a search's finalists, not a search: resume that search" in err
    code, out, err = _evolve("report", "--store", db, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["best"]["id"] == chosen["individual_id"] and report["finalists"] == finalists
    code, text, err = _evolve("report", "--store", db)
    assert code == 0, err
    assert "finalists (--select-by long; the best after the long training is the run's best):" in text
    assert f"after {LONG_STEPS:,} steps" in text and f"best: individual {chosen['individual_id']} " in text
    code, out, err = _evolve("export", "--best", "-o", str(tmp_path / "best"), "--store", db, "--json")
    assert code == 0, err
    assert json.loads(out)["id"] == chosen["individual_id"]
    code, text, err = _evolve("run", "--resume", data["run_id"], "--store", db)  # prints, trains nothing
    assert code == 0, err
    assert table_pool.long_requests == len(finalists)
    named = f"individual {chosen['individual_id']}"
    assert f"best (the best finalist after the long trainings, --select-by long): {named}" in text


def test_a_stage_killed_after_the_search_resumes_without_retraining(
    tmp_path: Path, table_pool: StoppingTable
) -> None:
    db = f"sqlite:///{tmp_path / 'killed.db'}"
    table_pool.stop_after = 1
    code, _, err = _evolve(*RUN, "--select-by", "long", "--store", db, "--json")
    assert code == 130 and "interrupted" in err
    with Store(db, create=False) as store:
        (run,) = store.list_runs("search")
        # one finalist trained: until all are, the search's own best stands
        best = best_individual(store, run.id)
        assert _families(store, [best.id]) == ["other"]
    table_pool.stop_after = None
    code, out, err = _evolve("run", "--resume", run.id, "--store", db, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert table_pool.long_requests == len(data["finalists"])  # the first one was not trained again
    assert data["selected_by"] == "long"
    assert _families(Store(db, create=False), [data["best"]["id"]]) == ["attention"]


def test_the_rule_is_the_stored_runs_not_a_resumes(tmp_path: Path, table_pool: StoppingTable) -> None:
    """Every reader applies the rule the run was stored with: a resume's ``--select-by long``
    of a run stored to select by the search trains no finalist and names the search's best."""
    db = f"sqlite:///{tmp_path / 'later.db'}"
    code, out, err = _evolve(*RUN, "--store", db, "--json")
    assert code == 0, err
    first = json.loads(out)
    assert first["selected_by"] == "search" and "finalists" not in first and table_pool.long_requests == 0
    code, out, err = _evolve(
        "run", "--resume", first["run_id"], "--select-by", "long", "--store", db, "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert table_pool.long_requests == 0 and data["selected_by"] == "search"
    assert data["best"]["id"] == first["best"]["id"]


def test_select_by_long_is_refused_in_one_line_where_it_cannot_train() -> None:
    with pytest.raises(ValueError, match="--select-by long"):
        RunConfig(select_by="long", space="nb201")
    with pytest.raises(ValueError, match="--select-by long"):
        RunConfig(select_by="long", task="text,suite")
    assert RunConfig(select_by="long").select_by == "long"
