"""Workers that die, hang, raise or run out of memory, on a real local Ray (2 workers).

Each evaluation ends with exactly one result and its lease closed: retried where the fault
is worth a retry (a lost worker, an expired lease, a TransientFailure), recorded with its
reason where it is not, never hung and never left "running" in the store.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import pytest

from dogma_evolve.evaluation import EvalRequest, EvaluationPool
from dogma_evolve.store import EvaluationIn, GenomeIn, IndividualIn, LeaseIn, LeaseLog, Store, by_slot
from tests.faults import fault_models

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults")
    store = Store(f"sqlite:///{folder / 'store.db'}")
    run_id = store.create_run({}, seed=0, task="mqar")
    events = []
    log = LeaseLog(store, run_id)

    def on_lease(event):
        events.append(event)
        log(event)

    ray.cloudpickle.register_pickle_by_value(fault_models)
    with EvaluationPool(
        workers=2,
        timeout_s=120,
        max_retries=2,
        build_model=fault_models.build,
        heartbeat_s=0.5,
        lease_s=4.0,
        start_grace_s=90,
        on_lease=on_lease,
    ) as pool:
        yield pool, store, run_id, events, folder
    ray.cloudpickle.unregister_pickle_by_value(fault_models)
    store.close()


def _request(kind, folder, **fields):
    text = f"{kind}:{folder}"
    return EvalRequest(
        genome_yaml=text,
        genome_id=hashlib.sha256(text.encode()).hexdigest(),
        task="mqar",
        fidelity=2,
        seed=0,
        **fields,
    )


def _calls(folder, kind) -> int:
    path = folder / f"{kind}.calls"
    return len(path.read_text().split()) if path.exists() else 0


def _leases(store, run_id, genome_id):
    return [(x.attempt, x.state) for x in store.leases(run_id) if x.genome_id == genome_id]


def test_sigkilled_worker_is_retried_and_committed_once(lab, tmp_path, tally):
    pool, store, run_id, _, _ = lab
    request = _request("sigkill-once", tmp_path)
    [result] = pool.evaluate([request])
    assert result.status == "ok", result.reason
    assert _calls(tmp_path, "sigkill-once") == 2  # killed once, evaluated once more
    # committed twice (a retried commit): one evaluation row
    genome = GenomeIn(request.genome_id, request.genome_yaml, "x")
    payload = dict(
        genomes=[genome],
        individuals=[IndividualIn(0, genome.id, 0)],
        evaluations=[
            EvaluationIn(genome.id, "mqar", 2, 0, result.status, result.metrics, individual=by_slot(0))
        ],
        members=[by_slot(0)],
    )
    generation = store.get_run(run_id).last_generation + 1
    store.commit_generation(run_id, generation, **payload)
    store.commit_generation(run_id, generation, **payload)
    rows = [e for e in store.individuals(run_id) if e.genome_id == genome.id]
    lost = 0 if len(rows) == 1 and len(rows[0].evaluations) == 1 else 1
    assert lost == 0
    assert _leases(store, run_id, request.genome_id)[-1][1] == "done"
    assert store.leases(run_id, "running") == []
    tally.add("worker SIGKILL, retries on", lost=lost)


def test_sigkilled_worker_without_retries_is_a_crash_not_a_hang(lab, tmp_path, tally):
    pool, store, run_id, _, _ = lab
    saved = pool.max_retries, pool._remote
    pool.max_retries = 0
    pool._remote = pool._function.options(**{**pool._options, "max_retries": 0})
    try:
        start = time.monotonic()
        [result] = pool.evaluate([_request("sigkill-always", tmp_path)])
    finally:
        pool.max_retries, pool._remote = saved
    assert time.monotonic() - start < 60
    assert result.status == "crash" and "lost" in result.reason
    assert _calls(tmp_path, "sigkill-always") == 1
    assert store.leases(run_id, "running") == []
    tally.add("worker SIGKILL, retries off")


def test_exception_in_training_is_recorded_not_retried(lab, tmp_path, tally):
    pool, store, run_id, _, _ = lab
    request = _request("raise", tmp_path)
    [result] = pool.evaluate([request])
    assert result.status == "crash"
    assert "loss exploded in layer 3" in result.reason
    assert _calls(tmp_path, "raise") == 1
    assert _leases(store, run_id, request.genome_id) == [(1, "done")]
    tally.add("exception in training")


def test_transient_failure_is_retried(lab, tmp_path, tally):
    pool, store, run_id, _, _ = lab
    request = _request("transient-once", tmp_path)
    [result] = pool.evaluate([request])
    assert result.status == "ok", result.reason
    assert _calls(tmp_path, "transient-once") == 2
    assert _leases(store, run_id, request.genome_id) == [(1, "lost"), (2, "done")]
    tally.add("transient exception")


def test_the_pool_reports_leases_as_store_records(lab, tmp_path):
    pool, _, _, events, _ = lab
    request = _request("transient-once", tmp_path)
    pool.evaluate([request])
    mine = [e for e in events if e.genome_id == request.genome_id]
    assert mine and all(type(e) is LeaseIn for e in mine)
    assert [(e.attempt, e.state) for e in mine if e.state != "running"] == [(1, "lost"), (2, "done")]
    assert {e.lease_s for e in mine} == {pool.lease_s}


def test_memory_over_the_limit_is_oom(lab, tmp_path, tally):
    pool, _, _, _, _ = lab
    over_budget = _request("tiny", tmp_path, max_memory_bytes=64 * 1024)
    results = pool.evaluate([over_budget, _request("huge-alloc", tmp_path)])
    assert [r.status for r in results] == ["oom", "oom"], [r.reason for r in results]
    assert "exceeds the limit" in results[0].reason
    tally.add("memory over the limit", injected=2)


def test_cuda_oom_is_a_typed_failure_and_the_worker_goes_on(lab, tmp_path, tally):
    """A candidate that runs out of GPU memory is an ``oom`` result, not retried and not a
    lost worker: the same process (still alive) trains the next candidate."""
    pool, store, run_id, _, _ = lab
    oom = _request("cuda-oom", tmp_path)
    [failed] = pool.evaluate([oom])
    assert failed.status == "oom", failed.reason
    assert "CUDA out of memory" in failed.reason
    assert _calls(tmp_path, "cuda-oom") == 1  # final: not retried
    assert _leases(store, run_id, oom.genome_id) == [(1, "done")]
    os.kill(failed.metrics["worker_pid"], 0)  # the worker process is alive
    [after] = pool.evaluate([_request("tiny", tmp_path)])
    assert after.status == "ok", after.reason
    tally.add("CUDA out of memory in training")


def test_hung_worker_loses_its_lease_and_is_retried(lab, tmp_path, tally):
    pool, store, run_id, _, _ = lab
    request = _request("sigstop-once", tmp_path)
    start = time.monotonic()
    [result] = pool.evaluate([request])
    assert result.status == "ok", result.reason
    assert time.monotonic() - start < 60  # the lease (4 s), not the timeout (120 s), acted
    assert _calls(tmp_path, "sigstop-once") == 2
    assert _leases(store, run_id, request.genome_id) == [(1, "expired"), (2, "done")]
    [expired] = [x for x in store.leases(run_id, "expired") if x.genome_id == request.genome_id]
    assert "no heartbeat" in expired.reason and expired.worker
    tally.add("worker hung (SIGSTOP), lease expiry")


def test_results_record_threads_and_worker(lab, tmp_path):
    pool, _, _, _, _ = lab
    [result] = pool.evaluate([_request("tiny", tmp_path)])
    assert result.metrics["torch_threads"] == pool.torch_threads
    assert result.metrics["worker_pid"] > 0 and result.metrics["worker_node"]
    assert sys.modules["dogma_evolve.evaluation.pool"].is_transient(result) is False
