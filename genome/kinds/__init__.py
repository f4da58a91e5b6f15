"""The built-in gene kinds: one module per kind, each the one place for that kind's gene.

A kind's module declares its `KindSpec` (schema.py): base types, allowed regions, params
with defaults and sanity bounds, and the derivation of params written as 0 ("derive"),
and registers it into `genome.schema.KINDS` at import. Everything here is plain data and
functions (no torch), so `import genome` can validate genomes without the phenotype.

The block a kind decodes to lives in `phenotype.blocks`: its config class names the kind
(`class FooConfig(BlockConfig, kind="foo", role="sequence")`) and has one field per param
of the spec, without defaults of its own (`BlockConfig.of` fills them from this spec).

`BUILT_IN` names the kinds' modules (module name = kind name) in registration order, the
order of `KINDS`; seeded searches draw kinds in that order, so a new kind is appended and a
renamed kind keeps its place (`genome.formats`: format 2's `tetra_reach` and `tetra` sit
where format 1's `tetra` and `tetra_mesh` did, so a seeded search draws what it drew).

A plugin's kinds (`phenotype.plugins`) register after these, through the same
`register_kind`, whenever the plugin is imported. A search draws from `drawable(enabled)`:
the built-ins, then only the plugin kinds its run enabled. So what else a process has
imported never changes a seeded run's draws.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping
from typing import Any

from dogma_evolve.genome.schema import KINDS, KindSpec, ParamSpec, as_recorded, register_kind

BUILT_IN = (
    "attention",
    "mamba",
    "mlp",
    "swiglu",
    "gate",
    "mla",
    "geglu",
    "moe",
    "conv",
    "s4",
    "lstm",
    "gru",
    "mamba2",
    "rglru",
    "linear_attention",
    "retention",
    "rwkv",
    "rwkv_channel",
    "dna",
    "strand_attention",
    "expression",
    "epigenetic",
    "tetra_reach",  # format 1's `tetra` (genome.formats), in its place
    "allosteric",
    "tetra",  # the volumetric mesh, format 1's `tetra_mesh`, in its place
)

for _module in BUILT_IN:
    importlib.import_module(f"{__name__}.{_module}")


_BUILT_IN = frozenset(BUILT_IN)


def drawable(enabled: Collection[str] = ()) -> list[str]:
    """The kinds a search draws from, in registration order: every built-in kind, then the
    registered kinds among ``enabled`` (a run's plugin kinds). A kind registered but not
    enabled is left out, so a seeded run without plugins draws what it drew before any."""
    return [kind for kind in KINDS if kind in _BUILT_IN or kind in enabled]


def is_built_in(kind: str) -> bool:
    """Whether ``kind`` ships with the project (not a plugin's)."""
    return kind in _BUILT_IN


def register_recorded(genes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Stand-in genes for a stored run's plugin kinds (``RunConfig.plugin_code``'s
    ``genes``: bases, regions, params as data, role, family), so a command that only reads
    the store validates and shows stored genomes without importing the plugin. A kind
    registered already is left as it is; the kinds registered are returned. A stand-in
    derives nothing (`genome.schema.as_recorded`) and has no block: nothing decodes it."""
    added = []
    for kind, gene in genes.items():
        if kind in KINDS:
            continue
        params = {
            name: ParamSpec(
                p["type"], p["default"], p["low"], p["high"], tuple(p["choices"]), p.get("doc", "")
            )
            for name, p in gene["params"].items()
        }
        register_kind(
            KindSpec(
                kind,
                tuple(gene["bases"]),
                params,
                tuple(gene["regions"]),
                doc=f"recorded plugin kind: {gene.get('doc', '')}",
                derive=as_recorded,
                role=gene.get("role"),
                family=gene.get("family"),
            )
        )
        added.append(kind)
    return added
