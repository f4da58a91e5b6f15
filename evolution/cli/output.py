"""What every `evolve` command shares: its consoles, its JSON (the one document of `--json`,
a value on one line inside a human line), its store.

Human output goes to stdout through `out()` (no markup, no emoji codes: sequence views are
full of brackets that rich would read as tags, change names of colons); progress and
warnings to stderr through `err()`, so that `--json` keeps stdout one document
(`emit_json`). No torch here: the parser is built by every command, `evolve genome
validate` included.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from dogma_evolve.store import Store

DEFAULT_STORE = "sqlite:///evolve.db"
EXIT_USAGE = 2


def out() -> Console:
    """The console of a command's result (stdout)."""
    return Console(highlight=False, soft_wrap=True, markup=False, emoji=False)


def err() -> Console:
    """The console of progress lines and warnings (stderr)."""
    return Console(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    """`data` as one indented JSON document on stdout (keys sorted; dates as strings)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def one_line(data: Any, sort_keys: bool = False) -> str:
    """`data` as JSON on one line, for a value inside a human line (a change, metrics)."""
    return json.dumps(data, sort_keys=sort_keys)


def open_store(url: str, create: bool = False) -> Store:
    """The store at `url`, for a command that writes to it (upgraded to the newest schema);
    without `create` one that does not exist is refused, not made."""
    from dogma_evolve.store import Store  # imported on use: `genome validate` must answer fast

    return Store(url, create=create)


def open_reader(url: str) -> Store:
    """The store at `url`, read-only, for a command that only reads: nothing is created,
    migrated or switched to WAL; a store at an older schema is refused with the command
    that upgrades it."""
    from dogma_evolve.store import Store

    return Store(url, readonly=True)


__all__ = ["DEFAULT_STORE", "EXIT_USAGE", "emit_json", "err", "one_line", "open_reader", "open_store", "out"]
