"""The defaults and limits of `evolve scale`, as plain data: `evolution.scale.train` (which
loads torch) and the `evolve` parser (which must not: every command builds it) read them
here. The ladder's axes are `evolution.scale.ladder.AXES`."""

DEFAULT_TOKENS_PER_PARAM = 20.0  # per non-embedding parameter
# the KJV and Wikipedia articles (evaluation.tasks.corpus): real English, split by document
DEFAULT_TASK = "bytelm_en"
DEFAULT_SEEDS = 2
DEFAULT_TIMEOUT_S = 86_400.0  # per point: a ladder's largest rung may train for hours
MAX_SEEDS = 100

__all__ = ["DEFAULT_SEEDS", "DEFAULT_TASK", "DEFAULT_TIMEOUT_S", "DEFAULT_TOKENS_PER_PARAM", "MAX_SEEDS"]
