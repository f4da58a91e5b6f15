"""Size ladders of one design for `evolve scale`: a genome at other widths and depths.

A ladder keeps a genome's architecture and changes its size along one axis
(``Design.genome(Shape(width, depth, gate))`` builds one):

* ``width``: ``d_model`` on the grid ``width_grid()`` (16, 32, ... 256, then steps of about
  4 %, multiples of 16), depth fixed at the base's;
* ``depth`` (``copies`` is the same axis): the deepest coding region stacked ``d`` times (its
  promoter's ``copies``), every other coding region in proportion; a region without a promoter
  gets one once it needs more than one copy;
* ``both`` (the default): width on the grid and depth ``d0 · w / w0`` rounded down and up (both
  shapes are candidates, so the ladder is not held to depth's coarse steps), the base shape's
  aspect ratio ``(w0, d0)``;
* ``regulatory``: the width (``hidden`` / ``width``) of every base in a regulatory region;
  refused for a genome without one.

Widths and depths change by the one resize rule, `genome.resize` (`at_width`, `stacked`).
At its own width and depth the genome is unchanged but for the task's
vocabulary and context (``pinned``). The base shape is the genome's own; for a preset it is
``(32, 1)``, the smallest shape ``evolution.spaces.dogma.seeds`` gives the presets (depth ∝ width: its
``(64, 2)`` lies on the same line).

A rung's size is its **non-embedding** parameter count (``phenotype.account``'s
``non_embedding_params``: the N of scaling laws, Kaplan et al. 2020); its total is kept beside
(``Rung.total_params``). Rungs: for each target the shape along the axis whose N is nearest
in log; refused (``LadderError``, one line) when a target has no shape within a factor of 2,
two targets give one shape, fewer than ``MIN_SIZES`` sizes remain or they span less than
``MIN_DECADES``. The default targets run from ``max(10_000, the axis' smallest model)`` up
1.7 decades (×50) in 5 log-even steps, or up to ``top(smallest)`` when given (`evolve scale`:
what the task's text allows, `evolution.scale.regime`); one the axis misses, or that shares a
shape with another, is dropped while 4 sizes over 1.5 decades remain (``strict=False`` treats
given targets so too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from dogma_evolve.evaluation.scaling import LadderError
from dogma_evolve.genome import Genome, GenomeError
from dogma_evolve.genome.resize import SCALED, at_width, derived_table, stacked
from dogma_evolve.genome.schema import MAX_WIDTH

Doc = dict[str, Any]
AXES = ("both", "width", "depth", "copies", "regulatory")
MIN_SIZES = 4
MIN_DECADES = 1.5
DEFAULT_LOW, DEFAULT_RATIO, DEFAULT_RUNGS = 10_000, 50.0, 5
PRESET_BASE = (32, 1)
MAX_COPIES = 512  # genome.schema.PROMOTER's bound
TOLERANCE = 2.0  # a target's nearest shape must lie within this factor


def width_grid(low: int = 16, high: int = MAX_WIDTH) -> Iterator[int]:
    """Widths 16, 32, ... 256, then steps of about 4 % (multiples of 16) up to ``high``."""
    w = low
    while w <= high:
        yield w
        w = max(w + 16, int(w * 1.04) // 16 * 16)


@dataclass(frozen=True)
class Shape:
    """One size of a design: ``d_model``, depth and, on the regulatory axis, gate width."""

    width: int
    depth: int
    gate: int | None = None


@dataclass(frozen=True)
class Rung:
    """One model of a ladder: its shape, non-embedding parameter count (the fit's N), genome
    and total parameter count."""

    shape: Shape
    params: int
    genome: Genome
    total_params: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "width": self.shape.width,
            "depth": self.shape.depth,
            "gate": self.shape.gate,
            "params": self.params,
            "total_params": self.total_params,
            "genome_id": self.genome.id,
        }


@dataclass(frozen=True)
class Design:
    """The genome a ladder resizes (module docstring): its canonical document, own width and
    depth, the base shape of the ladder, and the task's ``pinned`` vocabulary and context."""

    doc: Doc
    width: int
    depth: int
    base: Shape
    pinned: dict[str, Any]
    source: str
    genome_id: str

    @classmethod
    def of(cls, genome: Genome, pinned: dict[str, Any], source: str, preset: bool = False) -> Design:
        """The design of ``genome`` (``source`` names it in messages); a ``preset``'s base is
        ``PRESET_BASE``, at the smallest width from 32 up where the preset is valid at depth 1."""
        doc = genome.to_dict()
        width = int(genome.structural["d_model"])
        depth = max(
            [int(genome.promoter_of(r.id)["copies"]) for r in genome.regions if r.type == "coding"] or [1]
        )
        design = cls(doc, width, depth, Shape(width, depth), dict(pinned), source, genome.id)
        if not preset:
            return design
        w0, d0 = PRESET_BASE
        w = next((w for w in width_grid(w0) if design.genome(Shape(w, d0)) is not None), w0)
        return replace(design, base=Shape(w, d0))

    @cached_property
    def derived(self) -> list[list[set[str]]]:
        """Per region, per base: the params that follow their derivation rule."""
        return derived_table(self.doc)

    @property
    def regulatory_widths(self) -> list[tuple[int, int, str]]:
        """(region index, base index, param) of every width a regulatory base has."""
        return [
            (i, j, name)
            for i, r in enumerate(self.doc["regions"])
            if r["type"] == "regulatory"
            for j, b in enumerate(r.get("bases", []))
            for name in SCALED
            if name in b["params"]
        ]

    def document(self, shape: Shape) -> Doc:
        """The design's document at ``shape`` (module docstring; `genome.resize` has the rule)."""
        doc = at_width(self.doc, shape.width, self.pinned, self.derived)
        if shape.gate is not None:
            for i, j, name in self.regulatory_widths:
                doc["regions"][i]["bases"][j]["params"][name] = shape.gate
        if shape.depth != self.depth:
            doc = stacked(doc, shape.depth, self.depth)
        return doc

    def genome(self, shape: Shape) -> Genome | None:
        """The genome at ``shape``; None where that shape is not a valid genome."""
        try:
            return Genome.from_dict(self.document(shape))
        except GenomeError:
            return None

    def shapes(self, axis: str) -> Iterator[Shape]:
        """Every shape along ``axis``, smallest first (module docstring)."""
        b = self.base
        if axis == "width":
            yield from (Shape(w, b.depth) for w in width_grid())
        elif axis in ("depth", "copies"):
            yield from (Shape(b.width, d) for d in range(1, MAX_COPIES + 1))
        elif axis == "both":
            for w in width_grid():
                x = b.depth * w / b.width
                yield from (Shape(w, d) for d in sorted({max(1, math.floor(x)), max(1, math.ceil(x))}))
        elif axis == "regulatory":
            if not self.regulatory_widths:
                raise LadderError(
                    f"{self.source} has no regulatory region with a width to scale: use another axis"
                )
            yield from (Shape(self.width, self.depth, g) for g in width_grid(high=4096))
        else:
            raise LadderError(f"axis {axis!r} is not one of {', '.join(AXES)}")


def default_targets(smallest: int) -> list[float]:
    """``DEFAULT_RUNGS`` log-even targets from ``max(DEFAULT_LOW, smallest)`` up ×50."""
    low = max(DEFAULT_LOW, smallest)
    return [low * DEFAULT_RATIO ** (k / (DEFAULT_RUNGS - 1)) for k in range(DEFAULT_RUNGS)]


def check_sizes(sizes: Sequence[float], min_decades: float = MIN_DECADES) -> None:
    """Refuse (one line) fewer than ``MIN_SIZES`` parameter targets or a span under ``min_decades``
    (``MIN_DECADES``, what a fit needs)."""
    if len(set(sizes)) < MIN_SIZES:
        raise LadderError(f"{len(set(sizes))} sizes: a power law with a floor needs at least {MIN_SIZES}")
    if any(not (math.isfinite(s) and s >= 1) for s in sizes):
        raise LadderError("every size must be a parameter count of at least 1")
    span = math.log10(max(sizes) / min(sizes))
    if span < min_decades - 1e-9:
        raise LadderError(f"the sizes span {span:.2f} decades: a fit needs at least {min_decades:g}")


def ladder(
    design: Design,
    axis: str,
    sizes: Sequence[float] | None,
    params_of: Callable[[Genome], tuple[int, int]] | None = None,
    strict: bool = True,
    top: Callable[[int], float] | None = None,
    min_decades: float = MIN_DECADES,
) -> list[Rung]:
    """The rungs of ``design`` along ``axis`` nearest ``sizes`` (non-embedding parameter
    targets; default ``default_targets``, or up to ``top(smallest)`` when given); module
    docstring for the refusals. ``params_of(genome)``: (non-embedding, total) parameters.
    Targets not given (or given with ``strict`` False) that the axis misses, or that share a
    shape, are dropped instead, as long as 4 sizes over 1.5 decades remain."""
    if params_of is None:
        from dogma_evolve.phenotype import account

        def params_of(g: Genome) -> tuple[int, int]:
            a = account(g)
            return a.non_embedding_params, a.params

    def targets_from(smallest: int) -> list[float]:
        if top is None:
            return default_targets(smallest)
        from dogma_evolve.evolution.scale.regime import default_targets as up_to

        return up_to(smallest, top(smallest))

    if sizes is not None:
        check_sizes(sizes, min_decades)
    strict = strict and sizes is not None
    highest = max(sizes) if sizes else None
    found: list[Rung] = []
    for shape in design.shapes(axis):
        g = design.genome(shape)
        if g is None:
            continue
        p, total = params_of(g)
        found.append(Rung(shape, p, g, total))
        if highest is None:
            highest = targets_from(p)[-1]
        if p >= TOLERANCE * highest:
            break
    if not found:
        raise LadderError(f"no valid genome along the {axis} axis from {design.source}")
    cands: list[Rung] = []
    for r in sorted(found, key=lambda r: r.params):  # `both` interleaves two depths per width
        if not cands or r.params > cands[-1].params:
            cands.append(r)
    targets = list(sizes) if sizes else targets_from(cands[0].params)
    chosen: list[Rung] = []
    for t in sorted(targets):
        best = min(cands, key=lambda c: abs(math.log(c.params / t)))
        if abs(math.log(best.params / t)) > math.log(TOLERANCE) and not strict:
            continue  # a default target the coarse axis misses: checked below
        if abs(math.log(best.params / t)) > math.log(TOLERANCE):
            far = "largest" if best is cands[-1] else "smallest" if best is cands[0] else "nearest"
            raise LadderError(
                f"{design.source}: no model along the {axis} axis near {t:,.0f} parameters ({far}: "
                f"{best.params:,} at width {best.shape.width}, depth {best.shape.depth}): "
                "use other --sizes or another axis"
            )
        if chosen and best is chosen[-1] and not strict:
            continue  # a default target: the coarse axis gives fewer sizes, checked below
        if chosen and best is chosen[-1]:
            raise LadderError(
                f"{design.source}: two sizes near {t:,.0f} parameters give the same model ({best.params:,}): "
                f"the {axis} axis is too coarse there; spread the --sizes"
            )
        chosen.append(best)
    try:
        check_sizes([c.params for c in chosen], min_decades)
    except LadderError:
        if strict:
            lo, hi = chosen[0].params, chosen[-1].params
            raise LadderError(
                f"{design.source}: the models along the {axis} axis nearest the sizes span "
                f"{math.log10(hi / lo):.2f} decades ({lo:,} to {hi:,} parameters): a fit needs "
                f"{min_decades:g}; widen the --sizes"
            ) from None
        lo, hi = chosen[0].params, chosen[-1].params
        raise LadderError(
            f"the {axis} axis of {design.source} gives {len(chosen)} sizes from {lo:,} to {hi:,} parameters "
            f"({math.log10(hi / lo):.2f} decades): a fit needs {MIN_SIZES} sizes over {min_decades:g} decades"
        ) from None
    return chosen
