"""Checks `evolve run` makes before anything is created, beyond `RunConfig`'s own.

`RunConfig.__post_init__` checks every value alone; what needs the search space built
(a genome budget no genome fits under) or a task's text read is checked here, so that a bad
option is a one-line error before a store or a run exists, not a traceback in generation 0
or a ladder refused after the search:

* ``check_feasible``: a ``--max-params`` under which the space makes no genome;
* ``check_text``: a training of the run that would pass over a task's finite training text
  (`bytelm`, ``text``) more than ``MAX_EPOCHS`` (4) times (`evolution.scale.regime`, the
  epoch cap `evolve scale` applies): the fitness's ``--steps`` (up to ``FLOPS_STEPS_CAP``
  times them under ``--budget flops``) on each task, and with ``--ladder`` the ladder's given
  ``--ladder-sizes`` at ``--ladder-tokens-per-param`` or its ``--ladder-tokens``, by the plan's
  own arithmetic on the targets (`scale.train.check_fed`). Each elite's compact default ladder
  depends on the design the search finds, so it is checked (and, over the cap, left unranked
  with the reason) after the search.
"""

from __future__ import annotations

import random

from dogma_evolve.evaluation.scaling import LadderError
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


def check_text(config: RunConfig, space: SearchSpace) -> None:
    """Refuse (``UsageError``, one line) a run whose fitness or ladder training would pass over
    a task's training text more than the epoch cap allows (module docstring)."""
    from dogma_evolve.evaluation.tasks import task_facts  # the tasks' code: torch
    from dogma_evolve.evolution.rules import FLOPS_STEPS_CAP
    from dogma_evolve.evolution.scale.regime import steps_cap, text_tokens_of
    from dogma_evolve.evolution.scale.search_ladder import LADDER_TEXT_HINT, LadderSettings
    from dogma_evolve.evolution.scale.train import check_fed

    try:
        if space.keeps_weights:  # it trains its candidates (a table space reads a table)
            steps = space.full_fidelity(config.steps)
            multiple = FLOPS_STEPS_CAP if config.budget == "flops" else 1
            for name in config.tasks:
                task = task_facts(name, config.task_code)
                per_step = task.train_batch_size * task.seq_len
                steps_cap("--steps", steps, per_step, text_tokens_of(task), name, multiple)
        if config.ladder:
            ladder = LadderSettings.of(config)
            sizes = ladder.sizes or ((0.0,) if ladder.tokens is not None else ())  # a fixed count: any size
            check_fed(ladder.task, sizes, [ladder.budget], ladder.setting, LADDER_TEXT_HINT)
    except LadderError as e:
        raise UsageError(str(e)) from None
