"""Decoding a genome into a tree of frozen configs (what accounting reads and `build()` uses).

Expression rules:
- a promoter's `copies` stacks its coding region that many times, each copy with its own
  weights; `expressed: false` removes the region; `strength` scales its residual updates;
- every base of a coding region is one residual layer: pre-norm `x + g·s·f(norm(x))` or
  post-norm `norm(x + g·s·f(x))`, g the product of the region's incoming regulatory gates;
- a `shares` target reuses the source region's layers (copy i uses source copy i mod n);
- a `loop` edge adds α·(source region's output) to the target region's output (α learned,
  initialised at 0 so the skip starts closed);
- an `activates`/`represses` edge between two regulatory regions scales the target's
  signal by a gate read from the source's (already gated) signal: a regulatory cascade
  (`blocks.regulation`, "Hierarchies");
- an `allosteric` base in a regulatory region reads the outputs of the coding regions before
  it and gates those after it (top-k routing, `blocks.regulation.AllostericConfig`);
- `epigenetic` layers hand their marks to the next epigenetic layer of the same width,
  wherever it sits (`blocks.memory`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype.blocks.base import BlockConfig
from dogma_evolve.phenotype.blocks.norm import NormConfig
from dogma_evolve.phenotype.blocks.regulation import AllostericConfig, GateConfig
from dogma_evolve.phenotype.registry import REGISTRY

if TYPE_CHECKING:
    from dogma_evolve.phenotype.model import DogmaModel


@dataclass(frozen=True)
class LayerConfig:
    """One residual layer: a block with its norm."""

    block: BlockConfig
    norm: NormConfig


@dataclass(frozen=True)
class CodingStage:
    region_id: str
    layers: tuple[LayerConfig, ...]  # copies × bases, in order
    strength: float
    shares_from: str | None = None
    gates: tuple[tuple[str, bool], ...] = ()  # (regulatory region id, represses)
    loops_from: tuple[str, ...] = ()


@dataclass(frozen=True)
class RegulatoryStage:
    region_id: str
    gates: tuple[GateConfig, ...]
    routers: tuple[AllostericConfig, ...] = ()  # allosteric bases, wired to their regions
    regulated_by: tuple[tuple[str, bool], ...] = ()  # (upstream regulatory region id, represses)

    @property
    def signal_width(self) -> int:
        return sum(g.hidden for g in self.gates)


Stage = CodingStage | RegulatoryStage


@dataclass(frozen=True)
class ModelConfig:
    d_model: int
    vocab: int
    max_len: int
    positions: str
    norm: NormConfig
    norm_position: str
    tie_embeddings: bool
    stages: tuple[Stage, ...]

    def build(self) -> DogmaModel:
        from dogma_evolve.phenotype.model import DogmaModel  # here: model imports this module

        return DogmaModel(self)

    def stage(self, region_id: str) -> Stage:
        return next(s for s in self.stages if s.region_id == region_id)


def _block(kind: str) -> type[BlockConfig]:
    if kind not in REGISTRY:
        raise KeyError(f"gene kind {kind!r} has no block: no dogma_evolve.phenotype.blocks config names it")
    return REGISTRY[kind].config


def model_config(genome: Genome) -> ModelConfig:
    """The config tree of a (valid) genome."""
    s = genome.structural
    norm = NormConfig(s["norm"], s["d_model"], s["norm_eps"], s["bias"])
    stages: list[Stage] = []
    for region in genome.regions:
        if region.type == "regulatory":
            gates = tuple(
                GateConfig.from_gene(b.gene.as_dict, s) for b in region.bases if b.gene.kind == "gate"
            )
            routers = tuple(
                AllostericConfig.from_gene(b.gene.as_dict, s)
                for b in region.bases
                if b.gene.kind == "allosteric"
            )
            regulated_by = tuple(
                (e.source, e.kind == "represses")
                for e in genome.edges
                if e.target == region.id and e.kind in ("activates", "represses")
            )
            stages.append(RegulatoryStage(region.id, gates, routers, regulated_by))
        elif region.type == "coding":
            expression = genome.promoter_of(region.id)
            if not expression["expressed"]:
                continue
            layers = tuple(
                LayerConfig(_block(b.gene.kind).from_gene(b.gene.as_dict, s, copy), norm)
                for copy in range(expression["copies"])
                for b in region.bases
            )
            incoming = [e for e in genome.edges if e.target == region.id]
            stages.append(
                CodingStage(
                    region.id,
                    layers,
                    expression["strength"],
                    shares_from=next((e.source for e in incoming if e.kind == "shares"), None),
                    gates=tuple(
                        (e.source, e.kind == "represses")
                        for e in incoming
                        if e.kind in ("activates", "represses")
                    ),
                    loops_from=tuple(e.source for e in incoming if e.kind == "loop"),
                )
            )
    expressed = {st.region_id for st in stages}
    # Edges from a silenced region fall away with it (a silenced source has no output).
    stages = [
        CodingStage(
            st.region_id,
            st.layers,
            st.strength,
            st.shares_from if st.shares_from in expressed else None,
            tuple(g for g in st.gates if g[0] in expressed),
            tuple(src for src in st.loops_from if src in expressed),
        )
        if isinstance(st, CodingStage)
        else st
        for st in stages
    ]
    # Allosteric routers read the coding regions before them and regulate those after.
    coding = [st.region_id for st in stages if isinstance(st, CodingStage)]
    for i, st in enumerate(stages):
        if isinstance(st, RegulatoryStage) and st.routers:
            before = {x.region_id for x in stages[:i]}
            sources = tuple(r for r in coding if r in before)
            targets = tuple(r for r in coding if r not in before)
            stages[i] = replace(
                st, routers=tuple(replace(r, sources=sources, targets=targets) for r in st.routers)
            )
    return ModelConfig(
        s["d_model"],
        s["vocab"],
        s["max_len"],
        s["positions"],
        norm,
        s["norm_position"],
        s["tie_embeddings"],
        tuple(stages),
    )
