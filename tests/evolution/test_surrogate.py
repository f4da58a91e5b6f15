"""The surrogate (evolution/surrogate.py) and the features it reads (evolution/features.py)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import pytest

from dogma_evolve.evaluation.transfer import spearman
from dogma_evolve.evolution.spaces.dogma.features import dogma_features
from dogma_evolve.evolution.spaces.dogma.seeds import scale_down
from dogma_evolve.evolution.spaces.nb201 import CELL_PATHS, EDGES, OPS, CellGenome, nb201_features
from dogma_evolve.evolution.surrogate import MIN_ROWS, Features, Surrogate, select_children
from dogma_evolve.genome import PRESETS, Genome, preset


# -- helpers --------------------------------------------------------------------------------
def synthetic_rows(n: int, seed: int) -> list[tuple[dict[str, float], float]]:
    """Rows of a known function of the features: two numeric inputs that matter, one that
    does not, and a categorical one-hot that shifts the quality."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        x0, x1, noise_feature = rng.uniform(0, 1, 3)
        cat = int(rng.integers(3))
        quality = 2.0 * x0 - 1.0 * x1**2 + 0.5 * cat + rng.normal(0, 0.05)
        features = {"x0": x0, "x1": x1, "unused": noise_feature, f"cat={cat}": 1.0}
        rows.append(({k: float(v) for k, v in features.items()}, float(quality)))
    return rows


class FixedSurrogate(Surrogate):
    """A surrogate whose prediction is read from the features: mean = q, std = s."""

    def __init__(self) -> None:
        super().__init__(seed=0)

    @property
    def fitted(self) -> bool:
        return True

    def predict(self, features_list: Sequence[Features]) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.array([f["q"] for f in features_list], dtype=float),
            np.array([f.get("s", 0.0) for f in features_list], dtype=float),
        )


def candidates(n: int, seed: int = 0) -> list[dict[str, float]]:
    rng = random.Random(seed)
    qs = rng.sample(range(1000), n)  # distinct: the top-k is unambiguous
    return [{"q": float(q), "s": 0.0} for q in qs]


# -- the surrogate --------------------------------------------------------------------------
def test_surrogate_learns_a_synthetic_function() -> None:
    train, test = synthetic_rows(120, seed=1), synthetic_rows(200, seed=2)
    mean, std = Surrogate(seed=0).fit(train).predict([f for f, _ in test])
    assert mean.shape == std.shape == (200,)
    assert np.all(std >= 0) and np.all(np.isfinite(mean))
    rho = spearman(mean, [q for _, q in test])
    assert rho > 0.7, rho


def test_surrogate_is_reproducible_for_a_seed() -> None:
    rows, test = synthetic_rows(40, seed=3), [f for f, _ in synthetic_rows(30, seed=4)]
    a = Surrogate(seed=7).fit(rows).predict(test)
    b = Surrogate(seed=7).fit(rows).predict(test)
    c = Surrogate(seed=8).fit(rows).predict(test)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])  # another seed, other bootstrap samples


def test_surrogate_refuses_too_few_rows_and_bad_values() -> None:
    rows = synthetic_rows(MIN_ROWS, seed=5)
    with pytest.raises(ValueError, match="at least"):
        Surrogate().fit(rows[:-1])
    assert Surrogate().fit(rows).fitted
    with pytest.raises(ValueError, match="finite"):
        Surrogate().fit([*rows[:-1], (rows[-1][0], math.nan)])
    with pytest.raises(ValueError, match="finite"):
        Surrogate().fit([*rows[:-1], ({"x0": math.inf}, 1.0)])
    with pytest.raises(RuntimeError):
        Surrogate().predict([rows[0][0]])


def test_surrogate_ignores_unseen_and_missing_keys() -> None:
    s = Surrogate(seed=0).fit(synthetic_rows(30, seed=6))
    mean, _ = s.predict([{"x0": 0.5, "never_seen": 3.0}, {}])
    assert mean.shape == (2,) and np.all(np.isfinite(mean))
    assert s.predict([])[0].shape == (0,)


# -- select_children ------------------------------------------------------------------------
@pytest.mark.parametrize(("k", "fraction", "explore"), [(8, 0.25, 2), (10, 0.0, 0), (5, 0.5, 2), (6, 1.0, 6)])
def test_select_children_exploits_then_explores(k: int, fraction: float, explore: int) -> None:
    cands = candidates(40)
    chosen = select_children(cands, k, fraction, random.Random(0), FixedSurrogate())
    assert len(chosen) == k and len(set(chosen)) == k
    assert all(0 <= i < len(cands) for i in chosen)
    best_first = sorted(range(len(cands)), key=lambda i: -cands[i]["q"])
    assert chosen[: k - explore] == best_first[: k - explore]
    assert not set(chosen[k - explore :]) & set(best_first[: k - explore])


def test_select_children_explores_with_the_samples_predicted_best() -> None:
    """With a sample of random genomes of the space, the exploration share is the sample's top
    by prediction (indices after the candidates'), never a random bred child, and no draw is made."""
    cands, sample = candidates(40, seed=1), candidates(30, seed=2)
    rng = random.Random(5)
    state = rng.getstate()
    chosen = select_children(cands, 5, 0.4, rng, FixedSurrogate(), space_sample=sample)
    assert rng.getstate() == state  # a fitted surrogate draws nothing
    best_cands = sorted(range(40), key=lambda i: -cands[i]["q"])
    best_sample = sorted(range(30), key=lambda j: -sample[j]["q"])
    assert chosen == best_cands[:3] + [40 + j for j in best_sample[:2]]
    # a sample better than every candidate still gets only its share...
    rich = [{"q": 10_000.0 + q["q"]} for q in sample]
    assert sum(i >= 40 for i in select_children(cands, 5, 0.4, rng, FixedSurrogate(), space_sample=rich)) == 2
    # ...and fills the places the candidates cannot
    few = select_children(cands[:2], 5, 0.4, rng, FixedSurrogate(), space_sample=sample)
    assert sorted(few[:2]) == [0, 1] and few[2:] == [2 + j for j in best_sample[:3]]
    assert select_children([], 3, 0.4, rng, FixedSurrogate(), space_sample=sample) == [
        j for j in best_sample[:3]
    ]
    # share 0: the sample is never used; a sample smaller than its share gives what it has
    assert select_children(cands, 5, 0.0, rng, FixedSurrogate(), space_sample=sample) == best_cands[:5]
    assert select_children(cands, 5, 0.6, rng, FixedSurrogate(), space_sample=sample[:1]) == best_cands[
        :4
    ] + [40]


def test_select_children_without_a_fitted_surrogate_takes_the_samples_first() -> None:
    """Cold (no surrogate): the candidates' share at random, the sample's share its first
    genomes (random already); the same for an rng state."""
    cands, sample = candidates(20), candidates(10, seed=3)
    chosen = select_children(cands, 5, 0.4, random.Random(1), None, space_sample=sample)
    assert chosen[3:] == [20, 21] and len(set(chosen[:3])) == 3 and all(i < 20 for i in chosen[:3])
    assert chosen == select_children(
        cands, 5, 0.4, random.Random(1), Surrogate(), space_sample=sample
    )  # unfitted


def test_select_children_is_deterministic_for_an_rng_and_random_across_them() -> None:
    cands = candidates(40)
    runs = [select_children(cands, 8, 0.5, random.Random(seed), FixedSurrogate()) for seed in range(10)]
    again = [select_children(cands, 8, 0.5, random.Random(seed), FixedSurrogate()) for seed in range(10)]
    assert runs == again
    assert len({tuple(r[4:]) for r in runs}) > 5  # the exploration share really is drawn
    assert len({tuple(r[:4]) for r in runs}) == 1  # the exploited share is not


def test_select_children_acquisition_adds_kappa_times_std() -> None:
    cands = [{"q": 1.0, "s": 0.0}, {"q": 0.9, "s": 1.0}, {"q": 0.0, "s": 0.0}]
    assert select_children(cands, 1, 0.0, random.Random(0), FixedSurrogate(), kappa=0.0) == [0]
    assert select_children(cands, 1, 0.0, random.Random(0), FixedSurrogate(), kappa=1.0) == [1]


def test_select_children_edge_cases() -> None:
    cands = candidates(6)
    assert select_children(cands, 6, 0.3, random.Random(0), FixedSurrogate()) == list(range(6))
    assert select_children(cands, 9, 0.3, random.Random(0), FixedSurrogate()) == list(range(6))
    assert select_children(cands, 0, 0.3, random.Random(0), FixedSurrogate()) == []
    plain = select_children(cands, 3, 0.3, random.Random(1), None)
    assert len(set(plain)) == 3 and plain == select_children(cands, 3, 0.3, random.Random(1), None)
    assert select_children(cands, 3, 0.3, random.Random(1), Surrogate()) == plain  # unfitted
    with pytest.raises(ValueError):
        select_children(cands, 3, 1.5, random.Random(0), None)
    with pytest.raises(ValueError):
        select_children(cands, -1, 0.3, random.Random(0), None)


def test_select_children_with_a_fitted_surrogate_picks_better_ones() -> None:
    train, bred = synthetic_rows(100, seed=7), synthetic_rows(60, seed=8)
    s = Surrogate(seed=1).fit(train)
    chosen = select_children([f for f, _ in bred], 10, 0.0, random.Random(0), s)
    quality = np.array([q for _, q in bred])
    assert quality[chosen].mean() > np.quantile(quality, 0.75)


# -- rank correlation -----------------------------------------------------------------------
def test_spearman() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 9, 4]) == pytest.approx(0.5)  # monotone-invariant
    # ties share their average rank: Pearson of ranks (0.5, 0.5, 2, 3) and (0, 1, 2, 3)
    r = np.array([0.5, 0.5, 2, 3]) - 1.5
    expected = float(r @ (np.arange(4) - 1.5)) / math.sqrt(float(r @ r) * 5.0)
    assert spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(expected)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(spearman([1], [1]))
    with pytest.raises(ValueError):
        spearman([1, 2], [1, 2, 3])
    # against scipy's own implementation, ties included
    from scipy import stats

    rng = np.random.default_rng(7)
    for _ in range(20):
        x, y = rng.integers(0, 6, size=12), rng.normal(size=12)
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


# -- DOGMA features -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def preset_features() -> dict[str, dict[str, float]]:
    return {name: dogma_features(preset(name), seq_len=64) for name in PRESETS}


def test_dogma_features_of_every_preset_are_finite_with_one_key_set(
    preset_features: dict[str, dict[str, float]],
) -> None:
    key_sets = {frozenset(f) for f in preset_features.values()}
    assert len(key_sets) == 1
    for name, f in preset_features.items():
        for key, value in f.items():
            assert isinstance(key, str) and isinstance(value, float), (name, key)
            assert math.isfinite(value), (name, key, value)


def test_dogma_features_read_the_architecture(preset_features: dict[str, dict[str, float]]) -> None:
    gpt2 = preset_features["gpt2-small"]  # 12 x (attention, mlp), learned positions, LayerNorm
    assert gpt2["layers"] == 24 and gpt2["kind:attention"] == 12 and gpt2["kind:mlp"] == 12
    assert gpt2["mixers:sequence"] == 12 and gpt2["mixers:channel"] == 12
    assert gpt2["positions=learned"] == 1 and gpt2["positions=rope"] == 0
    assert gpt2["norm=layernorm"] == 1 and gpt2["d_model"] == 768
    assert gpt2["log_params"] == pytest.approx(math.log1p(124_439_808))
    assert gpt2["kind:mamba"] == 0 and gpt2["has_loop"] == 0
    assert preset_features["mamba-130m"]["kind:mamba"] == 24
    assert preset_features["mamba-130m"]["log_state_bytes_per_token"] == 0  # no KV cache
    assert preset_features["dogma"]["has_loop"] == 1 and preset_features["dogma"]["edges:activates"] == 1
    assert preset_features["mixtral-8x7b"]["moe_experts"] == 8


def test_dogma_features_tell_genomes_apart(preset_features: dict[str, dict[str, float]]) -> None:
    assert len({tuple(sorted(f.items())) for f in preset_features.values()}) == len(PRESETS)
    small = Genome.from_dict(scale_down(PRESETS["gpt2-small"](), 64, 2, {"vocab": 64, "max_len": 128}))
    f = dogma_features(small, seq_len=64)
    assert f != preset_features["gpt2-small"]
    assert f["layers"] == 4 and f["d_model"] == 64
    # the context length enters through the accounting: attention's work grows with it
    assert dogma_features(small, seq_len=128)["log_flops_per_token"] > f["log_flops_per_token"]


# -- NAS-Bench-201 features -----------------------------------------------------------------
def test_nb201_features_shape_and_one_hots() -> None:
    cell = CellGenome(("nor_conv_3x3", "none", "skip_connect", "none", "nor_conv_1x1", "nor_conv_3x3"))
    f = nb201_features(cell)
    one_hots = {k: v for k, v in f.items() if k.startswith("edge")}
    assert len(one_hots) == len(EDGES) * len(OPS) == 30
    for k in range(len(EDGES)):
        assert sum(f[f"edge{k}={op}"] for op in OPS) == 1.0
    assert f["edge0=nor_conv_3x3"] == 1 and f["edge1=none"] == 1
    assert [f[f"count:{op}"] for op in OPS] == [2, 1, 1, 2, 0]
    # live paths: 0->1->2->3 (conv3, skip, conv3) and 0->1->3 (conv3, conv1)
    assert f["connected"] == 1 and f["live_paths"] == 2 and f["max_path_convs"] == 2
    assert f["nonskip_path"] == 1
    assert set(nb201_features(CellGenome(("none",) * 6))) == set(f)


def test_nb201_connectivity_features() -> None:
    assert len(CELL_PATHS) == 4
    no_direct = nb201_features(CellGenome(("nor_conv_3x3",) * 3 + ("none",) + ("nor_conv_3x3",) * 2))
    assert no_direct["connected"] == 1 and no_direct["live_paths"] == 3  # all but 0->3
    cut = nb201_features(CellGenome(("none", "none", "nor_conv_3x3", "none", "nor_conv_3x3", "nor_conv_3x3")))
    assert cut["connected"] == 0 and cut["live_paths"] == 0 and cut["max_path_convs"] == 0
    assert cut["live:nor_conv_3x3"] == 0  # convolutions that see no input do not count
    skips = nb201_features(CellGenome(("skip_connect", "none", "none", "none", "skip_connect", "none")))
    assert skips["connected"] == 1 and skips["nonskip_path"] == 0
    full = nb201_features(CellGenome(("nor_conv_3x3",) * 6))
    assert full["live_paths"] == 4 and full["max_path_convs"] == 3 and full["live:nor_conv_3x3"] == 6
