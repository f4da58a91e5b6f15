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
"""

from __future__ import annotations

import importlib

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
