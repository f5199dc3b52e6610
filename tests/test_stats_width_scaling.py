"""verify/stats/width_scaling.py: paper C's OLS fit of log R on log D, transcribed from the textbook
formulas (β̂ = S_xy/S_xx, SE = sqrt(RSS/(n − 2)/S_xx), β̂ ± t_{(1+c)/2, n−2} SE, R² = 1 − RSS/S_yy)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.power_law import PowerLawFit
from transformer_limits.verify.stats.width_scaling import WidthScalingFit, fit_width_scaling


def test_fit_transcribes_the_ols_formulas():
    D = np.array([64.0, 128, 256, 512, 1024, 2048])
    R = np.exp(0.3 + 0.4 * np.log(D) + np.array([0.05, -0.1, 0.02, 0.08, -0.04, 0.01]))
    fit = fit_width_scaling(D, R, confidence=0.9)
    x, y = np.log(D), np.log(R)
    sxx, sxy, syy = np.sum((x - x.mean()) ** 2), np.sum((x - x.mean()) * (y - y.mean())), np.sum((y - y.mean()) ** 2)
    beta = sxy / sxx
    rss = syy - beta * sxy
    se = np.sqrt(rss / (x.size - 2) / sxx)
    half = stats.t.ppf(0.95, x.size - 2) * se
    assert fit.beta == pytest.approx(beta, rel=1e-12) and fit.stderr == pytest.approx(se, rel=1e-9)
    assert fit.ci_low == pytest.approx(beta - half, rel=1e-9) and fit.ci_high == pytest.approx(beta + half, rel=1e-9)
    assert fit.r2 == pytest.approx(1 - rss / syy, rel=1e-9)
    assert fit.intercept == pytest.approx(y.mean() - beta * x.mean(), rel=1e-12)


def test_a_different_concept_from_the_seed_power_law():
    """One OLS line through all points (paper C) is not the seed-aggregate rate fit: distinct types."""
    assert WidthScalingFit is not PowerLawFit
    assert {"beta", "ci_low", "ci_high", "r2"} <= set(WidthScalingFit.__dataclass_fields__)


def test_constant_ranks_give_an_exact_zero_slope():
    fit = fit_width_scaling([64, 128, 256], [5.0, 5.0, 5.0])
    assert fit.beta == 0.0 and fit.stderr == 0.0 and fit.ci_low == fit.ci_high == 0.0
