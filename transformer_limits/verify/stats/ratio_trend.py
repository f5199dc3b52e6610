"""Trend of a ratio over a complete two-parameter grid: does err / (claimed rate) grow? (docs/theory.md
§A.5; the ``rate_bound_holds`` checks of ``attention-depth-width`` and ``transformer-limits rate check``.)

A bound err ≤ C · rate holds with some constant iff r = err / rate stays bounded.  Over a grid
(p_1 levels) × (p_2 levels) with seeds, the seed mean r̄ of every cell is regressed jointly,

    log r̄(a, b) = c + s_1 log p_1[a] + s_2 log p_2[b]      (n_1 · n_2 cells, dof = cells − 3),

and each slope gets a one-sided (1 − α) lower bound: the conservative union (the smaller bound) of the
OLS t bound (:func:`~transformer_limits.verify.stats.intervals.t_interval`, se_k = sqrt(s² [(XᵀX)⁻¹]_kk))
and the seed-bootstrap percentile bound (the seeds resampled jointly over the grid, since seed j
shares its law across the grid).  A slope whose lower bound is > 0 says r grows in that parameter.

:func:`ratio_bound_check` is the verdict ``rate_bound_holds`` on such a grid (written once, used by
``attention-depth-width`` and ``transformer-limits rate check``): both slopes are bounded at level α/2
(Bonferroni over the two slopes), and the check fails when some lower bound is > 0, so a ratio that
does not grow (s_1, s_2 ≤ 0) fails with probability at most α.  Its power against a ratio growing
like p^s₁ in one parameter is :func:`trend_power`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from transformer_limits.verify.stats.intervals import t_interval

__all__ = ["ratio_bound_check", "ratio_trend", "trend_power"]


def ratio_trend(ratio: np.ndarray, grid_L, grid_H, *, seed: int, alpha: float, n_boot: int = 2000) -> dict[str, Any]:
    """Slopes (s_L, s_H) of ``log r̄ = a + s_L log L + s_H log H`` over the whole grid with their one-sided
    (1 − ``alpha``) lower bounds.  ``ratio``: (n_L, n_H, seeds), positive; ``grid_L`` (n_L,), ``grid_H``
    (n_H,); ``n_boot`` seed resamples from ``numpy.random.default_rng(seed)``.

    Returns ``{"L": {...}, "H": {...}, "dof": cells − 3, "rms_log_residual": s}`` where each slope entry
    holds ``slope``, ``lower`` (the union bound), ``t_lower``, ``bootstrap_lower`` and ``se``.
    """
    ratio = np.asarray(ratio, dtype=np.float64)
    if ratio.ndim != 3 or ratio.shape[:2] != (np.size(grid_L), np.size(grid_H)):
        raise ValueError(f"ratio must have shape (n_L={np.size(grid_L)}, n_H={np.size(grid_H)}, seeds), "
                         f"got {ratio.shape}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    LL, HH = np.meshgrid(np.log(np.asarray(grid_L, float)), np.log(np.asarray(grid_H, float)), indexing="ij")
    X = np.column_stack([np.ones(LL.size), LL.ravel(), HH.ravel()])
    if X.shape[0] <= X.shape[1]:
        raise ValueError(f"grid_L, grid_H: {X.shape[0]} cells leave no residual degrees of freedom for 3 "
                         "coefficients (need at least 4 cells)")
    pinv = np.linalg.pinv(X)
    y = np.log(ratio.mean(axis=-1)).ravel()
    beta = pinv @ y
    dof = X.shape[0] - X.shape[1]
    s2 = float(np.sum((y - X @ beta) ** 2)) / dof
    se = np.sqrt(s2 * np.diag(np.linalg.inv(X.T @ X)))
    t_low = np.array([t_interval(beta[k], se[k], dof, level=1 - alpha, side="lower")[0] for k in range(3)])
    rng = np.random.default_rng(seed)
    n_seeds = ratio.shape[-1]
    idx = rng.integers(n_seeds, size=(n_boot, n_seeds))
    boot_y = np.log(ratio[:, :, idx].mean(axis=-1)).reshape(-1, n_boot)  # (cells, n_boot)
    boot_beta = pinv @ boot_y
    pct_low = np.quantile(boot_beta, alpha, axis=1)
    low = np.minimum(t_low, pct_low)
    return {name: {"slope": float(beta[k]), "lower": float(low[k]), "t_lower": float(t_low[k]),
                   "bootstrap_lower": float(pct_low[k]), "se": float(se[k])}
            for k, name in ((1, "L"), (2, "H"))} | {"dof": dof, "rms_log_residual": float(np.sqrt(s2))}


def trend_power(trend: dict[str, Any], alternative_slope: float, params: tuple[str, ...] = ("L", "H")) -> dict[str, Any]:
    """Power of the ratio-trend test (each slope rejected when its lower bound is > 0) against a ratio
    that grows like p^s₁ in one parameter (``alternative_slope`` = s₁ > 0): per slope, the shift
    model of :func:`~transformer_limits.verify.stats.power.bound_power` with D = s₁, the half-width
    slope − lower of the bound that decided it and the OLS standard error; the check's power is
    the smaller (docs/verification.md, "Power").  Returns ``{"power", "per_slope", "worst",
    "half_width", "se"}``."""
    from transformer_limits.verify.stats.power import bound_power

    if not alternative_slope > 0:
        raise ValueError(f"alternative_slope must be > 0 (a growing ratio), got {alternative_slope!r}")
    per = {k: bound_power(alternative_slope, trend[k]["slope"] - trend[k]["lower"], trend[k]["se"]) for k in params}
    worst = min(per, key=per.__getitem__)
    return {"power": per[worst], "per_slope": per, "worst": worst,
            "half_width": trend[worst]["slope"] - trend[worst]["lower"], "se": trend[worst]["se"]}


def ratio_bound_check(name: str, claim: str, ratio: np.ndarray, grid_1, grid_2, *, alpha: float, seed: int,
                      alternative: float, alternative_text: str, params: tuple[str, str] = ("L", "H"),
                      ratio_text: str = "e / claim", n_boot: int | None = None,
                      details: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The verdict "the ratio ``ratio`` (n_1, n_2, seeds) of the error to the claimed rate does not grow
    over the grid ``grid_1`` × ``grid_2``" (the bound err = O(claim) holds), and the trend it decided on.

    :func:`ratio_trend` at level α/2 per slope (Bonferroni over the two slopes; ``n_boot`` resamples,
    default its own); the check fails when the lower bound of a slope is > 0.  ``measured`` and ``ci``
    are the slope closest to rejecting (the larger lower bound; ``(lower, inf)``).  ``statistics``
    holds ``alpha``, ``sides``, ``method``, ``design``, ``trend`` (as :func:`ratio_trend` returns it:
    "L" is the first parameter, "H" the second), ``slopes`` (the same keyed by ``params``), ``dof``,
    ``rms_log_residual``, ``worst_slope``, then ``details`` (the caller's diagnostics), and
    ``power_per_slope``: the power against a ratio growing like p^``alternative`` in one parameter
    (:func:`trend_power`) is attached with ``alternative_text``."""
    from transformer_limits.verify.verdicts import Check, attach_power

    p1, p2 = params
    trend = ratio_trend(ratio, grid_1, grid_2, seed=seed, alpha=alpha / 2, **({"n_boot": n_boot} if n_boot else {}))
    slopes = {p1: trend["L"], p2: trend["H"]}
    passed = all(s["lower"] <= 0.0 for s in slopes.values())
    worst = max(params, key=lambda k: slopes[k]["lower"])
    note = "" if passed else "; ".join(
        f"{ratio_text} grows in {k}: slope {s['slope']:.3g}, lower {1 - alpha / 2:g} bound {s['lower']:.3g} > 0"
        for k, s in slopes.items() if s["lower"] > 0)
    statistics = {"alpha": alpha, "false_failure_rate": alpha, "method": "conservative (t ∪ seed bootstrap)",
                  "sides": f"one-sided per slope (lower bound), Bonferroni over s_{p1} and s_{p2}",
                  "design": "complete grid: log r̄ = a + s_1 log p_1 + s_2 log p_2 over all cells",
                  "trend": trend, "slopes": slopes, "dof": trend["dof"], "rms_log_residual": trend["rms_log_residual"],
                  "worst_slope": f"s_{worst}", **(details or {})}
    check = Check(name, claim, 0.0, slopes[worst]["slope"], (slopes[worst]["lower"], math.inf), passed, statistics,
                  note)
    power = trend_power(trend, alternative)
    statistics["power_per_slope"] = {p1: power["per_slope"]["L"], p2: power["per_slope"]["H"]}
    attach_power(check, power["power"], alternative_text, distance=alternative, half_width=power["half_width"],
                 se=power["se"])
    return check, trend
