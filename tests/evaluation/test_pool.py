"""EvaluationPool on a real local Ray (2 workers), started once for this module."""

import sys
import time

import pytest

from dogma_evolve.evaluation import EvalRequest, EvaluationPool
from dogma_evolve.evaluation.dispatch import TIMEOUT_RETRY_FACTOR
from tests.evaluation import eval_test_models
from tests.evaluation.eval_test_models import build

ray = pytest.importorskip("ray")

GRACE_S = 3.0


@pytest.fixture(scope="module")
def pool():
    # The test helpers live outside any installed package: ship them to workers by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[build.__module__])
    with EvaluationPool(
        workers=2, timeout_s=120, max_retries=2, build_model=build, timeout_grace_s=GRACE_S
    ) as started:
        yield started
    ray.cloudpickle.unregister_pickle_by_value(eval_test_models)


def request(genome, fidelity=3, **fields):
    return EvalRequest(
        genome_yaml=genome, genome_id=f"id-{genome}", task="mqar", fidelity=fidelity, seed=0, **fields
    )


def test_ray_stays_on_loopback(pool):
    node_ips = {node["NodeManagerAddress"] for node in ray.nodes()}
    assert node_ips == {"127.0.0.1"}
    assert pool.slots == 2


def test_one_result_per_request_in_request_order(pool):
    requests = [
        request("tiny"),
        request("invalid"),
        request("nan"),
        request("crash"),
        request("tiny", fidelity=4),
    ]
    seen = []
    results = pool.evaluate(requests, on_result=seen.append)
    assert [r.genome_id for r in results] == [r.genome_id for r in requests]
    assert [r.fidelity for r in results] == [r.fidelity for r in requests]
    assert [r.status for r in results] == ["ok", "invalid", "nan", "crash", "ok"]
    assert sorted(id(r) for r in seen) == sorted(id(r) for r in results)  # each once


def test_a_hung_candidate_times_out_without_hanging_the_run(pool):
    start = time.monotonic()
    results = pool.evaluate([request("sleep:600", timeout_s=1.0), request("tiny")])
    elapsed = time.monotonic() - start
    assert [r.status for r in results] == ["timeout", "ok"]
    # The forward never returns, so only the driver's deadline can end it: once at the
    # request's 1 s, once more at TIMEOUT_RETRY_FACTOR times that, then the timeout is final.
    assert "worker killed" in results[0].reason
    assert f"within {TIMEOUT_RETRY_FACTOR * 1.0:g}s" in results[0].reason
    assert elapsed < (1.0 + TIMEOUT_RETRY_FACTOR) + 2 * GRACE_S + 30  # the hung forward would take 600 s


def test_a_pool_inside_a_running_ray_leaves_it_running(pool):
    with EvaluationPool(workers=1, build_model=build) as inner:
        assert [r.status for r in inner.evaluate([request("invalid")])] == ["invalid"]
    assert ray.is_initialized()
    assert [r.status for r in pool.evaluate([request("invalid")])] == ["invalid"]


def test_evaluate_needs_a_started_pool():
    with pytest.raises(RuntimeError, match="not started"):
        EvaluationPool(workers=1).evaluate([request("tiny")])


def test_a_killed_worker_is_retried_and_yields_one_ok(pool, tmp_path):
    seen = []
    results = pool.evaluate([request(f"kill-once:{tmp_path}")], on_result=seen.append)
    assert [r.status for r in results] == ["ok"]
    assert len(seen) == 1
    assert (tmp_path / "killed").exists()  # the first attempt really died
    assert len((tmp_path / "attempts").read_text().split()) == 2
