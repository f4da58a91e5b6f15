"""Which regime a ladder trains in, the epoch cap, and the default sizes a text allows.

A ladder's fit is a scaling law only when the tokens grow with the size: with a fixed token
count ``D`` for every size, ``L(N)`` says which size learns most from those ``D`` tokens, and
its floor ``E`` is the loss of an infinite model *on D tokens*, not the text's. With tokens
per parameter ``r`` (``D = r·N``, N the non-embedding parameters, Kaplan et al. 2020):

* **compute-optimal**: ``r`` near 20 (``COMPUTE_OPTIMAL_RANGE``; Hoffmann et al. 2022) and
  every size sees its text at most once;
* **data-constrained**: some size repeats the text, at most ``MAX_EPOCHS`` (4) times: up to
  about 4 epochs repeated tokens are worth nearly as much as new ones (Muennighoff et al.
  2023, "Scaling Data-Constrained Language Models");
* **proportional**: ``r`` away from 20, at most once over the text: a scaling law along
  ``D = r·N``, not along the compute-optimal frontier;
* **fixed-data**: one ``D`` for every size (``--tokens``, or ``run --ladder-tokens``):
  labelled, never called a scaling law.

**The epoch cap.** A point that would pass over the task's training text more than
``MAX_EPOCHS`` times is refused (``epoch_cap``, one line that names the option, the tokens,
the text's and the largest size the text allows, ``largest_size`` in whole steps as a plan
trains): beyond it the held-out loss measures memorisation more than scale. A fitness is
held to the same cap (``steps_cap``: `evolve run`'s ``--steps``, `evolve calibrate`'s
``--target``), and `evolve run` checks its settings before a run exists
(`evolution.preflight.check_text`).

**Default sizes** (``default_top``): the largest size is the one whose ``r·N`` tokens are one
pass over the text (the compute-optimal regime) or, where that leaves less than
``LEAST_SPAN`` decades above the design's smallest model, that span (data-constrained), never
more than ``MAX_EPOCHS`` passes; the one-pass size at most ``DEFAULT_TOP`` (500k: one CPU
trains a ladder up there at 20 tokens per parameter in about half an hour).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from dogma_evolve.evaluation.scaling import LadderError

MAX_EPOCHS = 4.0
COMPUTE_OPTIMAL = 20.0
COMPUTE_OPTIMAL_RANGE = (10.0, 40.0)
DEFAULT_TOP = 500_000
DEFAULT_SPAN = 1.7  # decades: the default ladder's 5 sizes over x50
LEAST_SPAN = 1.55  # decades: above the 1.5 a fit needs, as the axis' sizes are coarse


@dataclass(frozen=True)
class Regime:
    """The regime of a ladder's first budget (the one ``L(N)`` is fitted on)."""

    name: str  # compute-optimal | data-constrained | proportional | fixed-data
    scaling_law: bool
    max_epochs: float | None  # passes over the training text, where it is finite
    message: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def classify(
    per_param: float | None, tokens: int | None, epochs: Sequence[float | None], text_tokens: int | None
) -> Regime:
    """The regime (module docstring) of a budget whose points pass ``epochs`` times over a
    text of ``text_tokens`` (None: a generated task, endless)."""
    known = [e for e in epochs if e is not None]
    most = max(known) if known else None
    passes = "" if most is None else f"; at most {most:.2f} epochs of the {text_tokens:,}-token text"
    if tokens is not None:
        return Regime(
            "fixed-data",
            False,
            most,
            f"fixed-data ladder: every size trains on the same {tokens:,} tokens, so L(N) ranks which "
            f"size learns most from them (its E is the loss at infinite size on that data): not a scaling "
            f"law; give --tokens-per-param for one{passes}",
        )
    r = float(per_param or 0.0)
    lo, hi = COMPUTE_OPTIMAL_RANGE
    if most is not None and most > 1.0:
        return Regime(
            "data-constrained",
            True,
            most,
            f"data-constrained scaling law: {r:g} tokens per non-embedding parameter, the largest sizes "
            f"repeat the text up to {most:.2f} times (at most {MAX_EPOCHS:g}: repeated tokens are worth "
            "nearly as much as new ones there, Muennighoff et al. 2023)",
        )
    if lo <= r <= hi:
        return Regime(
            "compute-optimal",
            True,
            most,
            f"compute-optimal scaling law: {r:g} tokens per non-embedding parameter (~{COMPUTE_OPTIMAL:g}, "
            f"Hoffmann et al. 2022), every size sees its tokens once{passes}",
        )
    return Regime(
        "proportional",
        True,
        most,
        f"scaling law along D = {r:g}·N (non-embedding N), away from the compute-optimal "
        f"~{COMPUTE_OPTIMAL:g} tokens per parameter{passes}",
    )


def largest_size(text_tokens: int, per_param: float, epochs: float, per_step: int = 1) -> int:
    """The most non-embedding parameters whose ``per_param·N`` tokens fit ``epochs`` passes,
    trained in whole steps of ``per_step`` tokens as a plan trains them
    (``max(1, round(per_param·N / per_step))`` steps): the largest size a refusal names."""
    steps = int(text_tokens * epochs / per_step)
    n = int((steps + 0.5) * per_step / per_param)
    while n > 0 and max(1, round(per_param * n / per_step)) > steps:
        n -= 1
    return n


def passes(epochs: float) -> str:
    """``epochs`` for a refusal: one decimal, more where one would round down to the cap."""
    return f"{epochs:.1f}" if round(epochs, 1) > MAX_EPOCHS else f"{epochs:.4f}"


def over_cap(epochs: float | None) -> bool:
    """Whether ``epochs`` passes over a text are more than ``MAX_EPOCHS``."""
    return epochs is not None and epochs > MAX_EPOCHS + 1e-9


def epoch_cap(
    points: Sequence[tuple[int, int, float | None]],
    text_tokens: int | None,
    per_param: Sequence[float | None],
    setting: str = "--sizes",
    what: str = "size(s)",
    hint: str = "--task bytelm:PATH",
    per_step: int = 1,
) -> None:
    """Refuse (``LadderError``, one line) any point ``(params, tokens, epochs)`` over
    ``MAX_EPOCHS`` passes of the text (module docstring): the line names ``setting`` (the
    option that asked for it), the tokens of the worst point, the text's tokens and the
    largest size the text allows in whole steps of ``per_step`` tokens (``hint``: how to
    give a larger text)."""
    over = [p for p in points if over_cap(p[2])]
    if not over or not text_tokens:
        return
    worst = max(over, key=lambda p: p[2] or 0.0)
    most, params, tokens = passes(worst[2] or 0.0), worst[0], worst[1]
    ratios = [r for r in per_param if r is not None]
    if not ratios:  # a fixed token count: the same for every size
        allowed = largest_size(text_tokens, 1.0, MAX_EPOCHS, per_step)
        raise LadderError(
            f"{setting}: {tokens:,} tokens a size would pass over the {text_tokens:,}-token training "
            f"text more than {MAX_EPOCHS:g} times ({most}): the held-out loss would measure "
            f"memorisation, not scale; the text allows at most {allowed:,} tokens a size; use a "
            f"smaller {setting} or a larger text ({hint})"
        )
    r = max(ratios)
    allowed = largest_size(text_tokens, r, MAX_EPOCHS, per_step)
    raise LadderError(
        f"{setting}: {len({p[0] for p in over})} {what} from {min(p[0] for p in over):,} parameters would "
        f"pass over the {text_tokens:,}-token training text more than {MAX_EPOCHS:g} times (up to "
        f"{most} at {params:,} parameters: {tokens:,} tokens): their held-out loss would measure "
        f"memorisation, not scale; the text allows at most {allowed:,} parameters at {r:g} "
        f"tokens/param; use smaller {setting}, fewer tokens per parameter or a larger text ({hint})"
    )


def steps_cap(
    setting: str, steps: int, per_step: int, text_tokens: int | None, task: str, multiple: int = 1
) -> None:
    """Refuse (``LadderError``, one line) a training of up to ``multiple × steps`` steps of
    ``per_step`` tokens that passes over ``task``'s training text more than ``MAX_EPOCHS``
    times (a fitness is read on held-out text as a ladder's points are): the line names
    ``setting``, the tokens, the text's and the most ``steps`` the text allows."""
    if not text_tokens:
        return
    tokens = multiple * steps * per_step
    if not over_cap(tokens / text_tokens):
        return
    most = largest_size(text_tokens, multiple * per_step, MAX_EPOCHS)
    times = f", up to {multiple}x under --budget flops," if multiple > 1 else ""
    raise LadderError(
        f"{setting} {steps:,}: a candidate trains{times} on {multiple * steps:,} steps of {per_step:,} "
        f"tokens, {tokens:,} tokens: {passes(tokens / text_tokens)} passes over the {task} task's "
        f"{text_tokens:,}-token training text, more than {MAX_EPOCHS:g}: its held-out loss would "
        f"measure memorisation; the text allows at most {setting} {most:,}"
    )


def default_top(smallest: int, text_tokens: int | None, per_param: float | None) -> float:
    """The largest default size (module docstring) for a design whose smallest model has
    ``smallest`` non-embedding parameters."""
    if not text_tokens or not per_param:  # a generated task: endless data
        return max(10_000, smallest) * 10**DEFAULT_SPAN
    once = min(largest_size(text_tokens, per_param, 1.0), DEFAULT_TOP)
    top = max(once, smallest * 10**LEAST_SPAN)  # the least span a fit accepts, with a margin
    return float(min(top, largest_size(text_tokens, per_param, MAX_EPOCHS)))


def default_targets(smallest: int, top: float, rungs: int = 5) -> list[float]:
    """``rungs`` log-even targets up to ``top``, from ``DEFAULT_SPAN`` decades below it, or
    from ``smallest`` when that lies within a factor of 2 (the axis' coarse low end would
    otherwise snap the first target up and shorten the span)."""
    low = max(float(smallest), top / 10**DEFAULT_SPAN)
    if low < 2 * smallest:
        low = float(smallest)
    if top <= low:
        return [float(smallest)] * rungs
    return [low * (top / low) ** (k / (rungs - 1)) for k in range(rungs)]


def text_tokens_of(task: object) -> int | None:
    """Tokens of a task's finite training text (``bytelm``), None for a generated task."""
    data = getattr(task, "train_split_tokens", None)
    return int(data) if data else None


__all__ = [
    "COMPUTE_OPTIMAL",
    "MAX_EPOCHS",
    "Regime",
    "classify",
    "default_targets",
    "default_top",
    "epoch_cap",
    "largest_size",
    "over_cap",
    "passes",
    "steps_cap",
    "text_tokens_of",
]
