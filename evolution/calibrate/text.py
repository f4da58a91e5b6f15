"""A calibration's language target: how the fitness ranks the panel against English text.

With ``--against TASK`` (``bytelm_en``: the King James Bible and Wikipedia articles, bytes)
every panel member is also trained on that text **compute-optimally**, ``tokens_per_param`` (20,
Hoffmann et al. 2022) tokens per non-embedding parameter, at each of ``sizes``: 1 is the member
as the search trains it (at the text's vocabulary and context: the rule pins them as a search
pins its tasks'), 4 and 16 the member grown by the ladder's resize rule (the `evolve scale`
rule, ``Design.shapes("both")``: width on the ladder's grid, depth in proportion) to the shape
whose non-embedding parameters N are nearest ``size`` times its own (in log N). A size's point
trains ``round(tokens_per_param · N / tokens_per_step)`` steps on the text's own batch and
context; one whose tokens would pass over the training text more than ``MAX_EPOCHS`` times is
not trained (its held-out loss would measure memorisation) and counts as over the text; `evolve
calibrate` refuses such a target before anything is stored (``check_fed``) unless
``--against-max-params`` leaves those members out. With ``max_params``
(``--against-max-params``, for a machine's time: a member's 4x costs about 16 times its 1x) a
point above that many non-embedding parameters is not trained either and counts as capped; a
size's rankings are over the members trained there, and each larger size also reports the
smallest size's rankings on those same members, so what a cap leaves out cannot pass for a
change with size.

**The target** of a member at a size is its held-out loss there (nats per byte, lower is
better). Each fitness the calibration measures (the quality at every rung and at the long
target; on one task, its held-out loss there too) is ranked against
``−loss``: Spearman's ρ and Kendall's τ-b with 95% bootstrap intervals, top-k recall (the share
of the k best language models a promotion of the best ``promote`` fraction keeps, chance k/n)
over the members measured at both, and per **family** (the family of a member's first
expressed sequence mixer, ``guards.family``: softmax attention, SSM, RNN, ...) the mean loss,
the mean fitness and, with at least ``MIN_PAIRS`` members, ρ within it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dogma_evolve.evaluation.scaling import LadderError
from dogma_evolve.evaluation.tasks import derive_seed
from dogma_evolve.evaluation.transfer import MIN_PAIRS, RESAMPLES, rank_transfer
from dogma_evolve.evolution.calibrate.panel import CalibrateError, Member, family_of
from dogma_evolve.evolution.calibrate.stats import compare, distribution, scores
from dogma_evolve.evolution.scale.ladder import Design
from dogma_evolve.evolution.scale.regime import (
    MAX_EPOCHS,
    epoch_cap,
    largest_size,
    over_cap,
    passes,
    text_tokens_of,
)
from dogma_evolve.genome import Genome
from dogma_evolve.store import TransferIn

MAX_SIZE = 1024.0  # the largest growth factor asked for
Values = Sequence[float | None]


@dataclass(frozen=True)
class TextTarget:
    """What the language target trains: ``task`` at ``sizes`` (growth factors, ascending, 1
    among them or not) with ``tokens_per_param`` tokens per non-embedding parameter."""

    task: str
    sizes: tuple[float, ...]
    tokens_per_param: float
    max_params: int | None = None  # no training above this non-embedding N (None: no cap)

    def key(self) -> dict[str, Any]:
        key = {"task": self.task, "sizes": list(self.sizes), "tokens_per_param": self.tokens_per_param}
        return key | ({"max_params": self.max_params} if self.max_params is not None else {})

    def capped(self, params: int | None) -> bool:
        """Whether a point of ``params`` non-embedding parameters is above the cap."""
        return self.max_params is not None and params is not None and params > self.max_params


@dataclass(frozen=True)
class Grown:
    """One member at one size: its genome there, non-embedding parameters ``params``, the
    ``steps`` its compute-optimal training takes (None: over the text) and its seed."""

    member: int
    size: float
    genome: Genome
    params: int
    steps: int | None
    seed: int
    tokens: int = 0  # what its training takes, trained or not


def label(size: float) -> str:
    """A size's name: ``1x``, ``4x``, ``2.5x``."""
    return f"{size:g}x"


def make_target(
    task: str, sizes: Sequence[float], tokens_per_param: float, max_params: int | None = None
) -> TextTarget:
    """The target, checked (``CalibrateError``, one line)."""
    if not sizes:
        raise CalibrateError("--sizes: no size given")
    bad = [s for s in sizes if not 0 < s <= MAX_SIZE]
    if bad:
        raise CalibrateError(f"--sizes: {bad[0]:g} is no growth factor above 0 and at most {MAX_SIZE:g}")
    if not 0 < tokens_per_param <= 10_000:
        raise CalibrateError(f"--tokens-per-param {tokens_per_param:g}: above 0 and at most 10,000")
    if max_params is not None and max_params < 1:
        raise CalibrateError(f"--against-max-params {max_params}: at least 1 parameter")
    from dogma_evolve.evaluation.tasks import get_task  # the task's code: torch

    try:
        get_task(task)
    except (KeyError, ValueError) as e:
        raise CalibrateError(f"--against {task}: {' '.join(str(e).split())}") from None
    return TextTarget(task, tuple(sorted(set(sizes))), float(tokens_per_param), max_params)


def non_embedding(genome: Genome) -> int:
    """The N of a compute-optimal budget: parameters outside the token embedding and head."""
    from dogma_evolve.phenotype import account  # the blocks' code: torch

    accounting = account(genome)
    return max(1, accounting.params - accounting.embedding_params)


def grow(genome: Genome, size: float, pinned: dict[str, Any], source: str) -> Genome:
    """``genome`` at ``size`` times its non-embedding parameters by the ladder's rule (module
    docstring), pinned to ``pinned`` (vocabulary, context); at size 1 its own shape, re-pinned;
    ``CalibrateError`` when no shape is valid."""
    design = Design.of(genome, pinned, source)
    if size == 1.0:
        same = design.genome(design.base)
        if same is None:
            raise CalibrateError(f"{source}: not valid at the text's vocabulary and context")
        return same
    want = size * non_embedding(genome)
    best: tuple[float, Genome] | None = None
    for shape in design.shapes("both"):
        grown = design.genome(shape)
        if grown is None:
            continue
        n = non_embedding(grown)
        distance = abs(math.log(n / want))
        if best is None or distance < best[0]:
            best = (distance, grown)
        if n > 4 * want:  # the shapes grow: nothing nearer beyond
            break
    if best is None:
        raise CalibrateError(f"{source}: no valid shape at {label(size)} its size")
    return best[1]


def grow_panel(members: Sequence[Member], target: TextTarget) -> list[Grown]:
    """Every member at every size (pinned to the text task's vocabulary and context), in size
    order then panel order, with its steps (None over the text, ``MAX_EPOCHS`` passes, or above
    the target's cap) and its seed (``derive_seed("eval", id, task)``, a search's)."""
    from dogma_evolve.evaluation.tasks import get_task

    task = get_task(target.task)
    pinned = {"vocab": task.vocab_size, "max_len": task.seq_len}
    per_step = task.train_batch_size * task.seq_len
    text = text_tokens_of(task)
    out = []
    for size in target.sizes:
        for i, m in enumerate(members):
            genome = grow(m.genome, size, pinned, m.name)
            n = non_embedding(genome)
            steps = max(1, round(target.tokens_per_param * n / per_step))
            tokens = steps * per_step
            if (text and over_cap(tokens / text)) or target.capped(n):
                out.append(Grown(i, size, genome, n, None, 0, tokens))
                continue
            out.append(Grown(i, size, genome, n, steps, derive_seed("eval", genome.id, target.task), tokens))
    return out


def check_fed(grown: Sequence[Grown], target: TextTarget) -> None:
    """Refuse (``CalibrateError``, one line, before anything trains; `evolve calibrate` checks
    its plan so) a target the text cannot feed: an ``--against-max-params`` above the largest
    size whose tokens fit ``MAX_EPOCHS`` passes over the text (`scale.regime.largest_size`), or
    a size at which members would pass over it more often (`scale.regime.epoch_cap`) that no
    such cap leaves out. A library plan keeps such points untrained, counted "over the text"."""
    from dogma_evolve.evaluation.tasks import get_task

    task = get_task(target.task)
    text = text_tokens_of(task)
    if not text:
        return
    r = target.tokens_per_param
    per_step = task.train_batch_size * task.seq_len
    most = largest_size(text, r, MAX_EPOCHS, per_step)
    cap = target.max_params
    if cap is not None and cap > most:
        tokens = max(1, round(r * cap / per_step)) * per_step  # as `grow_panel` trains it
        raise CalibrateError(
            f"--against-max-params {cap:,}: a member of {cap:,} non-embedding parameters trains on "
            f"{tokens:,} tokens at {r:g} tokens/param, {passes(tokens / text)} passes over the "
            f"{target.task} task's {text:,}-token training text, more than {MAX_EPOCHS:g}: the text "
            f"allows at most --against-max-params {most:,}"
        )
    for size in target.sizes:
        over = [
            (g.params, g.tokens, g.tokens / text)
            for g in grown
            if g.size == size and g.steps is None and not target.capped(g.params)
        ]
        try:
            epoch_cap(
                over,
                text,
                [r],
                "--sizes",
                what=f"member(s) at {label(size)}",
                hint=f"--against bytelm:PATH; or --against-max-params {most} leaves those members out",
                per_step=per_step,
            )
        except LadderError as e:
            raise CalibrateError(str(e)) from None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def family_rows(
    families: Sequence[str], fitness: Values, losses: Values, resamples: int = RESAMPLES
) -> list[dict[str, Any]]:
    """Per family (sorted): members (``n``), those measured at both (``measured``: a size's
    capped or failed members are not), mean held-out loss, mean fitness and ρ within the family
    (with ``MIN_PAIRS`` or more members measured at both)."""
    rows = []
    for name in sorted(set(families)):
        idx = [i for i, f in enumerate(families) if f == name]
        pairs = [(a, b) for a, b in ((fitness[i], losses[i]) for i in idx) if a is not None and b is not None]
        within = None
        if len(pairs) >= MIN_PAIRS:
            within = rank_transfer(
                [a for a, _ in pairs], [-b for _, b in pairs], resamples=resamples
            ).spearman
        rows.append(
            {
                "family": name,
                "n": len(idx),
                "measured": len(pairs),
                "loss": _mean([losses[i] for i in idx]),
                "fitness": _mean([fitness[i] for i in idx]),
                "spearman": within,
            }
        )
    return rows


def size_residuals(losses: Values, params: Sequence[int | None]) -> list[float | None]:
    """The loss with size taken out: ``loss − (a + b·ln N)``, the least-squares line over the
    members with both (a compute-optimal loss falls with N whatever the design; what is left
    is the design's). None where either is missing, or all of them with fewer than 3."""
    pairs = [(i, math.log(n), v) for i, (v, n) in enumerate(zip(losses, params, strict=True)) if v and n]
    if len(pairs) < MIN_PAIRS:
        return [None] * len(losses)
    xs, ys = [x for _, x, _ in pairs], [y for _, _, y in pairs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    out: list[float | None] = [None] * len(losses)
    for i, x, y in pairs:
        out[i] = y - (my + slope * (x - mx))
    return out


def text_rows(
    qualities: dict[int, list[float | None]],
    fitness_losses: dict[int, list[float | None]] | None,
    full: int,
    sizes: Sequence[float],
    losses: dict[float, list[float | None]],
    over: dict[float, int],
    families: Sequence[str],
    promote: float,
    resamples: int = RESAMPLES,
    params: dict[float, list[int | None]] | None = None,
    capped: dict[float, int] | None = None,
) -> list[dict[str, Any]]:
    """One row per size: the held-out loss's distribution there, ``over`` (members over the
    text), and per fidelity of the calibration (rungs and target, ascending) the ranking of
    its quality against ``−loss`` (``compare``) and, with ``fitness_losses`` (one task), of its
    held-out loss; ``families`` at the full fidelity. With ``params`` (each member's
    non-embedding N there): ``size_alone``, how N itself ranks the panel (the baseline a
    fitness must beat: more parameters get more tokens), and per fidelity ``*_given_size``,
    the same rankings against the loss with size taken out (``size_residuals``). ``capped``:
    members above the target's cap per size (counted in ``over`` and reported apart). Every
    size after the first also ranks against the first size's loss **on its own members**
    (``at_first``: per fidelity, the quality; ``first_size``: the first size's loss itself),
    so a smaller panel at a larger size is compared with like."""
    rows = []
    first = sizes[0] if sizes else None
    for size in sizes:
        target = scores(losses[size])
        ns = (params or {}).get(size)
        residual = scores(size_residuals(losses[size], ns)) if ns else None
        by = []
        for steps in sorted(qualities):
            entry: dict[str, Any] = {
                "steps": steps,
                "quality": compare(qualities[steps], target, promote, resamples),
                "loss": None,
                "quality_given_size": None,
                "loss_given_size": None,
            }
            if fitness_losses is not None:
                entry["loss"] = compare(scores(fitness_losses[steps]), target, promote, resamples)
            if residual is not None:
                entry["quality_given_size"] = compare(qualities[steps], residual, promote, resamples)
                if fitness_losses is not None:
                    fitted = scores(fitness_losses[steps])
                    entry["loss_given_size"] = compare(fitted, residual, promote, resamples)
            by.append(entry)
        same = None
        if first is not None and size != first:
            here = [None if v is None else w for v, w in zip(losses[size], losses[first], strict=True)]
            same = {
                "first_label": label(first),
                "first_size": compare(scores(here), target, promote, resamples),
                "at_first": [
                    {"steps": steps, "quality": compare(qualities[steps], scores(here), promote, resamples)}
                    for steps in sorted(qualities)
                ],
            }
        alone = None
        if ns:
            alone = compare([None if n is None else float(n) for n in ns], target, promote, resamples)
        rows.append(
            {
                "size": size,
                "label": label(size),
                "loss": distribution([v for v in losses[size] if v is not None], None),
                "over": over.get(size, 0) - (capped or {}).get(size, 0),
                "capped": (capped or {}).get(size, 0),
                "same_members": same,
                "size_alone": alone,
                "by_fidelity": by,
                "families": family_rows(families, qualities[full], losses[size], resamples),
            }
        )
    return rows


def text_transfer_rows(rows: Sequence[dict[str, Any]], full: int) -> list[TransferIn]:
    """``text_rows`` as ``transfer`` rows: ``rung@S`` (quality) and ``loss@S`` (held-out loss)
    against ``text@4x``, and at the full fidelity per family ``text@4x/ssm`` (ρ alone)."""
    names = ("n", "spearman", "spearman_low", "spearman_high", "kendall", "kendall_low", "kendall_high")
    out = []
    for row in rows:
        higher = f"text@{row['label']}"
        for entry in row["by_fidelity"]:
            for lower, by in (("rung", "quality"), ("loss", "loss")):
                c = entry["quality" if by == "quality" else "loss"]
                if c is not None:
                    fields = {k: c[k] for k in names}
                    out.append(TransferIn(f"{lower}@{entry['steps']}", higher, **fields, ranked_by=by))
        for fam in row["families"]:
            out.append(TransferIn(f"rung@{full}", f"{higher}/{fam['family']}", fam["n"], fam["spearman"]))
    return out


__all__ = [
    "Grown",
    "TextTarget",
    "check_fed",
    "family_of",
    "family_rows",
    "grow",
    "grow_panel",
    "label",
    "make_target",
    "non_embedding",
    "text_rows",
    "text_transfer_rows",
]
