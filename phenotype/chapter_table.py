"""The DOGMA scaling chapter's allocation study, transcribed (what `dogma-byte` follows).

Source: the DOGMA scaling chapter, §15.6.4-15.6.5 (the project's seed text
`000_29a8c2cbfe8be2af.txt`; line numbers below are that file's). The chapter calls the
allocation "a hypothetical 224.7M parameters ... not the model measured in Chapter 14"
(line 326): its figures are a design exercise, and this module keeps them as printed
(`printed`, with its rounding; `value` is read from it). `phenotype.chapter_compare` puts
them beside the breakdown of the built modules.

Each row names the breakdown components it corresponds to (`phenotype.breakdown.FAMILIES`
and the model-level rows).
"""

from __future__ import annotations

from dataclasses import dataclass

BATCH, SEQ_LEN, D_MODEL, BLOCKS = 4, 512, 512, 16
"""The shape of the per-block FLOP table, (B=4, T=512, d=512) (line 353), and its 16 blocks
(line 362)."""

REGULATION = ("Regulation gate", "Regulation edges")
"""The chapter's sigmoid regulation gate is our gate bases and the edges that apply them."""

_UNITS = {"M": 1e6, "B": 1e9}


@dataclass(frozen=True)
class ChapterRow:
    component: str  # as the chapter names it
    printed: str  # the figure as printed, "~" dropped: "33.8M", "0.5B"
    line: int  # line of the source text
    ours: tuple[str, ...]  # the breakdown components it corresponds to
    note: str  # the chapter's note or formula, in plain text

    @property
    def value(self) -> float:
        return float(self.printed[:-1]) * _UNITS[self.printed[-1]]

    @property
    def precision(self) -> float:
        """Half a unit of the printed figure's last digit: how far a value may lie from it
        and still print the same."""
        digits = self.printed[:-1]
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        return 0.5 * 10**-decimals * _UNITS[self.printed[-1]]


ALLOCATION = (
    ChapterRow("Token embedding", "0.13M", 331, ("Token embedding",), "DOGMA: 257 x 512"),
    ChapterRow("TetraMemory", "33.8M", 332, ("TetraMemory",), "K_4 graph ops, face propagation, multi-scale"),
    ChapterRow(
        "DNA Computing (4 paths)",
        "88.3M",
        333,
        ("DNA compute",),
        "Strand displ. + automaton + stochastic + double",
    ),
    ChapterRow("Regulation Gate", "22.4M", 334, REGULATION, "Sigmoid gating, analogous to Trans. layer norm"),
    ChapterRow(
        "Strand Attention", "44.8M", 335, ("Strand attention",), "Thermo-weighted vs. QKV projections"
    ),
    ChapterRow("Expression Folder", "22.4M", 336, ("Expression folder",), "LayerNorm + MLP folding"),
    ChapterRow("Epigenetic Memory", "8.4M", 338, ("Epigenetic memory",), "Persistent cross-block state"),
    ChapterRow(
        "Allosteric Regulation", "4.2M", 339, ("Allosteric regulation",), "Sparse top-k communication"
    ),
    ChapterRow("Output head", "0.13M", 340, ("Output head",), "DOGMA: byte-level"),
)
"""Table 15.2 (line 328), the DOGMA column (the transformer column and its FFN row, line
337, describe the other design)."""

ALLOCATION_TOTAL = ChapterRow("Total", "224.7M", 341, (), "as printed; the rows above add up to 224.56M")

PER_BLOCK_FLOPS = (
    ChapterRow("TetraMemory", "0.5B", 356, ("TetraMemory",), "4 x B x T x d face ops"),
    ChapterRow(
        "DNA Compute (4 paths)",
        "2.1B",
        357,
        ("DNA compute",),
        "CRN: B x T x 64 x 32; Scan: O(T log T); etc.",
    ),
    ChapterRow("Regulation Gate", "0.5B", 358, REGULATION, "B x T x 2d^2 (gate projection)"),
    ChapterRow("Strand Attention", "1.1B", 359, ("Strand attention",), "B x T^2 x d / h (thermo-weighted)"),
    ChapterRow("Expression Folder", "0.5B", 360, ("Expression folder",), "B x T x 4d^2 (MLP folding)"),
)
"""§15.6.5's per-block table at (B=4, T=512, d=512), printed as "~0.5B" etc.: FLOPs of one
block's stages. It has no rows for epigenetic memory or allosteric regulation."""

PER_BLOCK_TOTAL = ChapterRow("Total per block", "4.7B", 361, (), "")
ALL_BLOCKS_TOTAL = ChapterRow("16 blocks", "75B", 362, (), "Comparable to 12-layer Transformer (~72B)")


def formula_flops(line: int, heads: int) -> float | None:
    """The chapter's own formula of the per-block row at `line`, evaluated at (B, T, d) =
    (4, 512, 512) with `heads` for strand attention's d/h; None where the row gives none
    (DNA: "etc.")."""
    b, t, d = BATCH, SEQ_LEN, D_MODEL
    formulas = {
        356: 4 * b * t * d,
        358: b * t * 2 * d * d,
        359: b * t * t * d / heads,
        360: b * t * 4 * d * d,
    }
    return formulas.get(line)


DNA_SHARE = (0.45, 364)
""""DOGMA spends 45% of FLOPs in the DNA Computing Block" (line 364): 2.1B of 4.7B."""
