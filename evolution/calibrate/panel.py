"""What a calibration trains: the panel of genomes (the space's generation-0 presets, then
random genomes of the space) and the ladder of fidelities.

**Presets** are those the DOGMA space seeds generation 0 with
(`evolution.spaces.dogma.seeds.initial_population`): each of ``SEED_PRESETS`` scaled down to
width 64 with at most two copies of a coding region, then to width 32 with one, pinned to
the task's vocabulary and context (``scale_down``), kept when it breaks no hard constraint
(``space.violation(g) is None``); ``presets`` keeps the first K of them in that order.

**Random genomes** are ``space.sample(rng)`` under ``random.Random(seed)``, as a search's
immigrants are, kept when within the hard constraints and not already in the panel, until
``random`` are found (at most ``TRIES_PER_GENOME`` draws each). **Stratified** (``stratify``),
the same draws are grouped by family (``family_of``: the family of the first expressed
sequence mixer) and taken one family at a time, in turn, each in draw order, so that the
families the sampler draws rarely are not crowded out.

**Stored runs' best genomes** (``extra``, `evolve calibrate --from-runs`) join after the
presets, named ``run:<id>``.

**Fidelities**: every member trains at each rung, at the full fidelity ``steps`` (always a
rung) and at the ``target`` (more than ``steps``), on every task, under the seed a search
gives it (the default ``genome`` seed policy: ``derive_seed("eval", genome id, task)``), so
the full-fidelity training of a genome a search met is copied from the store, not retrained.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dogma_evolve.evolution.calibrate.defaults import MAX_RANDOM, MAX_RUNGS, MAX_STEPS
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.genome import Genome

#: (width, most copies of a coding region) of the presets, as ``initial_population`` makes them
PRESET_SHAPES = ((64, 2), (32, 1))
TRIES_PER_GENOME = 50


class CalibrateError(ValueError):
    """A calibration that cannot be made, with a one-line reason."""


@dataclass(frozen=True)
class Member:
    """One genome of the panel: ``name`` (``preset:gpt2-small@64x2``, ``random:3``)."""

    name: str
    genome: Genome
    params: int


@dataclass(frozen=True)
class Ladder:
    """The fidelities of a calibration: ``rungs`` ascending (``steps`` among them) and the
    ``target``, above every rung."""

    steps: int
    rungs: tuple[int, ...]
    target: int

    @property
    def fidelities(self) -> tuple[int, ...]:
        return (*self.rungs, self.target)


def make_ladder(steps: int, rungs: tuple[int, ...], target: int) -> Ladder:
    """The ladder of ``rungs`` (with ``steps`` added, sorted, duplicates dropped) up to
    ``target``; ``CalibrateError`` when a step count is out of range or the target is not
    above every rung."""
    if not 1 <= steps <= MAX_STEPS:
        raise CalibrateError(f"--steps {steps}: from 1 to {MAX_STEPS:,}")
    bad = [r for r in rungs if not 1 <= r <= MAX_STEPS]
    if bad:
        raise CalibrateError(f"--rungs: {bad[0]} is no step count from 1 to {MAX_STEPS:,}")
    ladder = tuple(sorted(set(rungs) | {steps}))
    if len(ladder) > MAX_RUNGS:
        raise CalibrateError(f"--rungs: {len(ladder)} rungs, at most {MAX_RUNGS}")
    if not ladder[-1] < target <= MAX_STEPS:
        raise CalibrateError(
            f"--target {target}: above every rung ({ladder[-1]}) and at most {MAX_STEPS:,} steps"
        )
    return Ladder(steps, ladder, target)


def preset_members(space: DogmaSpace, limit: int | None = None) -> list[Member]:
    """The space's generation-0 presets within its hard constraints, the first ``limit``
    (module docstring)."""
    from dogma_evolve.evolution.spaces.dogma.seeds import SEED_PRESETS, scale_down
    from dogma_evolve.genome import PRESETS

    out: list[Member] = []
    for name in SEED_PRESETS:
        for width, copies in PRESET_SHAPES:
            if limit is not None and len(out) >= limit:
                return out
            genome = Genome.from_dict(scale_down(PRESETS[name](), width, copies, space.pinned))
            if space.violation(genome) is None and all(m.genome.id != genome.id for m in out):
                out.append(_member(space, f"preset:{name}@{width}x{copies}", genome))
    return out


def random_members(space: DogmaSpace, count: int, seed: int, taken: set[str]) -> list[Member]:
    """``count`` random genomes of the space within its hard constraints whose ids are not in
    ``taken`` (module docstring); ``CalibrateError`` when the draws run out."""
    if not 0 <= count <= MAX_RANDOM:
        raise CalibrateError(f"--random {count}: from 0 to {MAX_RANDOM}")
    rng = random.Random(seed)
    seen, out = set(taken), list[Member]()
    for _ in range(TRIES_PER_GENOME * count):
        if len(out) == count:
            break
        try:
            genome = space.sample(rng)
        except RuntimeError as e:  # no genome under the budget in the sampler's tries
            raise CalibrateError(f"--random: {e}") from None
        if space.violation(genome) is None and genome.id not in seen:
            seen.add(genome.id)
            out.append(_member(space, f"random:{len(out)}", genome))
    if len(out) < count:
        raise CalibrateError(f"--random {count}: only {len(out)} distinct valid genomes drawn")
    return out


def stratified_members(space: DogmaSpace, count: int, seed: int, taken: set[str]) -> list[Member]:
    """``count`` random genomes drawn as ``random_members`` draws them, taken family by family
    in turn (module docstring)."""
    if not 0 <= count <= MAX_RANDOM:
        raise CalibrateError(f"--random {count}: from 0 to {MAX_RANDOM}")
    drawn = random_members(space, min(MAX_RANDOM, 4 * count), seed, taken) if count else []
    by_family: dict[str, list[Genome]] = {}
    for m in drawn:
        by_family.setdefault(family_of(m.genome), []).append(m.genome)
    order: list[Genome] = []
    while len(order) < min(count, len(drawn)):
        for name in sorted(by_family):
            if by_family[name] and len(order) < count:
                order.append(by_family[name].pop(0))
    return [_member(space, f"random:{k}", genome) for k, genome in enumerate(order)]


def make_panel(
    space: DogmaSpace,
    presets: int | None,
    count: int,
    seed: int,
    stratify: bool = False,
    extra: Sequence[Member] = (),
) -> list[Member]:
    """The presets (the first ``presets``, all when None), the ``extra`` members not among
    them, then ``count`` random genomes (``stratify``: family by family)."""
    if presets is not None and presets < 0:
        raise CalibrateError(f"--presets {presets}: at least 0")
    panel = preset_members(space, presets)
    for m in extra:
        if all(m.genome.id != other.genome.id for other in panel):
            panel.append(m)
    draw = stratified_members if stratify else random_members
    return panel + draw(space, count, seed, {m.genome.id for m in panel})


def family_of(genome: Genome) -> str:
    """The family of the first expressed sequence mixer (``guards.family``), ``none`` without one."""
    from dogma_evolve.evolution.spaces.dogma import guards

    mixers = guards.expressed_mixers(genome)
    return guards.family(mixers[0].kind) if mixers else "none"


def stored_best(space: DogmaSpace, store: Any, run_ids: Sequence[str]) -> list[Member]:
    """The best individual of each stored search ``run_ids`` (`evolve report`'s rule), as a
    member ``run:<id>`` of this space's panel; ``CalibrateError`` for a run without one or
    whose genome breaks the panel's hard constraints."""
    from dogma_evolve.evolution.errors import UsageError
    from dogma_evolve.evolution.report.summary import best_individual
    from dogma_evolve.store import StoreError

    out = []
    for prefix in run_ids:
        try:
            run_id = store.resolve_run(prefix)
            best = best_individual(store, run_id)
        except (UsageError, StoreError) as e:
            raise CalibrateError(f"--from-runs: {e}") from None
        genome = Genome.from_yaml(best.yaml)
        if space.violation(genome) is not None:
            raise CalibrateError(f"--from-runs: the best of run {run_id} breaks this panel's constraints")
        out.append(_member(space, f"run:{run_id}", genome))
    return out


def _member(space: DogmaSpace, name: str, genome: Genome) -> Member:
    return Member(name, genome, int(space.cost_metrics(genome)["params"]))


def member_entry(member: Member, seeds: dict[str, int]) -> dict[str, Any]:
    """A member as the run's config keeps it (what `evolve report` reads back)."""
    return {"name": member.name, "genome_id": member.genome.id, "params": member.params, "seeds": seeds}


__all__ = [
    "PRESET_SHAPES",
    "CalibrateError",
    "Ladder",
    "Member",
    "make_ladder",
    "make_panel",
    "member_entry",
    "family_of",
    "preset_members",
    "random_members",
    "stored_best",
    "stratified_members",
]
