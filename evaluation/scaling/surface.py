"""Loss surface over model size and data, with bootstrap intervals.

The model (Hoffmann et al. 2022, "approach 3")::

    L(N, D) = E + A · N^(−α) + B · D^(−β),        E, A, B ≥ 0;  α, β > 0

N is the parameter count, D the training tokens. Fitted by (weighted) least squares in a
well-conditioned parametrisation, ``x = ln(N / N_ref)``, ``y = ln(D / D_ref)`` (geometric
means), ``L = E + exp(a − α·x) + exp(b − β·y)``: for fixed (α, β) the model is linear and
non-negative in ``(E, e^a, e^b)``, so a grid over (α, β) with a non-negative linear solve at
each cell finds the global basin, and ``scipy.optimize.least_squares`` polishes from there
under the bounds. Intervals: the residual bootstrap of ``fit.py`` (leverage-adjusted residuals,
percentile intervals widened by the Student factor at n − 5 degrees of freedom); each replicate
is refitted by ``least_squares`` from the point estimate.

The surface needs D to vary independently of N: at least 3 distinct token counts, and runs
that do not all lie on one rule ``D ∝ N^k`` (then N and D cannot be told apart; fit L(N) with
``fit_power_law`` instead).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, nnls

from .checks import LadderError, check_boot
from .fit import (
    ALPHA_MAX,
    ALPHA_MIN,
    Array,
    as_points,
    interval,
    leverages,
    resample_residuals,
)

_GRID = np.geomspace(0.02, 2.0, 24)


@dataclass(frozen=True)
class LossSurfaceFit:
    """``L(N, D) = E + A·N^(−α) + B·D^(−β)`` fitted to runs at several (N, D), with
    bootstrap intervals; ``samples`` rows are ``(E, A, α, B, β)``."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    E_ci: tuple[float, float]
    A_ci: tuple[float, float]
    alpha_ci: tuple[float, float]
    B_ci: tuple[float, float]
    beta_ci: tuple[float, float]
    residual: float
    residuals: tuple[float, ...]
    n_points: int
    params_range: tuple[float, float]
    tokens_range: tuple[float, float]
    confidence: float
    n_boot: int
    samples: Array = field(default_factory=lambda: np.zeros((0, 5)), repr=False, compare=False)

    def loss(self, params: float | Array, tokens: float | Array) -> Array:
        """The fitted loss at (``params``, ``tokens``), broadcast."""
        n, d = np.asarray(params, dtype=float), np.asarray(tokens, dtype=float)
        return self.E + self.A * n ** (-self.alpha) + self.B * d ** (-self.beta)

    def along(self, tokens_per_param: float, params: float | Array) -> Array:
        """The fitted loss on the rule ``D = r·N``: ``L(N, r·N)``."""
        n = np.asarray(params, dtype=float)
        return self.loss(n, tokens_per_param * n)


def _model(t: Array, x: Array, y: Array) -> Array:
    return t[0] + np.exp(t[1] - t[2] * x) + np.exp(t[3] - t[4] * y)


def _jac(t: Array, x: Array, y: Array) -> Array:
    g, h = np.exp(t[1] - t[2] * x), np.exp(t[3] - t[4] * y)
    return np.stack([np.ones_like(x), g, -x * g, h, -y * h], axis=1)


_LOWER = np.array([0.0, -np.inf, ALPHA_MIN, -np.inf, ALPHA_MIN])
_UPPER = np.array([np.inf, np.inf, ALPHA_MAX, np.inf, ALPHA_MAX])


def _lsq(x: Array, y: Array, loss: Array, sw: Array, t0: Array) -> tuple[Array, float]:
    t0 = np.clip(t0, _LOWER + 1e-9, _UPPER - 1e-9)
    res = least_squares(
        lambda t: sw * (_model(t, x, y) - loss),
        t0,
        jac=lambda t: sw[:, None] * _jac(t, x, y),
        bounds=(_LOWER, _UPPER),
        x_scale="jac",
        xtol=1e-10,
        ftol=1e-10,
    )
    return res.x, float(2 * res.cost)


def _grid_start(x: Array, y: Array, loss: Array, sw: Array) -> list[Array]:
    """Starting points: the best (α, β) cells of the grid, each with its non-negative
    linear solution for (E, e^a, e^b)."""
    scored = []
    for al in _GRID:
        for be in _GRID:
            m = np.stack([np.ones_like(x), np.exp(-al * x), np.exp(-be * y)], axis=1)
            coef, rnorm = nnls(sw[:, None] * m, sw * loss)
            scored.append((rnorm, al, be, coef))
    scored.sort(key=lambda s: s[0])
    starts = []
    for _, al, be, coef in scored[:4]:
        c = np.maximum(coef, 1e-12)
        starts.append(np.array([coef[0], math.log(c[1]), al, math.log(c[2]), be]))
    return starts


def fit_loss_surface(
    params: Sequence[float] | Array,
    tokens: Sequence[float] | Array,
    losses: Sequence[float] | Array,
    *,
    weights: Sequence[float] | Array | None = None,
    n_boot: int = 1000,
    rng_seed: int = 0,
    confidence: float = 0.95,
) -> LossSurfaceFit:
    """Fit ``L(N, D) = E + A·N^(−α) + B·D^(−β)`` to one run per point.

    Raises ``LadderError`` (one line) on a non-finite loss, a non-positive size, token count or
    weight, fewer than 3 distinct sizes or token counts, runs that all lie on one rule
    ``D ∝ N^k``, fewer than 8 runs (3 residual degrees of freedom), ``n_boot`` below
    ``min_boot(confidence)``, or a best fit that puts α or β at a bound."""
    loss = as_points("losses", losses)
    n_arr = as_points("params", params, loss.size, positive=True)
    d_arr = as_points("tokens", tokens, loss.size, positive=True)
    w = np.ones_like(loss) if weights is None else as_points("weights", weights, loss.size, positive=True)
    for name, arr in (("sizes", n_arr), ("token counts", d_arr)):
        if np.unique(arr).size < 3:
            raise LadderError(f"{np.unique(arr).size} distinct {name}: the loss surface needs at least 3")
    if loss.size < 8:
        raise LadderError(f"{loss.size} runs: the loss surface (5 parameters) needs at least 8")
    check_boot(n_boot, confidence)
    n_ref, d_ref = (math.exp(float(np.mean(np.log(a)))) for a in (n_arr, d_arr))
    x, y = np.log(n_arr / n_ref), np.log(d_arr / d_ref)
    design = np.stack([x, y], axis=1)
    sv = np.linalg.svd(design - design.mean(0), compute_uv=False)
    if sv[-1] < 1e-6 * sv[0]:
        raise LadderError(
            "the runs lie on one rule D ∝ N^k (tokens do not vary at fixed size): "
            "the surface cannot separate N from D; fit L(N) with fit_power_law"
        )
    sw = np.sqrt(w / w.mean())

    best: tuple[Array, float] | None = None
    for t0 in _grid_start(x, y, loss, sw):
        t, rss = _lsq(x, y, loss, sw, t0)
        if best is None or rss < best[1]:
            best = (t, rss)
    assert best is not None
    t = best[0]
    for name, v in (("α", t[2]), ("β", t[4])):
        if not ALPHA_MIN * 1.01 < v < ALPHA_MAX * 0.99:
            raise LadderError(
                f"the best fit puts {name} at its bound ({v:.3g}, range [{ALPHA_MIN}, {ALPHA_MAX}]): "
                "the losses do not follow the surface over these runs"
            )
    fitted = _model(t, x, y)
    resid = loss - fitted
    jac = sw[:, None] * _jac(t, x, y)
    rng = np.random.default_rng(rng_seed)
    ys = resample_residuals(fitted, resid, sw**2, leverages(jac), n_boot, rng)
    reps = np.array([_lsq(x, y, yb, sw, t)[0] for yb in ys])
    # back to (E, A, α, B, β): A = e^a · N_ref^α, B = e^b · D_ref^β
    samples = np.stack(
        [
            reps[:, 0],
            np.exp(reps[:, 1]) * n_ref ** reps[:, 2],
            reps[:, 2],
            np.exp(reps[:, 3]) * d_ref ** reps[:, 4],
            reps[:, 4],
        ],
        axis=1,
    )
    est = [t[0], math.exp(t[1]) * n_ref ** t[2], t[2], math.exp(t[3]) * d_ref ** t[4], t[4]]
    dof = loss.size - 5
    cis = [interval(samples[:, i], est[i], confidence, dof, log=i in (1, 3)) for i in range(5)]
    for i in (0, 2, 4):  # E ≥ 0, α, β > 0
        cis[i] = (max(cis[i][0], 0.0), cis[i][1])
    return LossSurfaceFit(
        E=float(est[0]),
        A=float(est[1]),
        alpha=float(est[2]),
        B=float(est[3]),
        beta=float(est[4]),
        E_ci=cis[0],
        A_ci=cis[1],
        alpha_ci=cis[2],
        B_ci=cis[3],
        beta_ci=cis[4],
        residual=float(np.sqrt(np.mean(resid**2))),
        residuals=tuple(float(r) for r in resid),
        n_points=int(loss.size),
        params_range=(float(n_arr.min()), float(n_arr.max())),
        tokens_range=(float(d_arr.min()), float(d_arr.max())),
        confidence=confidence,
        n_boot=n_boot,
        samples=samples,
    )
