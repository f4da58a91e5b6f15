"""Typed DOGMA genomes: bases A/T/C/G carrying genes, typed regions, a regulatory graph.

Three views of one genome: the canonical YAML (`Genome.to_yaml`, read with
`yaml.safe_load` only), the one-line sequence view (`Genome.sequence_view`), and the
content hash (`Genome.id`). This package imports nothing else of ours.

Gene kinds: `genome.schema` holds the machinery (`KindSpec`, `register_kind`, `KINDS`),
`genome.kinds` one module per built-in kind (its params, defaults and derivations),
registered when this package is imported. `genome.formats` says what a kind name means in
each document format (`dogma: 1`, `dogma: 2`): format 2 renamed two kinds and moved no id.
"""

from dogma_evolve.genome import kinds as _kinds  # noqa: F401  (registers the built-in gene kinds)
from dogma_evolve.genome.core import Base, Edge, Gene, Genome, Region
from dogma_evolve.genome.errors import GenomeError
from dogma_evolve.genome.presets import PRESETS, load_genome, preset
from dogma_evolve.genome.schema import (
    BASE_TYPES,
    EDGE_KINDS,
    KINDS,
    PROMOTER,
    REGION_TYPES,
    STRUCTURAL,
    KindSpec,
    ParamSpec,
    register_kind,
)

__all__ = [
    "BASE_TYPES",
    "EDGE_KINDS",
    "KINDS",
    "PRESETS",
    "PROMOTER",
    "REGION_TYPES",
    "STRUCTURAL",
    "Base",
    "Edge",
    "Gene",
    "Genome",
    "GenomeError",
    "KindSpec",
    "ParamSpec",
    "Region",
    "load_genome",
    "preset",
    "register_kind",
]
