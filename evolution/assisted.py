"""Surrogate-assisted variation: breed K times the children, train the ones worth training.

`choose(bred, n, ...)` fits `evolution.surrogate.Surrogate` on every genome the store
holds a successful full-fidelity evaluation of for the run's task (any run: memory across
runs), ranks the bred children by predicted quality and keeps `n`: the best
`n - round(explore * n)` and an exploration share, the predicted best of a `space_sample`, random
genomes of the whole space, when one is given (`RunConfig.explore_pool`), else bred children
drawn at random. The surrogate only ever changes *which* children are trained: each is then
evaluated exactly as without it, under the same natural key and seed, so no stored result
depends on it (tests/evolution prove this).

With fewer than `MIN_ROWS` stored results (a cold store, generation 1 of a first run) the
children are drawn at random from the bred ones (and the exploration share is the sample's
first genomes, random already), which is what breeding n would give.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Sequence
from typing import Any

from dogma_evolve.evolution.evaluating import quality_of
from dogma_evolve.evolution.spaces.contract import SearchSpace
from dogma_evolve.evolution.surrogate import MIN_ROWS, Surrogate, select_children
from dogma_evolve.store import Store

TRAINING_ROWS = 2000  # newest results the surrogate learns from (fitting stays well under 1 s)
# features of a stored genome by its canonical text, per space instance (parsing is the cost)
_FEATURES: weakref.WeakKeyDictionary[Any, dict[str, dict[str, float]]] = weakref.WeakKeyDictionary()


def _features_of_text(space: SearchSpace, text: str) -> dict[str, float]:
    cache = _FEATURES.setdefault(space, {})
    if len(cache) > 4 * TRAINING_ROWS:
        cache.clear()
    if text not in cache:
        cache[text] = space.features(space.parse(text))
    return cache[text]


def scored_by_genome(
    store: Store, task: str, fidelity: int, limit: int = TRAINING_ROWS
) -> dict[str, tuple[str, list[float]]]:
    """genome id -> (its stored YAML, the quality of each of its newest `limit` successful
    evaluations of `task` at `fidelity`, any run, cache copies left out)."""
    by_genome: dict[str, tuple[str, list[float]]] = {}
    for genome_id, text, metrics in store.scored_genomes(task, fidelity, limit):
        by_genome.setdefault(genome_id, (text, []))[1].append(quality_of(metrics or {}))
    return by_genome


def training_rows(
    store: Store, space: SearchSpace, task: str, fidelity: int
) -> list[tuple[dict[str, float], float]]:
    """(features, quality) of each genome with a stored full-fidelity result of `task`; a
    genome evaluated under several seeds counts once, at its mean quality."""
    by_genome = scored_by_genome(store, task, fidelity)
    return [(_features_of_text(space, text), sum(qs) / len(qs)) for text, qs in by_genome.values()]


def choose(
    bred: Sequence[Any],
    n: int,
    *,
    space: SearchSpace,
    store: Store,
    task: str,
    fidelity: int,
    explore: float,
    rng: random.Random,
    seed: int,
    space_sample: Sequence[Any] = (),
) -> tuple[list[int], list[float | None]]:
    """Indices into `bred + space_sample` of the `n` genomes to train and each one's predicted
    quality (None for a random pick without a fitted surrogate)."""
    if len(bred) <= n and not space_sample:
        return list(range(len(bred))), [None] * len(bred)
    rows = training_rows(store, space, task, fidelity)
    surrogate = Surrogate(seed) if len(rows) >= MIN_ROWS else None
    if surrogate is not None:
        surrogate.fit(rows)
    features = [space.features(g) for g in [*bred, *space_sample]]
    chosen = select_children(
        features[: len(bred)], n, explore, rng, surrogate, space_sample=features[len(bred) :]
    )
    if surrogate is None:
        return chosen, [None] * len(chosen)
    mean, _ = surrogate.predict([features[i] for i in chosen])
    return chosen, [float(m) for m in mean]


__all__ = ["MIN_ROWS", "TRAINING_ROWS", "choose", "scored_by_genome", "training_rows"]
