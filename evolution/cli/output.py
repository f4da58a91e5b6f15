"""What every `evolve` command shares: its consoles, its one JSON document, its store.

Human output goes to stdout through `out()` (no markup: sequence views are full of brackets
that rich would read as tags); progress and warnings to stderr through `err()`, so that
`--json` keeps stdout one document (`emit_json`). No torch here: the parser is built by
every command, `evolve genome validate` included.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from store import Store

DEFAULT_STORE = "sqlite:///evolve.db"
EXIT_USAGE = 2


def out() -> Console:
    """The console of a command's result (stdout)."""
    return Console(highlight=False, soft_wrap=True, markup=False)


def err() -> Console:
    """The console of progress lines and warnings (stderr)."""
    return Console(stderr=True, highlight=False, markup=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    """`data` as one indented JSON document on stdout (keys sorted; dates as strings)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def open_store(url: str, create: bool = False) -> Store:
    """The store at `url`; a reader (`create` False) refuses one that does not exist."""
    from store import Store  # imported on use: `genome validate` must answer fast

    return Store(url, create=create)


__all__ = ["DEFAULT_STORE", "EXIT_USAGE", "emit_json", "err", "open_store", "out"]
