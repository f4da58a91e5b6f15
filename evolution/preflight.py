"""Checks `evolve run` makes before anything is created, beyond `RunConfig`'s own.

`RunConfig.__post_init__` checks every value alone; what needs the search space built
(a genome budget no genome fits under) is checked here, so that a bad option is a one-line
error before a store or a run exists, not a traceback in generation 0.
"""

from __future__ import annotations

import random

from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.spaces.contract import SearchSpace
from dogma_evolve.evolution.spaces.registry import SPACES


def check_feasible(config: RunConfig) -> SearchSpace:
    """Refuse a configuration under which the space cannot make one genome (e.g. a
    `--max-params` below the smallest genome of the task's vocabulary); the space it built,
    which the run then keeps (`StoredRun.create`)."""
    space: SearchSpace = SPACES[config.space].from_config(config)
    try:
        space.sample(random.Random(config.seed))
    except RuntimeError as e:  # evolution.spaces.dogma.seeds.random_genome: none found under the budget
        raise UsageError(f"--max-params {config.max_params:,} is too small for this task: {e}") from None
    return space
