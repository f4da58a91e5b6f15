"""A search whose workers fail for their environment stops with one line and records nothing
about the genome; once the cause is removed, `--resume` ends identical to a run that never
met it (`evaluation.environment`, `evolution.evaluating.Evaluator._request`).

The fault is real and met from the run's first candidate (each `evolve run` starts Ray and
its workers anew, ~20 s here, so the test keeps to three runs): a stale ``sympy.py`` first on
the Ray workers' ``PYTHONPATH`` (Ray starts its workers with the driver's environment at
``ray.init``; this process's own ``sys.path`` is fixed at start, so only the workers see it).
The first candidate's forward pass imports torch's symbolic shapes, which import SymPy: an
``ImportError`` on every attempt.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dogma_evolve.evolution.cli.main import main

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

ARGS = ["--population", "2", "--steps", "5", "--seed", "5", "--workers", "2", "--confirm", "1", "--quiet"]


def evolve(capsys: pytest.CaptureFixture[str], store: Path, *args: str) -> tuple[int, str, str]:
    code = main(["run", *ARGS, *args, "--store", f"sqlite:///{store}"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def stored(store: Path) -> dict[str, list[tuple]]:
    """What a run stores about its genomes: births, evaluations (metrics without where and how
    long they ran), members; ids and times left out."""
    volatile = {"worker_host", "worker_pid", "worker_node", "train_seconds", "wall_seconds"}
    volatile |= {"train_tokens_per_s", "infer_latency_ms", "eval_seconds", "tokens_per_s"}
    volatile |= {"peak_memory_bytes"}
    with sqlite3.connect(store) as db:
        births = db.execute(
            "SELECT generation, slot, genome_id, operator FROM individuals ORDER BY generation, slot"
        ).fetchall()
        evaluations = []
        for row in db.execute(
            "SELECT genome_id, task, fidelity, seed, status, reason, metrics FROM evaluations "
            "ORDER BY genome_id, task, fidelity, seed"
        ):
            metrics = {k: v for k, v in json.loads(row[6] or "{}").items() if k not in volatile}
            metrics = {k: v for k, v in metrics.items() if not k.endswith(("_per_s", "_seconds", "_ms"))}
            evaluations.append((*row[:6], json.dumps(metrics, sort_keys=True)))
        members = db.execute(
            "SELECT m.generation, m.rank, i.genome_id FROM members m "
            "JOIN individuals i ON i.id = m.individual_id ORDER BY m.generation, m.rank"
        ).fetchall()
    return {"births": births, "evaluations": evaluations, "members": members}


def test_a_shadowed_dependency_stops_the_run_and_resume_ends_as_the_reference(tmp_path, capsys, monkeypatch):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "sympy.py").write_text('"""Not SymPy: a stale local module of the same name."""\n')

    reference = tmp_path / "reference.db"
    code, out, err = evolve(capsys, reference, "--generations", "1")
    assert code == 0, err

    store = tmp_path / "faulty.db"
    monkeypatch.setenv("PYTHONPATH", str(shadow))  # the workers of the next pool see it
    code, out, err = evolve(capsys, store, "--generations", "1")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2
    assert len(lines) == 1, err
    assert lines[0].startswith("evolve: error: environment failure: ImportError"), lines[0]
    assert "sympy" in lines[0] and "nothing was recorded against genome" in lines[0]
    faulty = lines[0].rsplit(" ", 1)[-1]
    assert lines[0].endswith(f"evolve run --resume {faulty}")
    assert stored(store) == {"births": [], "evaluations": [], "members": []}  # nothing about a genome

    from dogma_evolve.evolution.report.html import write_report
    from dogma_evolve.evolution.report.summary import run_report
    from dogma_evolve.store import Store

    with Store(f"sqlite:///{store}") as reader:
        record = reader.get_run(faulty)
        assert record is not None and record.shown_status == "interrupted"
        assert record.last_generation == -1
        report = run_report(reader, faulty)
        page = tmp_path / "report.html"
        write_report(reader, faulty, page)
    environment = report["environment_failures"]
    shown = f"not counted against any genome): {environment['attempts']} attempts at"
    assert shown in page.read_text()
    assert environment["attempts"] >= 3 and environment["recorded"] == 0  # retried, then stopped
    assert any("sympy" in cause for cause in environment["causes"])
    assert all("sympy" not in str(reason) for reason in report["failures"])
    assert main(["report", "--run", faulty, "--store", f"sqlite:///{store}"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "genome failures by type: none" in text
    assert f"(the machine's, not counted against any genome): {environment['attempts']} attempts" in text

    monkeypatch.delenv("PYTHONPATH")  # the cause fixed
    code, out, err = evolve(capsys, store, "--resume", faulty)
    assert code == 0, err
    assert stored(store) == stored(reference)
