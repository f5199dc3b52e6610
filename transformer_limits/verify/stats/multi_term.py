"""Known exponents, unknown constants: ``ē_i ≈ Σ_k C_k m_k(params_i)`` with C_k ≥ 0 (docs/theory.md,
the rate-fit section).

Non-negative least squares in relative form: each row divided by the error, so the residual is
relative (first-order log-space) and every point weighs the same whatever its magnitude; the divisor is
the observed ē_i first, then the fitted error, which removes the downward bias of dividing by a noisy
observation.  Confidence intervals of the C_k come from the seed bootstrap
(:mod:`~transformer_limits.verify.stats.seed_bootstrap`): percentile, or BCa with a jackknife.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from scipy import optimize

from transformer_limits.verify.rate.claims import RateClaim, parse_rate_claim
from transformer_limits.verify.stats.estimate import Estimate
from transformer_limits.verify.stats.fit_quality import FitQuality, fit_quality
from transformer_limits.verify.stats.intervals import Side
from transformer_limits.verify.stats.seed_bootstrap import as_errors, check_fit_options, seed_replicates

__all__ = ["MultiTermFit", "fit_rate_claim"]


@dataclass(frozen=True)
class MultiTermFit:
    """``ē_i ≈ Σ_k C_k m_k(params_i)``, C_k ≥ 0, fitted by relative NNLS.

    ``design`` is the claim's design matrix ``(n_points, n_terms)``; ``constants`` maps coefficient names
    to :class:`Estimate`; ``quality`` compares the aggregates with the fitted law.
    """

    claim: RateClaim
    params_table: dict[str, np.ndarray]
    errors: np.ndarray
    level_errors: np.ndarray
    design: np.ndarray
    constants: dict[str, Estimate]
    quality: FitQuality
    confidence: float
    method: str = "percentile"
    settings: dict = field(default_factory=dict)

    def estimate(self, name: str) -> Estimate:
        if name not in self.constants:
            raise ValueError(f"name must be one of the coefficients {sorted(self.constants)}, got {name!r}")
        return self.constants[name]

    def interval(self, name: str, confidence: float | None = None, side: Side = "two-sided",
                 method: str | None = None) -> tuple[float, float]:
        return self.estimate(name).interval(confidence or self.confidence, side, method or self.method)

    def predict(self, params_table: Mapping[str, Any]) -> np.ndarray:
        return self.claim.predict(params_table, {k: v.value for k, v in self.constants.items()})

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim.to_dict(),
            "constants": {k: v.value for k, v in self.constants.items()},
            "constants_ci": {k: list(self.interval(k)) for k in self.constants},
            "confidence": self.confidence,
            "method": self.method,
            "quality": self.quality.to_dict(),
            "settings": dict(self.settings),
        }


def _relative_nnls(design: np.ndarray, level_errors: np.ndarray, iterations: int) -> np.ndarray:
    """Relative NNLS: ``argmin_{c ≥ 0} Σ_i ((ē_i − (design c)_i) / w_i)²``.

    Start with w = ē (rows divided by the observed error), then ``iterations`` reweighting passes with
    w = design c (the fitted error): dividing by a noisy observation biases the constants downward
    (low observations get large weights); dividing by the fit is the constant-coefficient-of-variation
    quasi-likelihood and removes that bias.
    """
    coef, _ = optimize.nnls(design / level_errors[:, None], np.ones(level_errors.size))
    for _ in range(iterations):
        fitted = design @ coef
        if not np.all(fitted > 0):
            break
        coef, _ = optimize.nnls(design / fitted[:, None], level_errors / fitted)
    return coef


def fit_rate_claim(
    claim: RateClaim | str,
    params_table: Mapping[str, Any],
    errors: Any,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    method: str = "percentile",
    resample: str = "independent",
    aggregate: str = "mean",
    max_jackknife: int = 5000,
    reweight: int = 2,
) -> MultiTermFit:
    """Fit the constants of ``claim`` (exponents known) to data on a grid of points.

    ``params_table``: mapping parameter name → values, each shape ``(n_points,)`` (e.g. the flattened
    (L, H) grid); ``errors``: shape ``(n_points, n_seeds)``.  Constants are ≥ 0 (NNLS); bootstrap CIs
    resample seeds per point (``resample="independent"``) or the same seeds at every point
    (``"paired"``).  ``method`` is the default CI method: ``"percentile"`` (robust when a constant sits
    at the boundary 0) or ``"bca"`` (jackknife of at most ``max_jackknife`` refits, else percentile).
    ``reweight``: passes of dividing rows by the fitted instead of the observed error (0 = rows divided
    by the observed error only; see ``_relative_nnls``).
    """
    check_fit_options(resample, aggregate, n_boot, confidence)
    if method not in ("bca", "percentile", "conservative"):
        raise ValueError(f"method must be 'percentile', 'bca' or 'conservative' (= percentile here) for a "
                         f"multi-term fit, got {method!r}")
    if isinstance(claim, str):
        claim = parse_rate_claim(claim)
    design = claim.evaluate_terms(params_table)
    n_points = design.shape[0]
    e = as_errors(errors, n_points)
    if e.shape[1] < 2:
        raise ValueError("errors: a multi-term fit needs at least 2 seeds per point (its confidence "
                         "intervals come from resampling seeds)")
    if n_points < len(claim.terms):
        raise ValueError(f"params_table: {n_points} points cannot determine {len(claim.terms)} constants")
    reps = seed_replicates(e, n_boot, seed, resample, aggregate)
    coef = _relative_nnls(design, np.exp(reps.observed), reweight)
    boot = jack = None
    if reps.bootstrap is not None and reps.jackknife is not None:  # both or neither (seed_replicates)
        boot = np.array([_relative_nnls(design, np.exp(row), reweight) for row in reps.bootstrap])
        if method == "bca" and reps.jackknife.shape[0] <= max_jackknife:
            jack = np.array([_relative_nnls(design, np.exp(row), reweight) for row in reps.jackknife])
    constants = {
        name: Estimate(name, float(coef[k]), None if boot is None else boot[:, k],
                       None if jack is None else jack[:, k])
        for k, name in enumerate(claim.coefficient_names)
    }
    if boot is None:
        method = "percentile"
    quality = fit_quality(reps.observed, design @ coef, reps.bootstrap, len(claim.terms), reps.n_seeds)
    table = {k: np.asarray(params_table[k], dtype=np.float64) for k in claim.parameters}
    settings = dict(n_boot=n_boot, seed=seed, resample=resample, aggregate=aggregate, n_seeds=int(e.shape[1]),
                    reweight=reweight)
    return MultiTermFit(claim, table, e, np.exp(reps.observed), design, constants, quality, confidence,
                        method, settings)
