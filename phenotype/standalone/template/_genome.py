"""What the copied block modules import from `genome`, for a package that has no genomes.

`evolve export` writes this file as `dogma_model/_genome.py` and points the copied modules'
`genome` imports here. The model is rebuilt from `config.json`, a tree of the block configs
themselves, so nothing derives params from a gene spec: `KINDS` admits every registered
block kind and answers no look-up; `BlockConfig.of` (which needs the specs) is unavailable.
A plugin's module (copied into `plugins/`) registers its gene on import: `register_kind`,
`KindSpec` and the param helpers accept what it passes and keep nothing.
"""

from __future__ import annotations

from typing import Any, NoReturn


class _Kinds(dict[str, Any]):
    """Every kind is known (so the block modules register), no spec can be read."""

    def __contains__(self, kind: object) -> bool:
        return True

    def __getitem__(self, kind: str) -> NoReturn:
        raise KeyError(f"gene kind {kind!r}: an exported package carries no gene specs")


KINDS: dict[str, Any] = _Kinds()
STRUCTURAL: dict[str, Any] = {}
ROLES = ("sequence", "channel", "regulatory")  # as genome.schema.ROLES


class KindSpec:
    """A gene spec, not kept: the package builds blocks from their configs alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kind = args[0] if args else kwargs.get("kind")


def register_kind(spec: Any) -> Any:
    """A plugin's gene registration: nothing to register in a package without genomes."""
    return spec


def integer(*args: Any, **kwargs: Any) -> None:
    """A param spec of a plugin's gene (not kept)."""


real = flag = choice = integer


class Genome:
    """Genomes are not part of an exported package (see the model's `config.json`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("an exported package cannot decode genomes: use dogma_model.load()")
