"""The width-scaling fit of paper C: ``log R = c + β log D`` of rank R versus FFN width D, with the
authors' OLS t-interval and our bootstraps (docs/theory.md §C.6–C.7).

* **OLS t-interval (the authors').** ``β`` and its standard error from
  :func:`scipy.stats.linregress` on ``(log D, log R)`` (natural logs), interval
  ``β ± t_{(1+confidence)/2, n−2} · SE`` (:func:`~transformer_limits.verify.stats.intervals.t_interval`),
  ``R² = r²``; at least 3 points.
* **Bootstrap (ours).** Percentile interval of ``β`` over ``B`` seeded resamples
  (``numpy.random.default_rng(seed)``).  Default ``"residual"``: the widths are a designed grid,
  so the design is kept fixed and ``log R* = ĉ + β̂ log D + e*`` with ``e*`` drawn from the
  leverage-corrected, re-centred residuals ``e_i/√(1−h_ii)`` (Davison & Hinkley 1997, alg. 6.1).
  ``"pairs"`` resamples ``(D, R)`` points with replacement; resamples with fewer than two distinct
  widths (slope undefined) are dropped and reported via ``bootstrap_n``.  With 8 widths neither
  bootstrap is exact: both are narrower than the t-interval and cover a true slope ≈ 89% of the time
  at nominal 95% under Gaussian log-noise (the t-interval is exact there; ``tests/test_stats_width_scaling.py``,
  ``tests/test_interval_coverage.py``).

This is one OLS line through all (D, R) points; the seed-aggregate power law of the rate fits is
:func:`~transformer_limits.verify.stats.power_law.fit_power_law`.

Limits: ``n_bootstrap`` is at most ``transformer_limits.resource_limits.MAX_BOOTSTRAP_REPLICATES``
(10^6) and its working set ``resource_limits.bootstrap_memory_bytes(n_bootstrap, n)`` must fit
``MEMORY_BUDGET_BYTES`` (2 GiB); both are checked before anything is allocated (``ValueError`` naming
``n_bootstrap``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from transformer_limits.resource_limits import check_bootstrap
from transformer_limits.verify.stats.intervals import t_interval
from transformer_limits.verify.stats.seed_bootstrap import ols_line

__all__ = ["WidthScalingFit", "fit_width_scaling", "bootstrap_slopes", "BootstrapMethod", "MIN_POINTS"]

MIN_POINTS = 3
BootstrapMethod = Literal["residual", "pairs"]


@dataclass(frozen=True)
class WidthScalingFit:
    """One fit of ``log R = intercept + beta · log D``.

    ``ci_low``/``ci_high``: OLS t-interval at ``confidence``; ``boot_ci_low``/``boot_ci_high``:
    bootstrap percentile interval (NaN when ``bootstrap_n == 0``).
    """

    beta: float
    intercept: float
    stderr: float
    ci_low: float
    ci_high: float
    r2: float
    n: int
    confidence: float
    boot_ci_low: float = math.nan
    boot_ci_high: float = math.nan
    bootstrap_n: int = 0
    bootstrap_method: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def covers(self, beta: float, *, bootstrap: bool = False) -> bool:
        """Whether ``beta`` lies in the t-interval (or the bootstrap interval)."""
        lo, hi = (self.boot_ci_low, self.boot_ci_high) if bootstrap else (self.ci_low, self.ci_high)
        if math.isnan(lo):
            raise ValueError("no bootstrap interval: fit with n_bootstrap > 0")
        return lo <= beta <= hi


def _log_xy(widths: Any, values: Any) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(widths, dtype=np.float64).reshape(-1)
    y = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"widths and values differ in length ({x.size} vs {y.size})")
    for name, arr in (("widths", x), ("values", y)):
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"{name}: all entries must be finite and positive (log-log fit)")
    if x.size < MIN_POINTS:
        raise ValueError(f"need at least {MIN_POINTS} points for a fit with a CI, got {x.size}")
    if np.unique(x).size < 2:
        raise ValueError("widths: need at least two distinct widths")
    return np.log(x), np.log(y)


def bootstrap_slopes(log_x: np.ndarray, log_y: np.ndarray, *, n_bootstrap: int, seed: int = 0,
                     method: BootstrapMethod = "residual") -> np.ndarray:
    """``n_bootstrap`` bootstrap replicates of the OLS slope of ``log_y`` on ``log_x`` (shape ``(B',)``).

    ``B' = n_bootstrap`` for ``"residual"``; for ``"pairs"`` degenerate resamples are dropped.
    """
    if isinstance(n_bootstrap, (int, float, np.integer, np.floating)) and n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be a positive integer, got {n_bootstrap!r}")
    n = log_x.size
    # stated limit and memory estimate (transformer_limits.resource_limits), before any allocation
    n_bootstrap = check_bootstrap(n_bootstrap, n, name="n_bootstrap")
    rng = np.random.default_rng(seed)
    if method == "residual":
        slope, intercept = np.polyfit(log_x, log_y, 1)
        fitted = intercept + slope * log_x
        xc = log_x - log_x.mean()
        leverage = 1.0 / n + xc**2 / np.sum(xc**2)
        resid = (log_y - fitted) / np.sqrt(1.0 - leverage)
        resid -= resid.mean()
        y_star = fitted + resid[rng.integers(0, n, size=(n_bootstrap, n))]
        return ols_line(np.broadcast_to(log_x, y_star.shape), y_star)[0]
    if method == "pairs":
        idx = rng.integers(0, n, size=(n_bootstrap, n))
        xs, ys = log_x[idx], log_y[idx]
        ok = np.ptp(xs, axis=1) > 0
        return ols_line(xs[ok], ys[ok])[0]
    raise ValueError(f"bootstrap method must be 'residual' or 'pairs', got {method!r}")


def fit_width_scaling(widths: Any, values: Any, *, confidence: float = 0.95, n_bootstrap: int = 0,
                  seed: int = 0, bootstrap: BootstrapMethod = "residual") -> WidthScalingFit:
    """Fit ``log R = c + β log D`` to points ``(D_i, R_i)`` (both ``(n,)``, positive, ``n ≥ 3``)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    lx, ly = _log_xy(widths, values)
    if n_bootstrap:  # refused up front (limit, memory) rather than after the OLS fit
        check_bootstrap(n_bootstrap, lx.size, name="n_bootstrap")
    res = stats.linregress(lx, ly)
    n = lx.size
    # constant log R: linregress reports NaN; the slope 0 is then exact (R² stays undefined, NaN)
    stderr = 0.0 if np.ptp(ly) == 0 else float(res.stderr)
    ci_low, ci_high = t_interval(float(res.slope), stderr, n - 2, level=confidence)
    extra: dict[str, Any] = {}
    if n_bootstrap:
        slopes = bootstrap_slopes(lx, ly, n_bootstrap=n_bootstrap, seed=seed, method=bootstrap)
        tail = 100.0 * (1.0 - confidence) / 2.0
        lo, hi = np.percentile(slopes, [tail, 100.0 - tail]) if slopes.size else (math.nan, math.nan)
        extra = dict(boot_ci_low=float(lo), boot_ci_high=float(hi), bootstrap_n=int(slopes.size),
                     bootstrap_method=bootstrap)
    return WidthScalingFit(beta=float(res.slope), intercept=float(res.intercept), stderr=stderr,
                       ci_low=ci_low, ci_high=ci_high,
                       r2=float(res.rvalue**2), n=int(n), confidence=float(confidence), **extra)
