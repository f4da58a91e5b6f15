"""A local Ray cluster runs its workers at the driver's own niceness (plus
``EVOLVE_WORKER_NICENESS``), not Ray's 15 lower; a mistyped value is one line."""

from __future__ import annotations

import os

import pytest
import ray

from dogma_evolve.evaluation.niceness import ENV, worker_niceness
from dogma_evolve.evaluation.pool import EvaluationPool
from tests.evolution.cli.test_input import cli, refused


def _niceness() -> int:
    return os.nice(0)


@pytest.mark.parametrize(("text", "value"), [(None, 0), ("", 0), ("0", 0), ("7", 7), (" 19 ", 19)])
def test_the_increment_is_read_from_the_environment(monkeypatch, text, value) -> None:
    if text is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, text)
    assert worker_niceness() == value


@pytest.mark.parametrize("text", ["-1", "20", "low", "1.5"])
def test_anything_else_is_refused_in_one_line_before_a_command_starts(monkeypatch, text) -> None:
    monkeypatch.setenv(ENV, text)
    with pytest.raises(ValueError, match=ENV):
        worker_niceness()
    code, _, err = cli("runs", "--store", "sqlite:///unused.db")
    refused(code, err, ENV, repr(text))


@pytest.mark.slow
def test_a_local_clusters_workers_run_at_the_drivers_niceness_plus_the_setting(monkeypatch) -> None:
    """Ray's default would put them 15 lower; with the setting 2 they are exactly 2 lower than
    this process, whatever this process's own niceness (`nice pytest` keeps it)."""
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setenv(ENV, "2")
    with EvaluationPool(workers=1):
        worker = ray.get(ray.remote(num_cpus=1)(_niceness).remote(), timeout=120)
    assert worker == min(os.nice(0) + 2, 19)
