"""`evolve run`'s options, read from `RunConfig`'s fields: each field with `cli` metadata
is an option, parsed by its annotation (int, float, str, a comma list for a tuple, a flag for
a bool)."""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import Field, fields
from types import UnionType
from typing import Any

from dogma_evolve.evolution.config import CliOption, RunConfig


def comma_list(text: str) -> tuple[str, ...]:
    return tuple(text.split(","))


def switch(text: str) -> bool:
    """The parser of a flag: the option takes no argument (`evolve run --ladder`)."""
    raise TypeError("a switch takes no argument")


def cli_fields() -> list[tuple[Field[Any], CliOption, Callable[[str], Any]]]:
    """The fields that are `evolve run` options: (field, option, argument parser)."""
    hints = typing.get_type_hints(RunConfig)
    return [(f, f.metadata["cli"], _parser(hints[f.name])) for f in fields(RunConfig) if "cli" in f.metadata]


def _parser(hint: Any) -> Callable[[str], Any]:
    """The argument parser for a field annotation: int, float, str, a comma list; an
    optional field parses as its type."""
    if isinstance(hint, UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is tuple:
        return comma_list
    if hint in (int, float, str):
        return typing.cast(Callable[[str], Any], hint)
    if hint is bool:
        return switch
    raise TypeError(f"no command-line parser for a {hint} field")


__all__ = ["cli_fields", "comma_list", "switch"]
