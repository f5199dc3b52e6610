"""Free-exponent power law ``ē(p) ≈ C p^q`` with confidence intervals for q and C (docs/theory.md,
the rate-fit section).

``log ē_i = log C + q log p_i`` by OLS over an asymptotic window of the p-sorted levels
(:mod:`~transformer_limits.verify.stats.asymptotic_window`), on the seed aggregates of
:mod:`~transformer_limits.verify.stats.seed_bootstrap`.  Intervals for q and C
(:class:`~transformer_limits.verify.stats.estimate.Estimate`): the analytic OLS t-interval
(n_window − 2 degrees of freedom; se(q) = sqrt(s²/S_xx), se(log C) = sqrt(s² (1/n + x̄²/S_xx))), the
seed bootstrap (percentile and BCa, delete-one-seed jackknife for the acceleration) and — the default —
``"conservative"``, the union of the t and percentile intervals.  With fewer than ~16 seeds the
bootstrap is somewhat anti-conservative and ``method="t"`` is the safer choice; measured false-failure
rates are in docs/verification.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from transformer_limits.verify.stats.asymptotic_window import (
    AsymptoticWindow,
    LocalOrders,
    orders_of_replicates,
    select_window,
    window_options,
)
from transformer_limits.verify.stats.estimate import CI_METHODS, Estimate
from transformer_limits.verify.stats.fit_quality import FitQuality, fit_quality
from transformer_limits.verify.stats.intervals import Side
from transformer_limits.verify.stats.seed_bootstrap import (
    check_fit_options,
    ols_line,
    seed_replicates,
    sorted_levels,
)

__all__ = ["PowerLawFit", "fit_power_law"]


@dataclass(frozen=True)
class PowerLawFit:
    """``ē ≈ C p^q`` fitted over ``window.used`` (levels sorted by p).

    ``params`` ``(n_levels,)``, ``errors`` ``(n_levels, n_seeds)`` and ``level_errors`` ``(n_levels,)`` are
    the sorted inputs and aggregates; ``exponent`` (q) and ``constant`` (C, the error at p = 1) are
    :class:`Estimate`; ``local_orders`` covers all levels; ``quality`` the fitted levels.  ``method`` and
    ``confidence`` are the defaults verdicts use.
    """

    param: str
    params: np.ndarray
    errors: np.ndarray
    level_errors: np.ndarray
    window: AsymptoticWindow
    exponent: Estimate
    constant: Estimate
    local_orders: LocalOrders
    quality: FitQuality
    confidence: float
    method: str
    expected: float | None = None
    settings: dict = field(default_factory=dict)

    def estimate(self, name: str) -> Estimate:
        """``"exponent"`` (q) or ``"constant"`` (C)."""
        if name not in ("exponent", "constant"):
            raise ValueError(f"name must be 'exponent' or 'constant' for a power-law fit, got {name!r}")
        return getattr(self, name)

    def interval(self, name: str = "exponent", confidence: float | None = None, side: Side = "two-sided",
                 method: str | None = None) -> tuple[float, float]:
        return self.estimate(name).interval(confidence or self.confidence, side, method or self.method)

    def predict(self, params: Any) -> np.ndarray:
        return self.constant.value * np.asarray(params, dtype=np.float64) ** self.exponent.value

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.interval("exponent")
        return {
            "param": self.param,
            "params": [float(v) for v in self.params],
            "level_errors": [float(v) for v in self.level_errors],
            "exponent": self.exponent.value,
            "exponent_ci": [lo, hi],
            "constant": self.constant.value,
            "constant_ci": list(self.interval("constant")),
            "confidence": self.confidence,
            "method": self.method,
            "window": self.window.to_dict(),
            "local_orders": self.local_orders.to_dict(),
            "quality": self.quality.to_dict(),
            "settings": dict(self.settings),
        }


def fit_power_law(
    params: Any,
    errors: Any,
    *,
    param: str | None = None,
    expected: float | None = None,
    window: str | Sequence[int] = "auto",
    noise_floor: float | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    method: str | None = None,
    resample: str = "independent",
    aggregate: str = "mean",
    **rules: Any,
) -> PowerLawFit:
    """Fit ``ē(p) ≈ C p^q`` with CIs for q and C (see the module docstring).

    ``params``: shape ``(n_levels,)`` or a one-column mapping ``{"L": [...]}`` (names the parameter);
    ``errors``: shape ``(n_levels, n_seeds)`` (or ``(n_levels,)`` for one seed: t-interval only).
    ``window``: ``"auto"`` (:func:`choose_asymptotic_window` with ``expected``, ``noise_floor`` and
    ``rules``), ``"all"``, or indices into the p-sorted levels.  ``method``: default CI method of the
    returned fit (``"conservative"``: union of percentile and t intervals).  Every random draw comes from
    ``numpy.random.default_rng(seed)``.
    """
    check_fit_options(resample, aggregate, n_boot, confidence)
    name, p, e = sorted_levels(params, errors)
    name = param or name or "p"
    reps = seed_replicates(e, n_boot, seed, resample, aggregate)
    if method is None:
        method = "conservative"
    elif method not in CI_METHODS:
        raise ValueError(f"method must be one of {', '.join(CI_METHODS)}; got {method!r}")
    chosen = select_window(window, p, reps, expected, noise_floor, rules)
    idx = np.array(chosen.used)
    x = np.log(p[idx])
    slope, intercept = (float(v) for v in ols_line(x, reps.observed[idx]))
    n = idx.size
    resid = reps.observed[idx] - (intercept + slope * x)
    dof = n - 2
    s2 = float(resid @ resid) / dof if dof > 0 else float("nan")
    sxx = float(np.sum((x - x.mean()) ** 2))
    se_slope = np.sqrt(s2 / sxx) if dof > 0 else None
    se_intercept = np.sqrt(s2 * (1.0 / n + x.mean() ** 2 / sxx)) if dof > 0 else None
    boot_b = boot_a = jack_b = jack_a = None
    if reps.bootstrap is not None and reps.jackknife is not None:  # both or neither (seed_replicates)
        boot_b, boot_a = ols_line(x, reps.bootstrap[:, idx])
        jack_b, jack_a = ols_line(x, reps.jackknife[:, idx])
        changed = np.any(reps.jackknife[:, idx] != reps.observed[idx], axis=1)  # deletions at used levels
        jack_b, jack_a = jack_b[changed], jack_a[changed]
    exponent = Estimate("exponent", slope, boot_b, jack_b, se_slope, dof)
    constant = Estimate("constant", float(np.exp(intercept)),
                        None if boot_a is None else np.exp(boot_a),
                        None if jack_a is None else np.exp(jack_a), se_intercept, dof, log_scale=True)
    quality = fit_quality(reps.observed[idx], np.exp(intercept + slope * x),
                          None if reps.bootstrap is None else reps.bootstrap[:, idx], 2, reps.n_seeds)
    settings = dict(n_boot=n_boot, seed=seed, resample=resample, aggregate=aggregate,
                    noise_floor=noise_floor, n_seeds=int(e.shape[1]), **window_options(rules))
    return PowerLawFit(name, p, e, np.exp(reps.observed), chosen, exponent, constant,
                       orders_of_replicates(p, reps, confidence), quality, confidence, method, expected, settings)
