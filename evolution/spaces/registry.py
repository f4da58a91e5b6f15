"""The search spaces by name: `SPACES[name]` is the class for a run's `space` setting.

Every space follows `evolution.spaces.contract.SearchSpace`. `DogmaSpace` wraps the DOGMA
genome operators, repair and seeds (`evolution.spaces.dogma`); `NB201Space` adapts
NAS-Bench-201 (a table space evaluated by look-up). A new space is a class with those
members and one entry here; the engine and the command line take the names from here.
"""

from __future__ import annotations

from dogma_evolve.evolution.spaces.contract import SearchSpace
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.evolution.spaces.nb201 import NB201Space

SPACES: dict[str, type[SearchSpace]] = {"dogma": DogmaSpace, "nb201": NB201Space}

__all__ = ["SPACES"]
