"""`benchmarks/discovery_text.py`'s comparison: losses read at matched sizes, the searched arm's
error over runs, the hand arm's best picked after the fact, the z of the difference."""

from __future__ import annotations

import math

import pytest

from benchmarks.discovery_text import HAND, at_size, compare, design_at


def test_a_loss_is_read_at_the_target_linear_in_log_n():
    params = [10_000, 20_000, 40_000, 80_000]
    losses = [3.0 - 0.1 * math.log(n) for n in params]  # exactly linear in ln N
    for target in (10_000, 15_000, 33_000, 80_000, 120_000):  # inside, on a rung, beyond the top
        assert at_size(params, losses, target) == pytest.approx(3.0 - 0.1 * math.log(target))
    assert at_size(params, [None, None, 2.0, None], 30_000) is None  # one rung cannot interpolate
    assert at_size(params, [2.4, None, 2.0, 1.9], 20_000) == pytest.approx(2.2)  # a missing rung


def design(loss_at: dict[int, float], seeds=(0.0, 0.02)) -> dict:
    """A trained ladder at the rungs of ``loss_at``; seed k adds ``seeds[k]``."""
    params = sorted(loss_at)
    return {
        "params": params,
        "by_seed": {str(k): [loss_at[n] + d for n in params] for k, d in enumerate(seeds)},
    }


def test_the_gap_is_searched_runs_against_the_best_hand_design_with_both_errors():
    rungs = [15_000, 120_000]
    designs = {
        "search-seed0": design({15_000: 2.30, 120_000: 1.90}),
        "search-seed1": design({15_000: 2.32, 120_000: 1.94}),
        "search-seed2": design({15_000: 2.34, 120_000: 1.98}),
        "llama": design({15_000: 2.40, 120_000: 2.10}),
        "mamba": design({15_000: 2.35, 120_000: 2.00}, seeds=(0.0, 0.04)),
        "gpt2": design({15_000: 2.50, 120_000: 2.20}),
    }
    assert set(designs) - {"search-seed0", "search-seed1", "search-seed2"} <= set(HAND)
    top = compare(designs, rungs)[-1]
    assert top["best_hand"] == "mamba"  # chosen after seeing the losses: the lowest at that size
    runs = [d + 0.01 for d in (1.90, 1.94, 1.98)]  # each run: the mean of its two seeds
    assert top["searched"] == pytest.approx(sum(runs) / 3)
    se_runs = 0.04 / math.sqrt(3)  # sd over runs 0.04, three runs
    se_hand = math.sqrt(2 * 0.02**2) / math.sqrt(2)  # mamba's two seeds: 2.00 and 2.04
    assert top["gap"] == pytest.approx(1.95 - 2.02)
    assert top["gap_se"] == pytest.approx(math.sqrt(se_runs**2 + se_hand**2))
    assert top["z"] == pytest.approx(0.07 / top["gap_se"])
    assert design_at(designs["mamba"], 120_000) == pytest.approx([2.00, 2.04])


def test_one_searched_run_is_no_comparison():
    designs = {"search-seed0": design({1: 2.0, 2: 1.9}), "llama": design({1: 2.1, 2: 2.0})}
    assert "refused" in compare(designs, [2])[0]
