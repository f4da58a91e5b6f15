"""A surrogate model of quality, and the surrogate-assisted choice of which children to train.

The surrogate is a random forest (scikit-learn) over the flat feature dicts of
`evolution.spaces.dogma.features`: `DictVectorizer` turns the dicts into a matrix (a key never seen in
training is ignored at prediction, a key missing from a row reads as 0), and the forest
gives a mean prediction and a spread, the standard deviation of its trees' predictions
(each tree is fitted on a bootstrap sample, so the spread is larger far from the data).

The forest learns a floored quality: values below the `floor_quantile` (0.25) quantile of
the training rows are raised to it. The surrogate's only job is to rank promising
children; without the floor the squared-error splits are spent separating the disastrous
from the merely bad (on NAS-Bench-201, cells that compute nothing score 10 %, tens of
points below the rest), and the ranking among the good children, the one that matters,
gets fewer splits. Measured on 540 recorded choices of surrogate runs on NAS-Bench-201
(pick 4 of about 50 bred children): the chosen children were among the table's best
(true accuracy >= 91.4) 13.0 % of the time with the floor, 10.7 % without it (random
choice 3.1 %, an oracle 30.6 %), and end to end the floor with 50 trees was +0.024 ±
0.020 points over no floor with 100 trees (`benchmarks/search_nb201.py`'s protocol, 100
paired runs, population 10, first generation 30). 50 trees rank as well as 100 and fit in
half the time. The predictions are of the floored quality: below the floor they only
say "poor".

Quality is "higher is better" (an accuracy). Everything is deterministic: the forest's
`random_state` is derived from the `seed` argument, it runs on one thread (`n_jobs=1`),
and `select_children` draws only from the `random.Random` it is given.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dogma_evolve.evaluation.tasks import derive_seed

Features = Mapping[str, float]
MIN_ROWS = 8
N_ESTIMATORS = 50
FLOOR_QUANTILE = 0.25  # qualities below this quantile of the training rows are raised to it


class Surrogate:
    """Mean and spread of quality as a function of the features.

    `Surrogate(seed).fit(rows)` with rows `(features, quality)`; `predict(features_list)`
    gives `(mean, std)` arrays. Fitting refuses (ValueError) fewer than `min_rows` rows or a
    non-finite value: the caller then goes on without a surrogate."""

    def __init__(
        self,
        seed: int = 0,
        n_estimators: int = N_ESTIMATORS,
        min_rows: int = MIN_ROWS,
        min_samples_leaf: int = 1,
        floor_quantile: float = FLOOR_QUANTILE,
    ) -> None:
        if min_rows < 2:
            raise ValueError(f"min_rows must be at least 2, got {min_rows}")
        if not 0.0 <= floor_quantile < 1.0:
            raise ValueError(f"floor_quantile must lie in [0, 1), got {floor_quantile}")
        self.seed = seed
        self.n_estimators = n_estimators
        self.min_rows = min_rows
        self.min_samples_leaf = min_samples_leaf
        self.floor_quantile = floor_quantile
        self.n_rows = 0
        self._vectorizer: Any = None  # sklearn's DictVectorizer once fitted (sklearn is untyped)
        self._forest: Any = None  # sklearn's RandomForestRegressor once fitted

    @property
    def fitted(self) -> bool:
        return self._forest is not None

    def fit(self, rows: Sequence[tuple[Features, float]]) -> Surrogate:
        """Fit on `(features, quality)` rows (replacing any earlier fit); returns self."""
        if len(rows) < self.min_rows:
            raise ValueError(f"the surrogate needs at least {self.min_rows} rows, got {len(rows)}")
        features = [dict(f) for f, _ in rows]
        y = np.asarray([q for _, q in rows], dtype=float)
        if not np.all(np.isfinite(y)):
            raise ValueError("the surrogate's qualities must be finite")
        if self.floor_quantile > 0:
            y = np.maximum(y, np.quantile(y, self.floor_quantile))
        # imported here: scikit-learn takes a second to import, and only a surrogate run needs it
        from sklearn.ensemble import RandomForestRegressor
        from sklearn.feature_extraction import DictVectorizer

        vectorizer = DictVectorizer(sparse=False, sort=True)
        x = np.asarray(vectorizer.fit_transform(features), dtype=float)
        if not np.all(np.isfinite(x)):
            raise ValueError("the surrogate's features must be finite")
        forest = RandomForestRegressor(
            n_estimators=self.n_estimators,
            min_samples_leaf=self.min_samples_leaf,
            max_features=1.0,
            bootstrap=True,
            random_state=derive_seed("surrogate", self.seed) % (1 << 32),
            n_jobs=1,
        )
        forest.fit(x, y)
        self._vectorizer, self._forest, self.n_rows = vectorizer, forest, len(rows)
        return self

    def predict(self, features_list: Sequence[Features]) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) of the predicted quality of each feature dict: the forest's mean and
        the standard deviation of its trees' predictions."""
        if self._vectorizer is None or self._forest is None:
            raise RuntimeError("the surrogate is not fitted")
        if not features_list:
            return np.zeros(0), np.zeros(0)
        x = np.asarray(self._vectorizer.transform([dict(f) for f in features_list]), dtype=float)
        per_tree = np.stack([tree.predict(x) for tree in self._forest.estimators_])
        return per_tree.mean(axis=0), per_tree.std(axis=0)


def select_children(
    candidates: Sequence[Features],
    k: int,
    explore_fraction: float,
    rng: random.Random,
    surrogate: Surrogate | None,
    kappa: float = 0.0,
    space_sample: Sequence[Features] = (),
) -> list[int]:
    """Indices of the `k` genomes to train, without repeats, of the `n` bred `candidates`
    (indices 0..n-1) and, when given, a `space_sample` of random genomes of the whole space
    (indices n..n+m-1).

    Exploitation: the top `k - round(explore_fraction * k)` candidates by the acquisition
    `mean + kappa * std` of the surrogate's prediction (upper confidence bound; ties go to
    the lower index). Exploration, the other `round(explore_fraction * k)` (Python's `round`
    rounds halves to even: round(0.5 * 5) = 2):

    - without a sample, drawn uniformly at random, without replacement, from the candidates
      not already chosen;
    - with a sample, its top ones by the same acquisition: the surrogate's pick from the whole
      space, so that a run whose neighbourhoods are poor still tries where the forest expects
      better (on NAS-Bench-201 the runs that never left poor basins were half the loss,
      docs/results.md). Places the candidates cannot fill go to the sample's next best.

    `kappa` defaults to 0 (rank by the predicted mean): on NAS-Bench-201 the forest's spread
    is largest where its trees disagree whether a cell computes anything at all, and a bonus
    for it (kappa = 1) picked children no better than random ones, while the mean alone
    picked near the best; exploration comes from the random share or the sample instead.

    With `surrogate=None` (or an unfitted one) the candidates' share is drawn at random and
    the sample's share is its first genomes (random already). Without a sample and with `k >= n`
    every index is returned. The result lists the exploited indices first (best first),
    then the explored ones (in draw order, or best first from a sample); for a given `rng`
    state it is deterministic, and `rng` is advanced only by the random draws."""
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    if not 0.0 <= explore_fraction <= 1.0:
        raise ValueError(f"explore_fraction must lie in [0, 1], got {explore_fraction}")
    n = len(candidates)
    if surrogate is not None and not surrogate.fitted:
        surrogate = None  # an unfitted one predicts nothing: as without one
    if space_sample:
        return _select_with_sample(candidates, space_sample, k, explore_fraction, rng, surrogate, kappa)
    if k >= n:
        return list(range(n))
    if surrogate is None:
        return rng.sample(range(n), k)
    n_explore = round(explore_fraction * k)
    order = _best_first(surrogate, candidates, kappa)
    chosen = order[: k - n_explore]
    taken = set(chosen)
    rest = [i for i in range(n) if i not in taken]
    return chosen + rng.sample(rest, n_explore)


def _best_first(surrogate: Surrogate, features: Sequence[Features], kappa: float) -> list[int]:
    """Indices of `features` by the acquisition `mean + kappa * std`, best first (ties: lower index)."""
    mean, std = surrogate.predict(features)
    acquisition = mean + kappa * std
    return sorted(range(len(features)), key=lambda i: (-float(acquisition[i]), i))


def _select_with_sample(
    candidates: Sequence[Features],
    space_sample: Sequence[Features],
    k: int,
    explore_fraction: float,
    rng: random.Random,
    surrogate: Surrogate | None,
    kappa: float,
) -> list[int]:
    """`select_children` with a sample of the space: the candidates' exploited share, then the
    sample's."""
    n, m = len(candidates), len(space_sample)
    n_global = min(round(explore_fraction * k), m)
    n_local = min(k - n_global, n)
    n_global = min(k - n_local, m)  # the sample fills what the candidates cannot
    if surrogate is None:
        local = rng.sample(range(n), n_local)
        explored = list(range(n_global))
    else:
        local = _best_first(surrogate, candidates, kappa)[:n_local] if n_local else []
        explored = _best_first(surrogate, space_sample, kappa)[:n_global] if n_global else []
    return local + [n + j for j in explored]
