"""An estimate with its confidence intervals: analytic t, seed-bootstrap percentile and BCa, and the
conservative union of t and percentile (docs/theory.md, the rate-fit section).

An :class:`Estimate` holds a fitted θ, its bootstrap replicates θ*_b ``(n_boot,)``, its jackknife
values θ_(i) ``(n_jack,)`` and, for the t interval, a standard error and degrees of freedom ν
(on the log scale when θ = exp(β)).  With tail τ = 1 − confidence:

* ``"t"``: θ̂ + t_{p,ν} se at the tail quantiles p (:mod:`~transformer_limits.verify.stats.intervals`);
* ``"percentile"``: the empirical quantiles of θ* at p;
* ``"bca"``: the θ* quantiles at Φ(z0 + (z0 + z_p)/(1 − a(z0 + z_p))),
  z0 = Φ⁻¹(P*(θ* < θ̂) + ½P*(θ* = θ̂)),
  a = Σu³ / (6 (Σu²)^{3/2}) with u = mean(θ_(·)) − θ_(i) (Efron 1987);
* ``"conservative"``: the union of the t and percentile intervals (a test on it rejects only when
  both do: false-failure rate ≤ α whenever either is valid).

:func:`one_sided_p_value` is the p-value of H0 θ ≤ θ₀ for the same methods, so p < α exactly when the
lower (1 − α) bound exceeds θ₀ (up to bootstrap ties).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from transformer_limits.verify.stats.distributions import normal_cdf, normal_ppf, t_sf
from transformer_limits.verify.stats.intervals import Side, t_interval

__all__ = ["CI_METHODS", "SIDES", "Estimate", "bca_constants", "one_sided_p_value"]

CI_METHODS = ("conservative", "bca", "percentile", "t")
SIDES = ("two-sided", "lower", "upper")


@dataclass(frozen=True)
class Estimate:
    """A fitted quantity θ with what is needed for its confidence intervals.

    ``bootstrap``: θ on each bootstrap resample, shape ``(n_boot,)`` (None with one seed);
    ``jackknife``: θ with one observation deleted, shape ``(n_jack,)`` (for the BCa acceleration);
    ``se``/``dof``: standard error and degrees of freedom of the analytic t-interval, on the log scale
    when ``log_scale`` (θ = exp(β), the interval is exp of β ± t se).
    """

    name: str
    value: float
    bootstrap: np.ndarray | None = None
    jackknife: np.ndarray | None = None
    se: float | None = None
    dof: int | None = None
    log_scale: bool = False

    def interval(self, confidence: float = 0.95, side: Side = "two-sided",
                 method: str = "conservative") -> tuple[float, float]:
        """Confidence interval ``(low, high)`` at level ``confidence``.

        ``side="two-sided"``: equal tails (1 − confidence)/2; ``"lower"``: lower confidence bound,
        returns ``(low, inf)``; ``"upper"``: upper bound, returns ``(-inf, high)``.  ``method``:
        ``"conservative"`` (the union of the percentile and t intervals — whichever of the two exists
        when only one does — so a test on it rejects only when both do: its false-failure rate is at
        most α whenever either interval is valid), ``"bca"`` (bias-corrected and accelerated bootstrap;
        falls back to percentile without a jackknife or when the bootstrap distribution lies on one side
        of θ), ``"percentile"`` or ``"t"``.
        """
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        if side not in SIDES:
            raise ValueError(f"side must be one of {', '.join(SIDES)}; got {side!r}")
        if method not in CI_METHODS:
            raise ValueError(f"method must be one of {', '.join(CI_METHODS)}; got {method!r}")
        tail = 1.0 - confidence
        if side == "two-sided":
            levels = np.array([tail / 2, 1 - tail / 2])
        else:
            levels = np.array([tail, 1 - tail])
        if method == "conservative":
            has_t = self.se is not None and self.dof is not None and self.dof >= 1
            has_boot = self.bootstrap is not None and self.bootstrap.size >= 2
            bounds = ([self._t_bounds(confidence, side)] if has_t else []) + \
                     ([self._bootstrap_bounds(levels, "percentile")] if has_boot or not has_t else [])
            low, high = min(b[0] for b in bounds), max(b[1] for b in bounds)
        elif method == "t":
            low, high = self._t_bounds(confidence, side)
        else:
            low, high = self._bootstrap_bounds(levels, method)
        if side == "lower":
            return float(low), float("inf")
        if side == "upper":
            return float("-inf"), float(high)
        return float(low), float(high)

    def _t_bounds(self, confidence: float, side: Side) -> np.ndarray:
        """(low, high) of the t interval (:func:`~transformer_limits.verify.stats.intervals.t_interval`),
        exp of the log-scale interval when ``log_scale``; the whole line without residual dof."""
        if self.se is None or self.dof is None:
            raise ValueError(f"method 't' is not available for {self.name!r} (no analytic standard error)")
        if self.dof < 1:
            return np.array([-np.inf, np.inf]) if not self.log_scale else np.array([0.0, np.inf])
        center = np.log(self.value) if self.log_scale else self.value
        bounds = np.array(t_interval(center, self.se, self.dof, level=confidence, side=side))
        return np.exp(bounds) if self.log_scale else bounds

    def _bootstrap_bounds(self, levels: np.ndarray, method: str) -> np.ndarray:
        boot = self.bootstrap
        if boot is None or boot.size < 2:
            raise ValueError(f"method {method!r} needs a bootstrap (n_seeds >= 2); use method='t'")
        boot = boot[np.isfinite(boot)]
        if method == "bca" and self.jackknife is not None:
            levels = _bca_levels(boot, self.value, self.jackknife, levels)
        return np.quantile(boot, levels)

    @property
    def required_bootstrap(self) -> np.ndarray:
        """``bootstrap``, for a computation that needs the replicates (ValueError without them)."""
        if self.bootstrap is None:
            raise ValueError(f"{self.name!r} has no bootstrap replicates (n_seeds >= 2 gives them)")
        return self.bootstrap

    @property
    def standard_error(self) -> float:
        """Bootstrap standard deviation of θ (the analytic ``se`` when there is no bootstrap)."""
        if self.bootstrap is not None and self.bootstrap.size > 1:
            return float(np.std(self.bootstrap, ddof=1))
        return float("nan") if self.se is None else float(self.se)


def bca_constants(boot: np.ndarray, theta: float, jack: np.ndarray) -> tuple[float, float] | None:
    """Bias correction z0 and acceleration a of BCa (Efron 1987); None when z0 is undefined (the
    bootstrap distribution lies on one side of θ)."""
    below = np.mean(boot < theta) + 0.5 * np.mean(boot == theta)
    if not 0.0 < below < 1.0:
        return None
    u = np.mean(jack) - jack
    denom = np.sum(u**2)
    a = 0.0 if denom <= 0 else float(np.sum(u**3) / (6.0 * denom**1.5))
    return float(normal_ppf(below)), a


def _bca_levels(boot: np.ndarray, theta: float, jack: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """BCa-adjusted quantile levels Φ(z0 + (z0 + z)/(1 − a(z0 + z))), z = Φ⁻¹(level); plain levels
    when the correction is undefined."""
    constants = bca_constants(boot, theta, jack)
    if constants is None:
        return levels
    z0, a = constants
    z = normal_ppf(levels)
    return normal_cdf(z0 + (z0 + z) / (1.0 - a * (z0 + z)))



def one_sided_p_value(estimate: Any, null_value: float, method: str) -> float:
    """Approximate p-value of H0: θ ≤ null_value (large θ̂ is evidence against it), for the same test
    the bound of ``method`` decides: ``"t"`` the t tail, ``"percentile"`` the bootstrap fraction
    ``F*(null) = P*(θ* ≤ null)``, ``"bca"`` the level whose BCa-adjusted quantile is F*(null),
    ``"conservative"`` the larger of the two that exist (the union
    interval rejects only when both do, so p < α exactly when the check fails, up to bootstrap ties)."""
    if method == "conservative":
        has_t = estimate.se is not None and estimate.dof is not None and estimate.dof >= 1
        has_boot = estimate.bootstrap is not None and estimate.bootstrap.size >= 2
        values = ([one_sided_p_value(estimate, null_value, "t")] if has_t else []) + \
                 ([one_sided_p_value(estimate, null_value, "percentile")] if has_boot else [])
        values = [v for v in values if not math.isnan(v)]
        return max(values) if values else float("nan")
    if method == "t":
        if estimate.se is None or not estimate.dof or estimate.se == 0:
            return float("nan")
        center = math.log(estimate.value) if estimate.log_scale else estimate.value
        null = math.log(null_value) if estimate.log_scale else null_value
        return float(t_sf((center - null) / estimate.se, estimate.dof))
    boot = estimate.bootstrap
    if boot is None:
        return float("nan")
    boot = boot[np.isfinite(boot)]
    fraction = float(np.mean(boot <= null_value))
    constants = None if method != "bca" or estimate.jackknife is None else \
        bca_constants(boot, estimate.value, estimate.jackknife)
    if constants is None or not 0.0 < fraction < 1.0:
        return fraction
    # BCa: the lower bound at level p is the bootstrap quantile at Φ(z0 + (z0 + z_p)/(1 − a(z0 + z_p)));
    # it equals the null where that level is F*(null), so invert the map for z_p.
    z0, a = constants
    w = float(normal_ppf(fraction)) - z0
    return float(normal_cdf(w / (1.0 + a * w) - z0))
