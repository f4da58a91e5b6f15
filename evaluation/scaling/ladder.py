"""Ladders: the (width, depth) rungs a scaling study trains, spanning decades of parameters.

From a base architecture at ``(base_width, base_depth)`` the ladder grows along one axis:

* ``width``: depth fixed, width in steps of ``width_step``;
* ``depth``: width fixed, depth 1, 2, 3, ...;
* ``both``: width in steps, depth ``max(1, round(base_depth · width / base_width))`` (a
  constant aspect ratio).

Rung k targets ``P_0 · 10^(decades · k / (rungs − 1))`` parameters (``P_0`` the base's count):
log-uniform spacing, so a power-law fit weighs every decade alike. Each intermediate rung is the
candidate nearest its target in log parameters, the last the first candidate at or beyond the
top target, so the ladder spans at least ``decades``. Parameter counts come from a callable
``params_of(width, depth)``, None for a shape with no valid model (skipped; testable without
torch); ``preset_ladder`` uses the project's
accounting, ``phenotype.account`` of the preset scaled by ``evolution.seeds.scale_down``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from .fit import LadderError

Axis = Literal["width", "depth", "both"]
AXES: tuple[Axis, ...] = ("width", "depth", "both")


@dataclass(frozen=True)
class Rung:
    """One model size of a ladder."""

    width: int
    depth: int
    params: int


def _candidates(
    axis: Axis, base_width: int, base_depth: int, width_step: int, max_width: int, max_depth: int
) -> Iterator[tuple[int, int]]:
    if axis == "depth":
        for d in range(base_depth, max_depth + 1):
            yield base_width, d
        return
    for w in range(base_width, max_width + 1, width_step):
        d = base_depth if axis == "width" else max(1, round(base_depth * w / base_width))
        if d > max_depth:
            return
        yield w, d


def ladder_rungs(
    params_of: Callable[[int, int], int | None],
    base_width: int,
    base_depth: int,
    axis: Axis,
    *,
    rungs: int = 5,
    decades: float = 1.5,
    width_step: int = 16,
    max_width: int = 4096,
    max_depth: int = 128,
) -> list[Rung]:
    """``rungs`` (≥ 4) rungs from ``(base_width, base_depth)`` along ``axis``, spanning at
    least ``decades`` (≥ 1.5) decades of ``params_of(width, depth)`` (module docstring).

    Raises ``LadderError`` (one line) on a bad argument, or when the axis cannot reach the span
    within ``max_width`` / ``max_depth`` or cannot give ``rungs`` distinct sizes."""
    if axis not in AXES:
        raise LadderError(f"axis {axis!r} is not one of {', '.join(AXES)}")
    if rungs < 4:
        raise LadderError(f"{rungs} rungs: a power law with a floor needs at least 4 sizes")
    if decades < 1.5:
        raise LadderError(f"a span of {decades:g} decades is too short to fit an exponent: use at least 1.5")
    if min(base_width, base_depth, width_step) < 1:
        raise LadderError("base width, base depth and width step must be positive")
    p0 = params_of(base_width, base_depth)
    if p0 is None or p0 <= 0:
        raise LadderError(f"the base (width {base_width}, depth {base_depth}) is not a valid model")
    top = p0 * 10**decades
    cands: list[Rung] = []
    for w, d in _candidates(axis, base_width, base_depth, width_step, max_width, max_depth):
        p = params_of(w, d)
        if p is None:
            continue
        if not cands or p > cands[-1].params:
            cands.append(Rung(w, d, p))
        if p >= top:
            break
    last = cands[-1]
    if last.params < top:
        limit = f"depth {max_depth}" if axis == "depth" else f"width {max_width}"
        span = math.log10(last.params / p0)
        raise LadderError(
            f"the {axis} axis from ({base_width}, {base_depth}) spans only {span:.2f} "
            f"of {decades:g} decades up to {limit} (largest: {last.params:,} params at width {last.width}, "
            f"depth {last.depth}): raise the limit or use another axis"
        )
    chosen = [cands[0]]
    for k in range(1, rungs - 1):
        target = math.log(p0) + math.log(10) * decades * k / (rungs - 1)
        best = min(cands[:-1], key=lambda c: abs(math.log(c.params) - target))
        if best.params > chosen[-1].params:
            chosen.append(best)
    chosen.append(cands[-1])
    if len(chosen) < rungs:
        raise LadderError(
            f"the {axis} axis gives only {len(chosen)} distinct sizes for {rungs} rungs over {decades:g} "
            f"decades: use a finer width step or another axis"
        )
    return chosen


def preset_params_of(
    preset: str, pinned: dict[str, Any], seq_len: int = 2048
) -> Callable[[int, int], int | None]:
    """``params_of(width, depth)`` for a preset (``genome.PRESETS``) scaled by
    ``evolution.seeds.scale_down`` to that width and ``depth`` copies of each coding region
    (at most the preset's own), pinned to ``pinned`` (the tasks' ``vocab``, ``max_len``), and
    counted by ``phenotype.account``; None where the scaled genome is invalid (e.g. Llama 3's
    8 KV heads do not divide the 9 heads of width 144)."""
    # imported here: evolution imports evaluation, and the fits need no torch
    from evolution.seeds import scale_down
    from genome import PRESETS, Genome, GenomeError
    from phenotype import account

    if preset not in PRESETS:
        raise LadderError(f"unknown preset {preset!r} (known: {', '.join(sorted(PRESETS))})")
    doc = PRESETS[preset]()

    def params_of(width: int, depth: int) -> int | None:
        try:
            genome = Genome.from_dict(scale_down(doc, width, depth, pinned))
        except GenomeError:
            return None
        return account(genome, seq_len).params

    return params_of


def preset_ladder(
    preset: str,
    base_width: int,
    base_depth: int,
    axis: Axis,
    *,
    pinned: dict[str, Any],
    rungs: int = 5,
    decades: float = 1.5,
    width_step: int = 16,
    max_width: int = 4096,
    max_depth: int = 128,
) -> list[Rung]:
    """``ladder_rungs`` with the project's accounting of ``preset`` (``preset_params_of``)."""
    return ladder_rungs(
        preset_params_of(preset, pinned),
        base_width,
        base_depth,
        axis,
        rungs=rungs,
        decades=decades,
        width_step=width_step,
        max_width=max_width,
        max_depth=max_depth,
    )
