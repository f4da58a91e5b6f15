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

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as type checkers see them; at run time, __getattr__
    from .checks import LadderError, min_boot
    from .compare import Comparison, compare, crossings, loss_gap, loss_on_rule, sample_efficiency
    from .fit import PowerLawFit, fit_power_law
    from .surface import LossSurfaceFit, fit_loss_surface

_EXPORTS = {
    "Comparison": "evaluation.scaling.compare",
    "LadderError": "evaluation.scaling.checks",
    "LossSurfaceFit": "evaluation.scaling.surface",
    "PowerLawFit": "evaluation.scaling.fit",
    "compare": "evaluation.scaling.compare",
    "crossings": "evaluation.scaling.compare",
    "fit_loss_surface": "evaluation.scaling.surface",
    "fit_power_law": "evaluation.scaling.fit",
    "loss_gap": "evaluation.scaling.compare",
    "loss_on_rule": "evaluation.scaling.compare",
    "min_boot": "evaluation.scaling.checks",
    "sample_efficiency": "evaluation.scaling.compare",
}

__all__ = [  # = the keys of _EXPORTS, spelt out for the linters
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


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'evaluation.scaling' has no attribute {name!r}")


class _Package(ModuleType):
    """This package: importing a submodule named like a function it exports (`compare`)
    leaves the package's attribute to the function, as the eager imports here once did (the
    import system would set it to the submodule)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not (name in _EXPORTS and isinstance(value, ModuleType)):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
