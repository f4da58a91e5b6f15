"""The options every command that trains outside a search shares (`evolve scale`, `evolve
ablate`, `evolve calibrate`): where it trains (`--workers`, `--ray-address`), how long one
training may take (`--timeout`) and `--quiet`, with their one-line checks; and how ablate and
calibrate train their one run (:func:`train_run`). No torch at import: the parser is built by
every `evolve` command."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from dogma_evolve.evolution.errors import UsageError

MAX_TIMEOUT_S = 30 * 86_400.0
MAX_WORKERS = 1024


def add_training_options(parser: argparse.ArgumentParser, default_timeout_s: float) -> None:
    parser.add_argument("--workers", type=int, metavar="W", help="parallel trainings (default: every core)")
    parser.add_argument("--ray-address", metavar="ADDR", help="join this Ray cluster instead of starting one")
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        default=default_timeout_s,
        help=f"seconds one training may take (default {default_timeout_s:g})",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def check_training_options(args: argparse.Namespace) -> None:
    """Refuse, in one line, a worker count or a timeout out of range."""
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise UsageError(f"--workers {args.workers}: from 1 to {MAX_WORKERS}")
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT_S):
        raise UsageError(f"--timeout {args.timeout:g}: more than 0 and at most {MAX_TIMEOUT_S:g} seconds")


def train_run(
    recorder: Any,
    todo: Sequence[Any],
    open_pool: Callable[[], AbstractContextManager[Any]],
    printer: Callable[[Any, int, int], None] | None,
) -> None:
    """Train ``recorder``'s points ``todo`` on the pool ``open_pool()`` opens, through the one
    training driver (`training_run.train_recorded`), ``printer(point, done, total)`` after each;
    a pool that cannot start (a ``--ray-address`` nothing answers at) is a `UsageError`."""
    from dogma_evolve.evolution.training_run import train_recorded  # torch, as the training

    try:
        train_recorded(
            [recorder],
            [(recorder, p) for p in todo],
            open_pool,
            None if printer is None else lambda _, p, done, total: printer(p, done, total),
        )
    except ConnectionError as e:
        raise UsageError(str(e)) from None


__all__ = ["MAX_TIMEOUT_S", "add_training_options", "check_training_options", "train_run"]
