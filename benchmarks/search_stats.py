"""Statistics for search benchmarks that can say no: paired tests and anytime curves.

Shared by the search benchmarks (`benchmarks/search_dogma.py`; the NAS-Bench-201 one can
reuse it). Everything here is pure Python over lists of floats, plus `scipy.stats` for the
t distribution when scipy is installed (it is in the project's environment).

Paired comparison of arms A and B over the same seeds s = 1..n, d_s = a_s - b_s:

- mean difference  d̄ = (1/n) Σ d_s, standard error SE = sd(d) / √n (sd with n - 1);
- paired t-test: t = d̄ / SE on n - 1 degrees of freedom, two-sided p = 2·(1 - F_t(|t|));
  identical to `scipy.stats.ttest_rel(a, b)`;
- sign-flip permutation test: under H0 (no difference) each d_s is symmetric around 0, so
  every one of the 2^n sign patterns is equally likely; p = #{patterns with |Σ ±d_s| >=
  |Σ d_s|} / 2^n, exact for n <= `EXACT_FLIPS`, else a Monte-Carlo estimate over
  `draws` random patterns with the observed one counted in (p = (k + 1) / (draws + 1)).

Anytime curves: a run is a list of (cumulative training FLOPs, best-so-far quality)
steps; `value_at(curve, x)` reads the step function at budget x (None before the run's
first full-fidelity result), `mean_curve` averages runs at a grid of budgets.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

EXACT_FLIPS = 16  # 2^16 = 65,536 sign patterns: exact up to here


def mean_se(xs: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error of the mean); SE 0 for a single value, (nan, nan) for none."""
    if not xs:
        return math.nan, math.nan
    if len(xs) == 1:
        return float(xs[0]), 0.0
    return statistics.fmean(xs), statistics.stdev(xs) / math.sqrt(len(xs))


def t_sf(t: float, df: int) -> float:
    """Survival function P(T > t) of Student's t with `df` degrees of freedom (scipy)."""
    from scipy.stats import t as student_t

    return float(student_t.sf(t, df))


def paired_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(t, two-sided p) of the paired t-test of a - b; (nan, nan) when n < 2 or sd = 0
    with d̄ = 0; (±inf, 0) when every difference is the same nonzero value."""
    d = differences(a, b)
    n = len(d)
    if n < 2:
        return math.nan, math.nan
    mean, se = mean_se(d)
    if se == 0.0:
        return (math.nan, math.nan) if mean == 0.0 else (math.copysign(math.inf, mean), 0.0)
    t = mean / se
    return t, min(1.0, 2.0 * t_sf(abs(t), n - 1))


def sign_flip_p(d: Sequence[float], draws: int = 100_000, seed: int = 0) -> float:
    """Two-sided p of the sign-flip permutation test of the paired differences `d`
    (module docstring); nan without differences."""
    n = len(d)
    if n == 0:
        return math.nan
    observed = abs(sum(d)) - 1e-12 * max(1.0, sum(abs(x) for x in d))  # ties count as extreme
    if n <= EXACT_FLIPS:
        extreme = sum(
            abs(sum(s * x for s, x in zip(signs, d, strict=True))) >= observed
            for signs in itertools.product((1.0, -1.0), repeat=n)
        )
        return extreme / 2**n
    rng = random.Random(seed)
    extreme = sum(abs(sum(x if rng.random() < 0.5 else -x for x in d)) >= observed for _ in range(draws))
    return (extreme + 1) / (draws + 1)


def differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """a_s - b_s per seed; the lists must be paired (same length, same seed order)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")
    return [x - y for x, y in zip(a, b, strict=True)]


@dataclass(frozen=True)
class Paired:
    """A paired comparison of two arms over the same seeds (module docstring)."""

    n: int
    mean: float  # d̄
    se: float  # SE of d̄
    t: float
    p_t: float  # paired t-test, two-sided
    p_perm: float  # sign-flip permutation test, two-sided

    @property
    def z(self) -> float:
        """d̄ in standard errors of the paired difference (± inf when SE = 0, d̄ != 0; nan
        for fewer than 2 pairs, which have no standard error)."""
        if self.n < 2:
            return math.nan
        if self.se > 0:
            return self.mean / self.se
        return 0.0 if self.mean == 0 or math.isnan(self.mean) else math.copysign(math.inf, self.mean)

    def beats(self, k: float = 2.0) -> bool:
        """Whether A leads B by at least `k` standard errors of the paired difference."""
        return self.n >= 2 and self.mean > 0 and self.z >= k

    def line(self, a: str, b: str, k: float = 2.0) -> str:
        """One verdict line: `a - b: +0.012 ± 0.004 (3.0 SE), t p=..., sign-flip p=...; target`."""
        return (
            f"{a} - {b}: {self.mean:+.4f} ± {self.se:.4f} ({self.z:+.1f} SE, n={self.n}), "
            f"paired t p={self.p_t:.3g}, sign-flip p={self.p_perm:.3g}; "
            f"target >= {k:g} SE: {'met' if self.beats(k) else 'missed'}"
        )


def paired(a: Sequence[float], b: Sequence[float]) -> Paired:
    """The paired comparison of `a` and `b` (same seeds, same order)."""
    d = differences(a, b)
    mean, se = mean_se(d)
    t, p = paired_t(a, b)
    return Paired(len(d), mean, se, t, p, sign_flip_p(d))


Curve = list[tuple[float, float]]  # (cumulative training FLOPs, best-so-far quality), FLOPs ascending


def value_at(curve: Curve, x: float) -> float | None:
    """The step function's value at budget `x`: the last best-so-far quality reached at
    cumulative FLOPs <= x; None when no point is."""
    out = None
    for flops, quality in curve:
        if flops > x:
            break
        out = quality
    return out


def mean_curve(curves: Sequence[Curve], grid: Sequence[float]) -> list[tuple[float, float, float, int]]:
    """(budget, mean, SE, runs counted) at each budget of `grid`, over the runs that have
    a value there (a run counts from its first full-fidelity result on)."""
    out = []
    for x in grid:
        values = [v for v in (value_at(c, x) for c in curves) if v is not None]
        m, se = mean_se(values)
        out.append((x, m, se, len(values)))
    return out


def grid(budget: float, points: int = 8) -> list[float]:
    """`points` budgets evenly spaced up to `budget` (its last point is `budget`)."""
    return [budget * (k + 1) / points for k in range(points)]


__all__ = [
    "EXACT_FLIPS",
    "Curve",
    "Paired",
    "differences",
    "grid",
    "mean_curve",
    "mean_se",
    "paired",
    "paired_t",
    "sign_flip_p",
    "t_sf",
    "value_at",
]
