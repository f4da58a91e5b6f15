"""The `dogma-byte` breakdown beside the chapter's allocation study (`phenotype.chapter_table`).

Two tables: Table 15.2's parameters per component, and §15.6.5's FLOPs per block at
(B, T) = (4, 512). Each row holds the chapter's figure as printed, ours, and, where ours
does not print as the chapter's figure, a sentence saying by how much and why. The "why"
is computed where it can be: a dense layer costs 2 FLOPs per parameter per token, so a
block's parameters put a floor of 2·params·B·T under its forward FLOPs, and the chapter's
own formulas are evaluated at its stated shape. Ours are the built modules' figures
(`phenotype.breakdown`, checked against the modules and a FLOP counter in
tests/phenotype/test_breakdown.py); the chapter calls its design hypothetical.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TypeVar

from dogma_evolve.genome import Genome, preset
from dogma_evolve.phenotype.blocks.base import BlockConfig
from dogma_evolve.phenotype.blocks.expression import ExpressionConfig
from dogma_evolve.phenotype.blocks.regulation import GateConfig
from dogma_evolve.phenotype.blocks.strand import StrandAttentionConfig
from dogma_evolve.phenotype.breakdown import Breakdown, si
from dogma_evolve.phenotype.chapter_table import (
    ALL_BLOCKS_TOTAL,
    ALLOCATION,
    ALLOCATION_TOTAL,
    BATCH,
    BLOCKS,
    DNA_SHARE,
    PER_BLOCK_FLOPS,
    PER_BLOCK_TOTAL,
    SEQ_LEN,
    ChapterRow,
    formula_flops,
)
from dogma_evolve.phenotype.config import CodingStage, ModelConfig, RegulatoryStage, model_config

PRESET = "dogma-byte"
_C = TypeVar("_C", bound=BlockConfig)


def _why(line: int, cfg: ModelConfig) -> str:
    """Why a row of ours differs from the chapter's row at source `line`, beyond the computed
    figures: the design choices `genome.presets.dogma_byte` documents."""
    gate = _first(cfg, GateConfig).hidden
    folder = _first(cfg, ExpressionConfig).hidden
    return {
        332: "our TetraMemory (tetra) is three d x d projections shared by all its rounds, a "
        "decay per channel and a bias per scale; no form of it holds the chapter's share at d = 512",
        356: "the formula counts the face ops only, none of the q, v and output projections",
        357: f"the chapter's CRN term B x T x 64 x 32 is {si(BATCH * SEQ_LEN * 64 * 32)}; it counts the "
        "reaction network and the scans, not the projections into and out of the four paths, most of ours",
        358: f"our gate signal is {gate} wide to hold the chapter's parameters; at the formula's "
        f"width d it would hold {cfg.d_model * (cfg.d_model + 1) * BLOCKS / 1e6:.1f}M",
        359: "ours adds the q, k, v and output projections to the T x T scores and values",
        360: f"the formula's 4d^2 is an MLP of hidden width d; ours is {folder} wide to hold the "
        "chapter's parameters",
    }.get(line, "no reason recorded")


def _first(cfg: ModelConfig, kind: type[_C]) -> _C:
    """The first block of config class `kind` in the genome (coding or regulatory)."""
    for st in cfg.stages:
        blocks = (
            [layer.block for layer in st.layers] if isinstance(st, CodingStage) else [*st.gates, *st.routers]
        )
        for block in blocks:
            if isinstance(block, kind):
                return block
    raise LookupError(f"no {kind.__name__} in the genome")


@dataclass(frozen=True)
class Row:
    component: str
    line: int | None  # of the chapter's row; None where the chapter has none
    printed: str  # the chapter's figure as printed, "-" where it has none
    ours: float
    formula: float | None = None  # the chapter's formula at its shape (FLOP rows)
    sentence: str = ""  # by how much and why ours differs; "" when it prints the same

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def applies(genome: Genome) -> bool:
    """Whether `genome` is the dogma-byte preset (the comparison means nothing otherwise)."""
    return genome.id == preset(PRESET).id


def _m(x: float) -> str:
    return f"{x / 1e6:.2f}M"


def _b(x: float) -> str:
    return f"{x / 1e9:.2f}B"


def _sum(b: Breakdown, names: tuple[str, ...], key: str) -> int:
    return sum(int(getattr(c, key)) for c in b.components if c.component in names)


def _prints_as(row: ChapterRow, value: float) -> bool:
    return abs(value - row.value) <= row.precision


def allocation(b: Breakdown, cfg: ModelConfig) -> list[Row]:
    """Table 15.2 beside our parameters; then our components the table lacks, and the total."""
    rows = []
    for ch in ALLOCATION:
        ours = _sum(b, ch.ours, "params")
        sentence = ""
        if not _prints_as(ch, ours):
            sentence = (
                f"ours {_m(ours)} ({_m(ours / BLOCKS)} per block) against {ch.printed} "
                f"({_m(ch.value / BLOCKS)} per block), {ours / ch.value:.2f}x: {_why(ch.line, cfg)}"
            )
        rows.append(Row(ch.component, ch.line, ch.printed, ours, sentence=sentence))
    listed = {name for ch in ALLOCATION for name in ch.ours}
    extra = [c for c in b.components if c.component not in listed and c.params]
    for c in extra:
        rows.append(Row(c.component, None, "-", c.params, sentence="the chapter lists none"))
    total, chapter_sum = b.totals.params, sum(ch.value for ch in ALLOCATION)
    paired = list(zip(ALLOCATION, rows, strict=False))
    gaps = [f"{r.component} {(r.ours - ch.value) / 1e6:+.2f}M" for ch, r in paired if r.sentence]
    rounding = sum(r.ours - ch.value for ch, r in paired if not r.sentence)
    gaps.append(f"the rows that print as the chapter's {rounding / 1e6:+.2f}M")
    if extra:
        gaps.append(f"what the chapter lists none of {sum(c.params for c in extra) / 1e6:+.2f}M")
    sentence = ""
    if not _prints_as(ALLOCATION_TOTAL, total):
        sentence = (
            f"ours {_m(total)}, {total / ALLOCATION_TOTAL.value:.2f}x the printed total; the chapter's "
            f"rows add up to {_m(chapter_sum)}, and ours differs from them by " + ", ".join(gaps)
        )
    rows.append(Row("Total", ALLOCATION_TOTAL.line, ALLOCATION_TOTAL.printed, total, sentence=sentence))
    return rows


def _router_flops(cfg: ModelConfig, seq_len: int) -> tuple[int, int]:
    """FLOPs per token of the first and the last allosteric router."""
    routers = [r for st in cfg.stages if isinstance(st, RegulatoryStage) for r in st.routers]
    return routers[0].flops_per_token(seq_len), routers[-1].flops_per_token(seq_len)


def per_block_flops(b: Breakdown, cfg: ModelConfig) -> list[Row] | None:
    """§15.6.5's table beside our FLOPs per block at (4, 512); None at any other shape."""
    blocks = b.per_block().blocks
    if (b.batch, b.seq_len, blocks) != (BATCH, SEQ_LEN, BLOCKS):
        return None
    tokens = b.batch * b.seq_len
    rows = []
    for ch in PER_BLOCK_FLOPS:
        ours = b.forward_flops(_sum(b, ch.ours, "flops_per_token")) / BLOCKS
        params = _sum(b, ch.ours, "params") / BLOCKS
        heads = _first(cfg, StrandAttentionConfig).heads
        formula = formula_flops(ch.line, heads)
        at = f", our h = {heads}" if "/ h" in ch.note else ""
        sentence = (
            f"ours {_b(ours)}, {ours / ch.value:.1f}x the chapter's ~{ch.printed}; its "
            f"{_m(params)} parameters per block alone cost about 2 x params x B·T = {_b(2 * params * tokens)}"
        )
        if formula is not None and not _prints_as(ch, formula):
            sentence += f"; the chapter's own formula ({ch.note}{at}) gives {si(formula)}, not ~{ch.printed}"
        rows.append(
            Row(ch.component, ch.line, ch.printed, ours, formula, f"{sentence}; {_why(ch.line, cfg)}")
        )
    listed = {name for ch in PER_BLOCK_FLOPS for name in ch.ours}
    first, last = _router_flops(cfg, b.seq_len)
    for name, _, _, flops in b.per_block().rows:
        if name in listed:
            continue
        why = "not in the chapter's table"
        if name == "Allosteric regulation":
            why += (
                f"; each router summarises every coding region before it (2 x sources x d x width "
                f"FLOPs per token), so it grows with depth: {_b(first * tokens)} in block 1, "
                f"{_b(last * tokens)} in block {BLOCKS}"
            )
        rows.append(Row(name, None, "-", flops / BLOCKS, sentence=why))
    per_block = sum(r.ours for r in rows)
    unlisted = sum(r.ours for r in rows if r.line is None)
    floor, chapter_floor = 2 * b.totals.params * tokens, 2 * ALLOCATION_TOTAL.value * tokens
    rows.append(
        Row(
            PER_BLOCK_TOTAL.component,
            PER_BLOCK_TOTAL.line,
            PER_BLOCK_TOTAL.printed,
            per_block,
            sentence=(
                f"ours {_b(per_block)}, {per_block / PER_BLOCK_TOTAL.value:.1f}x; without the rows the "
                f"chapter's table lacks ({_b(unlisted)}) {_b(per_block - unlisted)}, "
                f"{(per_block - unlisted) / PER_BLOCK_TOTAL.value:.1f}x"
            ),
        )
    )
    dna = next(r.ours for r in rows if r.line == 357)
    rows.append(
        Row(
            ALL_BLOCKS_TOTAL.component,
            ALL_BLOCKS_TOTAL.line,
            ALL_BLOCKS_TOTAL.printed,
            per_block * BLOCKS,
            sentence=(
                f"ours {_b(per_block * BLOCKS)}, {per_block * BLOCKS / ALL_BLOCKS_TOTAL.value:.1f}x. "
                f"The chapter's figures cannot be its allocation's: {ALLOCATION_TOTAL.printed} parameters "
                f"cost about 2 x params x B·T = {_b(chapter_floor)} per forward "
                f"pass (ours: {_b(floor)}), {chapter_floor / ALL_BLOCKS_TOTAL.value:.0f}x "
                f"its {ALL_BLOCKS_TOTAL.printed}. DNA compute is {dna / per_block:.0%} of our block FLOPs "
                f"(the chapter: {DNA_SHARE[0]:.0%}, line {DNA_SHARE[1]})"
            ),
        )
    )
    return rows


def compare(genome: Genome, b: Breakdown) -> dict[str, object]:
    """Both tables for the dogma-byte preset (JSON-ready), the FLOP table None unless the
    breakdown is at the chapter's (B, T) = (4, 512)."""
    cfg = model_config(genome)
    flops = per_block_flops(b, cfg)
    return {
        "source": "DOGMA scaling chapter, Table 15.2 (line 328) and §15.6.5 (line 351)",
        "allocation": [r.to_dict() for r in allocation(b, cfg)],
        "per_block_flops": None if flops is None else [r.to_dict() for r in flops],
        "per_block_flops_note": ""
        if flops is not None
        else f"the chapter's FLOPs are at B={BATCH}, T={SEQ_LEN}: add --batch {BATCH} --seq-len {SEQ_LEN}",
    }
