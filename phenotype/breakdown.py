"""Per-component accounting of a genome: where its parameters, FLOPs and state go.

`breakdown(genome, seq_len, batch)` splits `phenotype.account`'s totals into components,
one per block family (every gene kind is one family, named as the DOGMA chapter names its
components where it has one; `tetra` and `tetra_reach` are both TetraMemory) plus the parts
outside the blocks:

    Token embedding   V·D                      Positions      max_len·D (learned only)
    Norms             every layer's norm, the final norm, the embeddings' norm
    Regulation edges  one (S + 1) gate per activates/represses edge (into a coding region or,
                      in a cascade, another regulator), 2·S FLOPs per token, S the source's
                      signal width
    Loops             one α per loop edge      Output head    V·D (0 when tied), 2·D·V FLOPs

Each component carries what the config tree says of its layers (nothing is built):
`params` (a `shares` target and a tied head add none), `active_params`, `flops_per_token`
at `seq_len` (shared layers count at every use), `state_bytes_per_token` /
`state_bytes_fixed` (2 bytes per element, as `account`), and `state_bytes`, the exact
inference state per sequence after `seq_len` tokens (sliding windows capped). The
components sum exactly to the totals of `account` and of the built module
(tests/phenotype/test_breakdown.py checks every preset and sampled genomes).

`instances` counts a component's layers (uses of a shared layer each count); the per-block
view divides a forward pass of `batch` × `seq_len` tokens among them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype.accounting import BYTES_PER_STATE_ELEMENT, Accounting, account
from dogma_evolve.phenotype.blocks.base import BlockConfig
from dogma_evolve.phenotype.blocks.regulation import edge_gate_params
from dogma_evolve.phenotype.config import CodingStage, ModelConfig, RegulatoryStage, model_config

EMBEDDING = "Token embedding"
POSITIONS = "Positions"
NORMS = "Norms"
EDGES = "Regulation edges"
LOOPS = "Loops"
HEAD = "Output head"
OUTSIDE_BLOCKS = (EMBEDDING, POSITIONS, NORMS, LOOPS, HEAD)
"""Components that are not layers of a block: left out of the per-block view."""

FAMILIES = {
    "tetra": "TetraMemory",
    "tetra_reach": "TetraMemory",
    "dna": "DNA compute",
    "gate": "Regulation gate",
    "strand_attention": "Strand attention",
    "expression": "Expression folder",
    "epigenetic": "Epigenetic memory",
    "allosteric": "Allosteric regulation",
}
"""Component names of the DOGMA kinds (the chapter's); any other kind is named by itself."""


def si(x: float) -> str:
    """3 significant figures with a k, M, B or T suffix: 74.2B."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def family(kind: str) -> str:
    """The component a block of gene kind `kind` belongs to."""
    return FAMILIES.get(kind, kind)


@dataclass
class Component:
    """One row of the breakdown. Counts are totals over the component's `instances`."""

    component: str
    kinds: list[str] = field(default_factory=list)  # gene kinds (or edge kinds) in it
    instances: int = 0
    params: int = 0
    active_params: int = 0
    flops_per_token: int = 0
    state_bytes_per_token: int = 0
    state_bytes_fixed: int = 0
    state_bytes: int = 0  # after seq_len tokens, per sequence

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class PerBlock:
    """FLOPs of one forward pass of (batch, seq_len) tokens, per layer of each component.

    `blocks` is the layer count every component shares when the genome is a stack of
    identical blocks (each component once per block), else None: then no per-block total
    exists and only the per-instance figures and the sum mean anything."""

    rows: tuple[tuple[str, int, float, int], ...]  # component, instances, per instance, all
    blocks: int | None

    @property
    def flops_all_blocks(self) -> int:
        return sum(r[3] for r in self.rows)

    @property
    def flops_per_block(self) -> float | None:
        return self.flops_all_blocks / self.blocks if self.blocks else None


@dataclass(frozen=True)
class Breakdown:
    components: tuple[Component, ...]
    totals: Accounting
    state_bytes: int  # the exact state after seq_len tokens, all components
    batch: int

    @property
    def seq_len(self) -> int:
        return self.totals.seq_len

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.component == name), None)

    def forward_flops(self, flops_per_token: int) -> int:
        """FLOPs of one forward pass over `batch` sequences of `seq_len` tokens."""
        return flops_per_token * self.batch * self.seq_len

    def per_block(self) -> PerBlock:
        rows = tuple(
            (c.component, c.instances, self.forward_flops(c.flops_per_token) / c.instances,
             self.forward_flops(c.flops_per_token))
            for c in self.components
            if c.component not in OUTSIDE_BLOCKS and c.instances and c.flops_per_token
        )  # fmt: skip
        counts = {r[1] for r in rows}
        return PerBlock(rows, counts.pop() if len(counts) == 1 else None)

    def to_dict(self) -> dict[str, object]:
        per_block = self.per_block()
        return {
            "seq_len": self.seq_len,
            "batch": self.batch,
            "components": [c.to_dict() for c in self.components],
            "totals": {**self.totals.to_dict(), "state_bytes": self.state_bytes},
            "per_block": {
                "batch": self.batch,
                "seq_len": self.seq_len,
                "blocks": per_block.blocks,
                "rows": [
                    {"component": n, "instances": k, "flops_per_instance": f, "flops": a}
                    for n, k, f, a in per_block.rows
                ],
                "flops_per_block": per_block.flops_per_block,
                "flops_all_blocks": per_block.flops_all_blocks,
                "flops_forward": self.forward_flops(self.totals.flops_per_token),
            },
        }


class _Rows:
    """Components in order: the embeddings, the block families as they first appear, then
    the norms, edges, loops and head."""

    def __init__(self) -> None:
        self.head: dict[str, Component] = {}
        self.blocks: dict[str, Component] = {}
        self.tail: dict[str, Component] = {}

    def get(self, name: str, kind: str | None = None) -> Component:
        group = (
            self.head
            if name in (EMBEDDING, POSITIONS)
            else self.tail
            if name in (NORMS, EDGES, LOOPS, HEAD)
            else self.blocks
        )
        row = group.setdefault(name, Component(name))
        if kind is not None and kind not in row.kinds:
            row.kinds.append(kind)
        return row

    def add_params(self, name: str, n: int, kind: str | None = None) -> None:
        row = self.get(name, kind)
        row.params += n
        row.active_params += n

    def add_block(self, block: BlockConfig, seq_len: int, owned: bool) -> None:
        row = self.get(family(block.kind), block.kind)
        row.instances += 1
        if owned:
            row.params += block.num_params()
            row.active_params += block.active_params()
        row.flops_per_token += block.flops_per_token(seq_len)
        row.state_bytes_per_token += BYTES_PER_STATE_ELEMENT * block.state_per_token()
        row.state_bytes_fixed += BYTES_PER_STATE_ELEMENT * block.state_fixed()
        row.state_bytes += BYTES_PER_STATE_ELEMENT * block.state_elements(seq_len)

    def ordered(self) -> tuple[Component, ...]:
        tail = [self.tail[n] for n in (NORMS, EDGES, LOOPS, HEAD) if n in self.tail]
        return (*self.head.values(), *self.blocks.values(), *tail)


def _add_edges(rows: _Rows, edges: tuple[tuple[str, bool], ...], width: dict[str, int]) -> None:
    """activates/represses edges (source region, represses) into a region whose sources'
    signal widths are `width`: an (S + 1)-parameter gate each, 2·S FLOPs per token."""
    for src, represses in edges:
        row = rows.get(EDGES, "represses" if represses else "activates")
        row.instances += 1
        rows.add_params(EDGES, edge_gate_params(width[src]))
        row.flops_per_token += 2 * width[src]


def breakdown(genome: Genome | ModelConfig, seq_len: int = 2048, batch: int = 4) -> Breakdown:
    """The components of a genome (or its config tree) at context `seq_len`; `batch` sets
    the forward pass of the per-block view. Mirrors `phenotype.account`'s walk."""
    if seq_len < 1 or batch < 1:
        raise ValueError(f"seq_len and batch must be positive, got {seq_len} and {batch}")
    cfg = model_config(genome) if isinstance(genome, Genome) else genome
    d, v = cfg.d_model, cfg.vocab
    rows = _Rows()
    rows.add_params(EMBEDDING, v * d)
    rows.get(EMBEDDING).instances = 1
    if cfg.positions == "learned":
        rows.add_params(POSITIONS, cfg.max_len * d)
        rows.get(POSITIONS).instances = 1
    width: dict[str, int] = {}
    for stage in cfg.stages:
        if isinstance(stage, RegulatoryStage):
            width[stage.region_id] = stage.signal_width
            for reg in (*stage.gates, *stage.routers):
                rows.add_block(reg, seq_len, owned=True)
            _add_edges(rows, stage.regulated_by, width)  # a cascade: regulators gating this one
            continue
        assert isinstance(stage, CodingStage)
        owned = stage.shares_from is None
        for layer in stage.layers:
            rows.add_block(layer.block, seq_len, owned)
            norms = rows.get(NORMS)
            norms.instances += 1
            if owned:
                rows.add_params(NORMS, layer.norm.num_params())
        _add_edges(rows, stage.gates, width)
        for _ in stage.loops_from:
            rows.get(LOOPS, "loop").instances += 1
            rows.add_params(LOOPS, 1)
    final_norms = (cfg.norm_position in ("pre", "pre_embed")) + (cfg.norm_position == "pre_embed")
    if final_norms:
        rows.get(NORMS).instances += final_norms
        rows.add_params(NORMS, final_norms * cfg.norm.num_params())
    head = rows.get(HEAD)
    head.instances = 1
    head.flops_per_token = 2 * d * v
    if not cfg.tie_embeddings:
        rows.add_params(HEAD, v * d)
    components = rows.ordered()
    return Breakdown(
        components,
        account(cfg, seq_len),
        sum(c.state_bytes for c in components),
        batch,
    )
