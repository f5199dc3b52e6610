"""Lack of fit of a fitted law against the seed noise: relative residuals and an F test
(docs/theory.md, the rate-fit section).

For n fitted points with log aggregates log ē_i, predictions pred_i (``n_fitted`` parameters) and
bootstrap replicates of log ē_i ``(n_boot, n)``: F = [Σ_i (log ē_i − log pred_i)² / (n − n_fitted)] / s²,
s² the mean over points of the bootstrap variance of log ē_i, compared with F_{n − n_fitted, n(n_seeds − 1)}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = ["FitQuality", "fit_quality"]


@dataclass(frozen=True)
class FitQuality:
    """How well a fitted law reproduces the level aggregates.

    ``relative_residuals[i] = ē_i / pred_i − 1`` over the fitted points.  Lack-of-fit F test (pure
    error from the seeds): ``f_statistic = [Σ_i (log ē_i − log pred_i)² / dof] / s²`` with s² the mean over
    points of the bootstrap variance of log ē_i (the replicates come from ``seed_replicates``, which
    already expands them by n_seeds/(n_seeds − 1); nothing is scaled here), ``dof = n −
    n_fitted``, ``dof_noise = n (n_seeds − 1)``, ``p_value = P(F_{dof, dof_noise} ≥ f_statistic)``.  A small
    p-value says the law does not describe the data within seed noise (wrong model, pre-asymptotic
    levels or a plateau).  NaN without a bootstrap or without residual degrees of freedom.
    """

    relative_residuals: np.ndarray
    f_statistic: float
    dof: int
    dof_noise: int
    p_value: float

    @property
    def max_abs_relative_residual(self) -> float:
        return float(np.max(np.abs(self.relative_residuals)))

    @property
    def rms_relative_residual(self) -> float:
        return float(np.sqrt(np.mean(self.relative_residuals**2)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "relative_residuals": [float(r) for r in self.relative_residuals],
            "max_abs_relative_residual": self.max_abs_relative_residual,
            "rms_relative_residual": self.rms_relative_residual,
            "f_statistic": self.f_statistic,
            "dof": self.dof,
            "dof_noise": self.dof_noise,
            "p_value": self.p_value,
        }


def fit_quality(log_observed: np.ndarray, predicted: np.ndarray, log_boot: np.ndarray | None,
                n_fitted: int, n_seeds: int) -> FitQuality:
    """:class:`FitQuality` of predictions ``predicted`` (shape ``(n,)``) for observed log aggregates
    ``log_observed`` with bootstrap replicates ``log_boot`` (shape ``(n_boot, n)`` or None)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_resid = log_observed - np.log(predicted)
    n = log_observed.size
    dof, dof_noise = int(n - n_fitted), int(n * (n_seeds - 1))
    f_statistic = p_value = float("nan")
    if log_boot is not None and dof > 0 and dof_noise > 0:
        noise = float(np.mean(np.var(log_boot, axis=0, ddof=1)))
        if noise > 0 and np.all(np.isfinite(log_resid)):
            f_statistic = float(np.sum(log_resid**2) / dof / noise)
            p_value = float(stats.f.sf(f_statistic, dof, dof_noise))
    return FitQuality(np.exp(log_resid) - 1.0, f_statistic, dof, dof_noise, p_value)
