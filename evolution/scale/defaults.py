"""The defaults and limits of `evolve scale`, as plain data: `evolution.scale.train` (which
loads torch) and the `evolve` parser (which must not: every command builds it) read them
here. The ladder's axes are `evolution.scale.ladder.AXES`."""

from dogma_evolve.evaluation.options import MAX_SEEDS

DEFAULT_TOKENS_PER_PARAM = 20.0  # per non-embedding parameter
# `run --ladder`'s budget: every elite's 4 sizes (its smallest model up 1.5 decades) at 5
# tokens per parameter, a scaling law along D = 5·N within one pass of bytelm_en. Measured on
# the 2-core development machine under a load of about 7: the default run's best DOGMA genome
# (compact ladder 7.4k-261k non-embedding) trains at 4.5k-22k tokens/s, so its ladder takes
# about 54 min at 20 tokens per parameter and 14 min at 5 (about 7x less on idle cores, 2
# workers); --ladder-tokens-per-param 20 for the compute-optimal regime where time allows.
LADDER_TOKENS_PER_PARAM = 5.0
# the KJV and Wikipedia articles (evaluation.tasks.corpus): real English, split by document
DEFAULT_TASK = "bytelm_en"
DEFAULT_SEEDS = 2
# `evolve scale`'s default tokens per parameter is lowered until a probe projects the ladder
# within this many minutes here (evolution.scale.pace)
DEFAULT_MINUTES = 30.0
DEFAULT_TIMEOUT_S = 86_400.0  # per point: a ladder's largest rung may train for hours

__all__ = [
    "DEFAULT_MINUTES",
    "DEFAULT_SEEDS",
    "DEFAULT_TASK",
    "LADDER_TOKENS_PER_PARAM",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_TOKENS_PER_PARAM",
    "MAX_SEEDS",
]
