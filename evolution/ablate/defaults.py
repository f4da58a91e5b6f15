"""The defaults and limits of `evolve ablate`, as plain data: `evolution.ablate.ablation` (which
loads torch) and the `evolve` parser (which must not: every command builds it) read them
here."""

from dogma_evolve.evaluation.options import MAX_SEEDS

DEFAULT_SEEDS = 3
DEFAULT_TIMEOUT_S = 3600.0  # per training: a loaded machine runs a 30-second candidate for minutes

__all__ = ["DEFAULT_SEEDS", "DEFAULT_TIMEOUT_S", "MAX_SEEDS"]
