"""Scaling-law analysis: fit how loss falls with model size (and data), compare two designs.

- ``fit_power_law(params, losses, ...)`` -> ``PowerLawFit``: ``L(N) = E + A·N^(−α)`` with
  bootstrap intervals (``fit.py``);
- ``fit_loss_surface(params, tokens, losses, ...)`` -> ``LossSurfaceFit``:
  ``L(N, D) = E + A·N^(−α) + B·D^(−β)`` (``surface.py``);
- ``compare(fit_a, fit_b, tokens_per_param=r)`` -> ``Comparison``: loss gap at matched
  compute ``C ≈ 6·N·D``, sample efficiency, crossover (``compare.py``);

Every refusal is a ``LadderError`` (a ``ValueError``) with a one-line message.
"""

from .compare import Comparison, compare, crossings, loss_gap, loss_on_rule, sample_efficiency
from .fit import LadderError, PowerLawFit, fit_power_law, min_boot
from .surface import LossSurfaceFit, fit_loss_surface

__all__ = [
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
