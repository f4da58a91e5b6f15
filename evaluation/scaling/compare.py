"""Compare two fitted scaling laws (``evolve scale --against``): loss gap at matched compute,
sample efficiency, and where the curves cross.

Both ladders train on the rule ``D = r·N`` (r tokens per parameter), so training compute is
``C ≈ 6·N·D = 6·r·N²`` and, at one r, matched compute means matched N. Every quantity here is
therefore a function of r (``tokens_per_param``): a 1-D fit ``L(N)`` is only valid at the r of
its ladder, a surface fit ``L(N, D)`` is evaluated on any rule as ``L(N, r·N)``. Write
``L_A(N)``, ``L_B(N)`` for the two losses on the rule.

* **Loss gap** ``Δ(N) = L_B(N) − L_A(N)`` (positive: B is worse) on a log grid over the
  compared range, the sizes both ladders cover, ``[max(min N_A, min N_B), min(max N_A,
  max N_B)]``; ``gap_mean`` is its mean over log N.
* **Sample efficiency** ``k(N)``, the factor by which B needs more data than A to reach A's
  loss (k > 1: B is less sample-efficient):

  - both fits are surfaces: at equal parameters, ``L_B(N, k·r·N) = L_A(N, r·N)``, so
    ``k = (B_B / (L_A(N, rN) − E_B − A_B·N^(−α_B)))^(1/β_B) / (r·N)``; undefined where A's
    loss is at or below B's infinite-data loss at that size, ``E_B + A_B·N^(−α_B)``;
  - otherwise (1-D fits on the rule): ``L_B(k·N) = L_A(N)``. On the rule, data and
    parameters grow together, so B needs k× the data *and* k× the parameters (k² the
    compute) for A's loss; undefined where A's loss is at or below B's floor ``E_B``.

  Reported at the geometric middle of the compared range, with its range over it.
* **Crossover** the N in [1, 10^24] where ``L_A(N) = L_B(N)`` (a model has at least one
  parameter; no ladder extrapolates beyond 10^24): sign changes of the difference on a log
  grid, each refined by ``scipy.optimize.brentq``; ``crossover_params`` is the largest (beyond
  it the asymptotic order holds), None when the curves do not cross. Fitted curves that differ
  by noise alone cross somewhere far out, so it comes with a bootstrap interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from .checks import LadderError
from .fit import Array, PowerLawFit, interval
from .surface import LossSurfaceFit

Fit = PowerLawFit | LossSurfaceFit
CROSS_RANGE = (1.0, 1e24)


@dataclass(frozen=True)
class Comparison:
    """B against A on the rule ``D = r·N`` over the sizes both ladders cover.

    ``gap_mid_ci`` is the bootstrap interval of the gap at the middle size (replicates of the
    two independent fits paired by index, Student-widened at the smaller residual degrees of
    freedom). ``crossover_ci`` is the bootstrap interval of ``crossover_params``, ``inf`` standing
    for "no crossing": an upper end of ``inf`` says the data do not establish a crossover.
    ``sample_efficiency`` is None when undefined; ``notes`` says why."""

    tokens_per_param: float
    params_range: tuple[float, float]
    compute_range: tuple[float, float]
    gap_mean: float
    gap_range: tuple[float, float]
    gap_mid: float
    gap_mid_ci: tuple[float, float]
    sample_efficiency: float | None
    sample_efficiency_range: tuple[float, float] | None
    efficiency_basis: str
    crossover_params: float | None
    crossovers: tuple[float, ...]
    crossover_ci: tuple[float, float]
    notes: tuple[str, ...]


def _rule(fit: Fit, r: float | None) -> float:
    """The tokens per param to compare at: ``r``, else the 1-D fit's own; refused when
    unknown or when it contradicts a 1-D fit's ladder."""
    own = fit.tokens_per_param if isinstance(fit, PowerLawFit) else None
    if r is None:
        if own is None:
            raise LadderError("tokens per param unknown: pass tokens_per_param (the ladders' D/N)")
        return own
    if not (math.isfinite(r) and r > 0):
        raise LadderError(f"tokens_per_param {r!r} is not a positive number")
    if own is not None and not math.isclose(own, r, rel_tol=1e-6):
        raise LadderError(f"a 1-D fit was made at {own:g} tokens per param, not {r:g}: fit both at one rule")
    return r


def resolve_rule(fit_a: Fit, fit_b: Fit, tokens_per_param: float | None = None) -> float:
    """The one rule both fits are compared at (module docstring)."""
    r = _rule(fit_a, tokens_per_param)
    return _rule(fit_b, r)


def loss_on_rule(fit: Fit, params: float | Array, tokens_per_param: float) -> Array:
    """``L(N)`` on the rule ``D = r·N``."""
    if isinstance(fit, LossSurfaceFit):
        return fit.along(tokens_per_param, params)
    return fit.loss(params)


def _dof(fit: Fit) -> int:
    return fit.n_points - (3 if isinstance(fit, PowerLawFit) else 5)


def loss_gap(fit_a: Fit, fit_b: Fit, params: float | Array, tokens_per_param: float) -> Array:
    """``L_B(N) − L_A(N)`` on the rule (positive: B is worse)."""
    return loss_on_rule(fit_b, params, tokens_per_param) - loss_on_rule(fit_a, params, tokens_per_param)


def sample_efficiency(fit_a: Fit, fit_b: Fit, params: float | Array, tokens_per_param: float) -> Array:
    """``k(N)`` (module docstring) at each of ``params``; raises ``LadderError`` (one line)
    where it is undefined: B never reaches A's loss."""
    n = np.atleast_1d(np.asarray(params, dtype=float))
    r = tokens_per_param
    target = loss_on_rule(fit_a, n, r)
    if isinstance(fit_a, LossSurfaceFit) and isinstance(fit_b, LossSurfaceFit):
        headroom = target - fit_b.E - fit_b.A * n ** (-fit_b.alpha)
        if np.any(headroom <= 0):
            i = int(np.argmax(headroom <= 0))
            raise LadderError(
                f"B never reaches A's loss {target[i]:.4g} at N={n[i]:.3g}: even with unlimited data "
                f"B's loss there is {target[i] - headroom[i]:.4g}"
            )
        return np.asarray((fit_b.B / headroom) ** (1.0 / fit_b.beta) / (r * n))
    floor = fit_b.E
    if np.any(target <= floor):
        i = int(np.argmax(target <= floor))
        raise LadderError(
            f"B never reaches A's loss {target[i]:.4g} (at N={n[i]:.3g}): B's fitted floor is {floor:.4g}"
        )
    if isinstance(fit_b, PowerLawFit):
        reach = (fit_b.A / (target - fit_b.E)) ** (1.0 / fit_b.alpha)
    else:  # a surface on the rule: decreasing in N, invert numerically
        lo, hi = math.log(CROSS_RANGE[0]) - 30, math.log(CROSS_RANGE[1]) + 30

        def f(u: float, t: float) -> float:
            return float(loss_on_rule(fit_b, math.exp(u), r)) - t

        try:
            reach = np.array([math.exp(brentq(f, lo, hi, args=(float(t),), xtol=1e-12)) for t in target])
        except ValueError:
            raise LadderError(f"B reaches A's loss only beyond N={math.exp(hi):.3g}") from None
    return np.asarray(reach / n)


def crossings(fit_a: Fit, fit_b: Fit, tokens_per_param: float) -> tuple[float, ...]:
    """Every N in ``CROSS_RANGE`` where the two curves on the rule cross, ascending."""
    u = np.linspace(math.log(CROSS_RANGE[0]), math.log(CROSS_RANGE[1]), 4001)

    def diff(v: float | Array) -> Array:
        return loss_gap(fit_a, fit_b, np.exp(v), tokens_per_param)

    d = diff(u)
    if np.all(np.abs(d) <= 1e-12 * np.abs(loss_on_rule(fit_a, np.exp(u), tokens_per_param))):
        return ()  # the same curve
    roots = [float(np.exp(u[i])) for i in np.flatnonzero(d[:-1] == 0)]
    for i in np.flatnonzero(d[:-1] * d[1:] < 0):
        roots.append(math.exp(brentq(lambda v: float(diff(v)), u[i], u[i + 1], xtol=1e-12)))
    return tuple(sorted(roots))


def _replicates(fit: Fit, params: Array, tokens_per_param: float, k: int) -> Array:
    """The first ``k`` bootstrap replicates' losses on the rule at ``params``: (k, len)."""
    s, n = fit.samples[:k, :, None], params[None, :]
    out = s[:, 0] + s[:, 1] * n ** (-s[:, 2])
    if isinstance(fit, LossSurfaceFit):
        out = out + s[:, 3] * (tokens_per_param * n) ** (-s[:, 4])
    return np.asarray(out)


def _bootstrap(
    fit_a: Fit, fit_b: Fit, n_mid: float, r: float, gap: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The gap's interval at ``n_mid`` and the crossover's. The fits' bootstraps are
    independent, so pairing replicates by index draws from the joint distribution. The gap's
    interval is Student-widened at the smaller residual degrees of freedom; the crossover's is
    the plain percentile interval of each pair's largest crossing (on a grid of 800 cells, 7 %
    wide), ``inf`` for a pair that does not cross."""
    k = min(len(fit_a.samples), len(fit_b.samples))
    if k == 0:
        return (math.nan, math.nan), (math.nan, math.nan)
    conf = min(fit_a.confidence, fit_b.confidence)
    dof = max(1, min(_dof(fit_a), _dof(fit_b)))
    mid = np.array([n_mid])
    ci = interval((_replicates(fit_b, mid, r, k) - _replicates(fit_a, mid, r, k))[:, 0], gap, conf, dof)
    grid = np.geomspace(*CROSS_RANGE, 801)
    d = _replicates(fit_b, grid, r, k) - _replicates(fit_a, grid, r, k)
    change = d[:, :-1] * d[:, 1:] < 0
    last = change.shape[1] - 1 - np.argmax(change[:, ::-1], axis=1)
    where = np.where(change.any(axis=1), np.sqrt(grid[last] * grid[last + 1]), np.inf)
    tail = (1 - conf) / 2
    lo, hi = np.quantile(where, tail, method="lower"), np.quantile(where, 1 - tail, method="higher")
    return ci, (float(lo), float(hi))


def compare(
    fit_a: Fit, fit_b: Fit, *, tokens_per_param: float | None = None, grid_points: int = 64
) -> Comparison:
    """B against A (module docstring). ``tokens_per_param`` defaults to the 1-D fits' own
    rule. Raises ``LadderError`` (one line) when the rule is unknown or contradicts a fit, or
    when the ladders share no sizes (a comparison would extrapolate). An undefined sample
    efficiency does not refuse the comparison: it is None and ``notes`` says why."""
    r = resolve_rule(fit_a, fit_b, tokens_per_param)
    lo = max(fit_a.params_range[0], fit_b.params_range[0])
    hi = min(fit_a.params_range[1], fit_b.params_range[1])
    if lo > hi:
        raise LadderError(
            f"the ladders share no sizes (A {fit_a.params_range[0]:.3g}-{fit_a.params_range[1]:.3g}, "
            f"B {fit_b.params_range[0]:.3g}-{fit_b.params_range[1]:.3g}): a comparison would extrapolate"
        )
    n = np.geomspace(lo, hi, grid_points)
    n_mid = math.sqrt(lo * hi)
    gap = loss_gap(fit_a, fit_b, n, r)
    gap_mid = float(loss_gap(fit_a, fit_b, n_mid, r))
    basis = "surface" if isinstance(fit_a, LossSurfaceFit) and isinstance(fit_b, LossSurfaceFit) else "rule"
    notes: list[str] = []
    eff: float | None = None
    eff_range: tuple[float, float] | None = None
    try:
        k = sample_efficiency(fit_a, fit_b, np.append(n, n_mid), r)
        eff, eff_range = float(k[-1]), (float(k[:-1].min()), float(k[:-1].max()))
    except LadderError as e:
        notes.append(f"sample efficiency undefined: {e}")
    cross = crossings(fit_a, fit_b, r)
    gap_ci, cross_ci = _bootstrap(fit_a, fit_b, n_mid, r, gap_mid)
    return Comparison(
        tokens_per_param=r,
        params_range=(lo, hi),
        compute_range=(6 * r * lo * lo, 6 * r * hi * hi),
        gap_mean=float(gap.mean()),
        gap_range=(float(gap.min()), float(gap.max())),
        gap_mid=gap_mid,
        gap_mid_ci=gap_ci,
        sample_efficiency=eff,
        sample_efficiency_range=eff_range,
        efficiency_basis=basis,
        crossover_params=cross[-1] if cross else None,
        crossovers=cross,
        crossover_ci=cross_ci,
        notes=tuple(notes),
    )
