"""The run's training ledger (`evolution.report.ledger`): per generation and in total, what
its real evaluations trained (tokens, FLOPs, seconds), the FLOP/s they achieved and the
largest peak memory; cache hits, failures and filtered births count for nothing, and rows
written before a metric existed show what they have. `evolve report` prints it (text,
``--json`` as ``ledger``) and the HTML page has it as a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from dogma_evolve.evaluation import EvalRequest, evaluate
from dogma_evolve.evolution.cli.main import main
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.report.ledger import ledger_cells, read_ledger
from dogma_evolve.evolution.report.summary import run_report
from dogma_evolve.evolution.study.stored_run import StoredRun
from dogma_evolve.genome import Genome
from dogma_evolve.store import EvaluationIn, GenomeIn, IndividualIn, Store, by_slot

MIB, GIB = 2**20, 2**30


def genome(width: int) -> Genome:
    return Genome.from_yaml(
        f"""
regions:
- {{id: s0, type: structural, settings: {{d_model: {width}, vocab: 29, max_len: 15, positions: rope}}}}
- id: c1
  type: coding
  bases:
  - {{base: T, kind: attention, params: {{heads: 2}}}}
  - {{base: A, kind: swiglu}}
"""
    )


NEW = {  # a row as this code records it (on a GPU: the allocator's peak)
    "quality": 0.2,
    "train_tokens": 1000,
    "train_flops": 6_000_000,
    "train_seconds": 2.0,
    "train_compute_seconds": 0.5,
    "train_flops_per_s": 12_000_000.0,
    "peak_memory_bytes": 2 * GIB,
    "peak_memory_kind": "cuda_allocated",
    "peak_memory_scope": "evaluation",
}
OLD = {"quality": 0.1, "train_tokens": 2000, "train_flops": 12_000_000, "train_seconds": 4.0}
UNACCOUNTED = {  # a custom builder's row (no FLOPs) on a machine that could not reset its peak
    "quality": 0.1,
    "train_tokens": 500,
    "train_seconds": 1.0,
    "train_compute_seconds": 0.25,
    "peak_memory_bytes": 200 * MIB,
    "peak_memory_kind": "rss",
    "peak_memory_scope": "process",
}


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A stored run of three generations: 0 holds a real evaluation's row, a row as a GPU
    records it and a failure; 1 a row from before compute seconds and peaks were recorded,
    a cache hit (a copy of generation 0's) and a filtered birth; 2 an unaccounted row whose
    peak is a process's lifetime one."""
    g = [genome(width) for width in (32, 40, 48, 56, 64, 72, 80)]
    real = evaluate(EvalRequest(g[0].to_yaml(), g[0].id, "mqar", 2, seed=0, device="cpu"))
    assert real.status == "ok", real.reason
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'runs.db'}")
    config = RunConfig(population=2, generations=3, steps=2, task="mqar", seed=0, max_params=200_000)
    run_id = store.create_run(config.to_dict(), seed=0, task="mqar")
    generations = [
        [(g[0], "ok", real.metrics), (g[1], "ok", NEW), (g[2], "nan", {"peak_memory_bytes": 9 * GIB})],
        [(g[3], "ok", OLD), (g[1], "ok", {**NEW, "cached_from": 1}), (g[4], "filtered", {"params": 9})],
        [(g[5], "ok", UNACCOUNTED)],
    ]
    for number, rows in enumerate(generations):
        store.commit_generation(
            run_id,
            number,
            genomes=[GenomeIn(x.id, x.to_yaml(), x.sequence_view()) for x, _, _ in rows],
            individuals=[IndividualIn(slot, x.id, number) for slot, (x, _, _) in enumerate(rows)],
            evaluations=[
                EvaluationIn(x.id, "mqar", 2, number, status, metrics, individual=by_slot(slot))
                for slot, (x, status, metrics) in enumerate(rows)
            ],
            members=[by_slot(slot) for slot in range(len(rows))],
        )
    yield store, run_id, real.metrics
    store.close()


def test_the_ledger_sums_the_rows_it_was_given(stored):
    store, run_id, real = stored
    ledger = read_ledger(StoredRun.open(store, run_id))
    assert ledger["measured"] is True
    first, second, third = ledger["generations"]
    assert [r["generation"] for r in ledger["generations"]] == [0, 1, 2]

    # 0: the real evaluation and the GPU row; the failure trained nothing counted
    assert first["trained"] == 2
    assert first["train_tokens"] == real["train_tokens"] + 1000
    assert first["train_flops"] == real["train_flops"] + 6_000_000
    assert first["train_seconds"] == pytest.approx(real["train_seconds"] + 2.0)
    compute = real["train_compute_seconds"] + 0.5
    assert first["train_compute_seconds"] == pytest.approx(compute)
    assert first["flops_per_s"] == pytest.approx((real["train_flops"] + 6_000_000) / compute)
    assert first["flops_per_s_over"] == "train_compute_seconds"
    assert first["peak_memory_bytes"] == 2 * GIB  # the GPU row's, not the failure's 9 GiB
    assert first["peak_memory_kinds"] == ["cuda_allocated", "rss"]
    assert first["peak_memory_scope"] == real["peak_memory_scope"]
    assert first["without"] == {}

    # 1: the old row alone (the cache hit and the filtered birth trained nothing)
    assert (second["trained"], second["train_tokens"], second["train_flops"]) == (1, 2000, 12_000_000)
    assert second["train_compute_seconds"] is None and second["peak_memory_bytes"] is None
    assert second["flops_per_s"] == pytest.approx(12_000_000 / 4.0)
    assert second["flops_per_s_over"] == "train_seconds"  # no compute seconds: over the wall
    assert second["without"] == {"train_compute_seconds": 1, "peak_memory_bytes": 1}

    # 2: tokens but no FLOPs, so no FLOP/s; a lifetime peak says so
    assert third["train_flops"] is None and third["flops_per_s"] is None
    assert third["peak_memory_bytes"] == 200 * MIB and third["peak_memory_scope"] == "process"

    total = ledger["total"]
    assert total["generation"] is None and total["trained"] == 4
    assert total["train_tokens"] == real["train_tokens"] + 1000 + 2000 + 500
    assert total["train_flops"] == real["train_flops"] + 6_000_000 + 12_000_000
    assert total["train_seconds"] == pytest.approx(real["train_seconds"] + 2.0 + 4.0 + 1.0)
    # FLOP/s over the rows recording both FLOPs and compute seconds (the old row has none)
    assert total["flops_per_s"] == pytest.approx((real["train_flops"] + 6_000_000) / compute)
    assert total["peak_memory_bytes"] == 2 * GIB and total["peak_memory_scope"] == "process"
    assert total["without"] == {"train_compute_seconds": 1, "peak_memory_bytes": 1, "train_flops": 1}


def test_cells_show_what_the_rows_have(stored):
    store, run_id, _ = stored
    ledger = read_ledger(StoredRun.open(store, run_id))
    first, second, third = (ledger_cells(r) for r in ledger["generations"])
    assert first[:4] == ("0", "2", f"{(ledger['generations'][0]['train_tokens'] / 1e3):.3g}k", first[3])
    assert first[6] == "2 GiB cuda_allocated+rss"
    assert second[5] == "3M (wall)" and second[6] == "—"
    assert third[3] == "—" and third[5] == "—" and third[6] == "200 MiB rss (process)"
    assert ledger_cells(ledger["total"])[0] == "total"


def test_the_report_carries_the_ledger_in_json_text_and_html(stored, capsys, tmp_path):
    store, run_id, _ = stored
    ledger = read_ledger(StoredRun.open(store, run_id))
    assert run_report(store, run_id)["ledger"] == ledger
    assert main(["report", "--store", store.url, "--run", run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ledger"] == json.loads(json.dumps(ledger))
    assert main(["report", "--store", store.url, "--run", run_id]) == 0
    text = capsys.readouterr().out
    assert "training ledger" in text and "peak memory" in text and "3M (wall)" in text
    assert "200 MiB" in text and "(process)" in text  # the console may wrap a cell
    page = tmp_path / "report.html"
    assert main(["report", "--store", store.url, "--run", run_id, "--html", str(page)]) == 0
    html = page.read_text()
    assert 'id="ledger"' in html and "<td>200 MiB rss (process)</td>" in html
    assert "<th>FLOP/s</th>" in html and "<td>total</td>" in html


def test_the_ledger_of_stored_rows_loads_no_torch_or_scipy(stored):
    """The ledger reads stored metrics only (opening a DOGMA run's config may load torch for
    its pinned tasks: `StoredRun`; the ledger adds nothing to that)."""
    store, run_id, _ = stored
    probe = (
        "import json, sys\n"
        "from dogma_evolve.store import Store\n"
        "from dogma_evolve.evolution.report.ledger import ledger_cells, run_ledger\n"
        f"with Store({store.url!r}) as store:\n"
        f"    ledger = run_ledger(store.individuals({run_id!r}), 'mqar', False, 3)\n"
        "ledger_cells(ledger['total'])\n"
        "print(json.dumps([ledger['total']['trained'], 'torch' in sys.modules, 'scipy' in sys.modules]))"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [4, False, False]
