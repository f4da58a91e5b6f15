"""A search across two Ray nodes on this machine (ray.cluster_utils.Cluster on loopback):
`evolve run --ray-address` joins the cluster, the evaluations run on both nodes, and the
store is PostgreSQL when EVOLVE_TEST_POSTGRES_URL is set (a SQLite file otherwise).

The cluster listens on 127.0.0.1 only. Ray rewrites a loopback address it is asked to
join into the machine's routable one, where nothing answers, so the pool joins loopback
clusters in Ray's single-machine mode (evaluation/pool.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from sqlalchemy import create_engine, text

from dogma_evolve.store.testing import postgres_base_url, scratch_database

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")


@pytest.fixture
def store_url(tmp_path):
    base = postgres_base_url()
    if base is None:
        yield f"sqlite:///{tmp_path / 'evolve.db'}"
        return
    with scratch_database(base) as url:
        yield url


@pytest.fixture(scope="module")
def cluster():
    """One two-node cluster for the module's tests: each joins it as a job of its own (a
    subprocess's `evolve run`, this process's pool), whose workers Ray starts for that job
    alone; what the tests check is per job, so a cluster started anew for each adds nothing."""
    common = {
        "num_cpus": 1,
        "node_ip_address": "127.0.0.1",
        "object_store_memory": 128 * 1024**2,
        "include_dashboard": False,
    }
    started = cluster_utils.Cluster(initialize_head=True, head_node_args=common)
    try:
        started.add_node(**common)
        started.wait_for_nodes()
        yield started
    finally:
        started.shutdown()


@pytest.mark.slow
def test_search_runs_on_both_nodes(cluster, store_url):
    assert cluster.address.startswith("127.0.0.1:")
    cmd = [
        sys.executable,
        "-m",
        "dogma_evolve.evolution.cli.main",
        "run",
        "--population",
        "4",
        "--generations",
        "0",
        "--steps",
        "3",
        "--seed",
        "5",
        "--confirm",  # one row per genome: the 4 below
        "1",
        "--quiet",
        "--json",
        "--ray-address",
        cluster.address,
        "--store",
        store_url,
    ]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # the flag alone decides
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = json.loads(proc.stdout)["run_id"]
    engine = create_engine(store_url)
    try:
        with engine.connect() as connection:
            metrics = [
                json.loads(m)
                for (m,) in connection.execute(
                    text("SELECT metrics FROM evaluations WHERE run_id = :r"), {"r": run_id}
                )
            ]
    finally:
        engine.dispose()
    assert len(metrics) == 4
    nodes = {m["worker_node"] for m in metrics}
    assert len(nodes) == 2  # both nodes trained candidates
    assert nodes == {node.node_id for node in cluster.list_all_nodes()}


@pytest.mark.slow
def test_an_environment_failure_is_retried_on_the_other_node(cluster, tmp_path):
    """The first node the candidate lands on has a broken environment (an import fails there
    on every attempt, `fault_models`): the retry goes to the other node and succeeds, where a
    retry on the same node would have failed again."""
    from dogma_evolve.evaluation import EvalRequest, EvaluationPool
    from tests.faults import fault_models

    ray.cloudpickle.register_pickle_by_value(fault_models)
    request = EvalRequest(f"broken-on-first-node:{tmp_path}", "ab" * 32, "mqar", 2, seed=0)
    try:
        with EvaluationPool(
            ray_address=cluster.address, max_retries=1, build_model=fault_models.build, lease_s=None
        ) as pool:
            [result] = pool.evaluate([request])
    finally:
        ray.cloudpickle.unregister_pickle_by_value(fault_models)
        ray.shutdown()
    calls = (tmp_path / "broken-on-first-node.calls").read_text().split()
    assert result.status == "ok", result.reason
    assert len(calls) == 2 and calls[0] != calls[1]  # one attempt on each node
    assert result.metrics["worker_node"] == calls[1]


def test_joining_an_address_where_nothing_listens_fails_fast():
    from dogma_evolve.evaluation import EvaluationPool

    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="no Ray cluster answers"):
        EvaluationPool(ray_address=address).start()
    assert time.monotonic() - start < 15
