"""`run --ladder` on a small real ladder: eight tiny designs, each trained for real (in this
process) at its compact ladder's 4 sizes on the English corpus, fitted, ranked, and the
search → ladder rank correlation stored with its bootstrap interval and a verdict.

Each design is one sequence mixer alone (no channel mixer beside it): a compact ladder spans
1.5 decades above the design's smallest model whatever that is, so a smaller design gives a
ladder of smaller models and fewer steps (at one token per parameter) at the same span; with
an MLP beside each mixer the ladder trained about 6 times the parameter-steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from dogma_evolve.evaluation.table import InProcessPool
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.scale.ladder_report import ladder_summary
from dogma_evolve.evolution.scale.search_ladder import run_ladder
from dogma_evolve.genome import Genome
from dogma_evolve.store import IndividualIn, Store, by_slot

KINDS = ("attention", "mamba2", "gru", "retention", "linear_attention", "conv", "s4", "mla")  # fast on CPU


def _genome(kind: str) -> Genome:
    return Genome.from_dict(
        {
            "regions": [
                {
                    "id": "s0",
                    "type": "structural",
                    "settings": {"d_model": 32, "positions": "rope", "vocab": 257, "max_len": 64},
                },
                {"id": "c1", "type": "coding", "bases": [{"base": "T", "kind": kind}]},
            ]
        }
    )


class _Elite:
    def __init__(self, id: int, genome: Genome, quality: float) -> None:
        self.id, self.genome, self.status, self.violation = id, genome, "ok", None
        self.metrics = {"quality": quality, "params": 1}  # one params: every elite on the front's tie


@pytest.mark.slow
def test_a_real_ladder_gives_the_search_to_ladder_correlation_with_its_interval(tmp_path: Path) -> None:
    config = RunConfig(
        population=8,
        generations=0,
        task="compression",
        ladder=True,
        ladder_elites=8,
        ladder_tokens_per_param=1.0,
        select_by="ladder",
    )
    genomes = [_genome(k) for k in KINDS]
    with Store(f"sqlite:///{tmp_path / 'real.db'}") as store:
        run = store.create_run(config.to_dict(), seed=0, task="compression")
        store.commit_generation(
            run,
            0,
            genomes=[(g.id, g.to_yaml(), g.sequence_view()) for g in genomes],
            individuals=[IndividualIn(i, g.id, 1, None, {}) for i, g in enumerate(genomes)],
            members=[by_slot(i) for i in range(len(genomes))],
        )
        ids = [r.id for r in store.individuals(run)]
        # the search's order: the kinds as listed, best first
        population = [_Elite(i, g, 0.9 - 0.1 * k) for k, (i, g) in enumerate(zip(ids, genomes, strict=True))]
        rows = run_ladder(store, run, 0, population, config, InProcessPool())
        summary = ladder_summary(store, run)
    print(summary["ladder_verdict"])  # shown with -s
    for line in (
        f"{r['rank']} {r['individual_id']} {r['quality']:.1f} {r['loss']} {r['note']}" for r in rows
    ):
        print(line)
    assert len(rows) == 8
    fitted = [r for r in rows if r["loss"] is not None]
    assert len(fitted) >= 6, [r["note"] for r in rows if r["loss"] is None]
    search = next(t for t in summary["ladder_transfer"] if t["lower_fidelity"] == "search")
    assert search["n"] == len(fitted)
    assert search["spearman_low"] is not None and search["spearman_high"] is not None
    assert search["spearman_low"] <= search["spearman"] <= search["spearman_high"]
    assert summary["ladder_verdict"].startswith("the search's order")
    assert "[" in summary["ladder_verdict"]  # the interval is in the sentence
    assert summary["ladder_regime"].startswith("scaling law along D = 1·N")
