"""Scaling-law analysis: fit how loss falls with model size (and data), compare two designs.

- ``fit_power_law(params, losses, ...)`` -> ``PowerLawFit``: ``L(N) = E + A·N^(−α)`` with
  bootstrap intervals (``fit.py``);
- ``fit_loss_surface(params, tokens, losses, ...)`` -> ``LossSurfaceFit``:
  ``L(N, D) = E + A·N^(−α) + B·D^(−β)`` (``surface.py``);
- ``compare(fit_a, fit_b, tokens_per_param=r)`` -> ``Comparison``: loss gap at matched
  compute ``C ≈ 6·N·D``, sample efficiency, crossover (``compare.py``);

Every refusal is a ``LadderError`` (a ``ValueError``) with a one-line message
(``checks.py``, with ``min_boot``: plain Python). Names are imported on first use (PEP 562),
so ``LadderError`` and ``min_boot`` come without numpy and scipy.
"""

from typing import TYPE_CHECKING

from dogma_evolve.evaluation.lazy import install

if TYPE_CHECKING:  # the names as type checkers see them; at run time, __getattr__
    from .checks import LadderError, min_boot
    from .compare import Comparison, compare, crossings, loss_gap, loss_on_rule, sample_efficiency
    from .fit import PowerLawFit, fit_power_law
    from .surface import LossSurfaceFit, fit_loss_surface

_PUBLIC = {
    "Comparison": "dogma_evolve.evaluation.scaling.compare",
    "LadderError": "dogma_evolve.evaluation.scaling.checks",
    "LossSurfaceFit": "dogma_evolve.evaluation.scaling.surface",
    "PowerLawFit": "dogma_evolve.evaluation.scaling.fit",
    "compare": "dogma_evolve.evaluation.scaling.compare",
    "crossings": "dogma_evolve.evaluation.scaling.compare",
    "fit_loss_surface": "dogma_evolve.evaluation.scaling.surface",
    "fit_power_law": "dogma_evolve.evaluation.scaling.fit",
    "loss_gap": "dogma_evolve.evaluation.scaling.compare",
    "loss_on_rule": "dogma_evolve.evaluation.scaling.compare",
    "min_boot": "dogma_evolve.evaluation.scaling.checks",
    "sample_efficiency": "dogma_evolve.evaluation.scaling.compare",
}

__all__ = [  # = the keys of _PUBLIC, spelt out for the linters
    "Comparison",
    "LadderError",
    "LossSurfaceFit",
    "PowerLawFit",
    "compare",
    "crossings",
    "fit_loss_surface",
    "fit_power_law",
    "loss_gap",
    "loss_on_rule",
    "min_boot",
    "sample_efficiency",
]

__getattr__ = install(__name__, _PUBLIC)
