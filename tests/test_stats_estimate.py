"""verify/stats/estimate.py: the interval methods of an Estimate, checked against their definitions
(docs/verification.md; Efron 1987 for BCa)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.estimate import Estimate, bca_constants, one_sided_p_value


def test_t_interval_is_theta_plus_t_quantiles_times_se():
    est = Estimate("q", -1.2, se=0.1, dof=4)
    q = stats.t.ppf(0.995, 4)
    lo, hi = est.interval(0.99, "two-sided", "t")
    assert lo == pytest.approx(-1.2 - q * 0.1, rel=1e-13) and hi == pytest.approx(-1.2 + q * 0.1, rel=1e-13)
    lo1, inf = est.interval(0.99, "lower", "t")
    assert inf == math.inf and lo1 == pytest.approx(-1.2 - stats.t.ppf(0.99, 4) * 0.1, rel=1e-13)


def test_log_scale_t_interval_is_exp_of_the_log_interval():
    est = Estimate("C", 3.0, se=0.2, dof=5, log_scale=True)
    q = stats.t.ppf(0.975, 5)
    lo, hi = est.interval(0.95, "two-sided", "t")
    assert lo == pytest.approx(3.0 * math.exp(-q * 0.2), rel=1e-13)
    assert hi == pytest.approx(3.0 * math.exp(q * 0.2), rel=1e-13)


def test_no_residual_dof_gives_the_whole_line():
    assert Estimate("q", 0.5, se=0.1, dof=0).interval(0.9, method="t") == (-math.inf, math.inf)
    assert Estimate("C", 0.5, se=0.1, dof=0, log_scale=True).interval(0.9, method="t") == (0.0, math.inf)


def test_percentile_interval_is_the_bootstrap_quantiles():
    boot = np.linspace(0.0, 1.0, 1001)
    lo, hi = Estimate("q", 0.5, bootstrap=boot).interval(0.9, "two-sided", "percentile")
    assert lo == pytest.approx(0.05) and hi == pytest.approx(0.95)


def test_conservative_is_the_union_of_t_and_percentile():
    boot = np.random.default_rng(0).normal(0.0, 0.3, 4000)
    est = Estimate("q", 0.0, bootstrap=boot, se=0.1, dof=3)
    for side in ("two-sided", "lower", "upper"):
        t_lo, t_hi = est.interval(0.95, side, "t")
        p_lo, p_hi = est.interval(0.95, side, "percentile")
        assert est.interval(0.95, side, "conservative") == (min(t_lo, p_lo), max(t_hi, p_hi))


def test_bca_constants_transcribe_efron():
    # z0 = Φ⁻¹(P*(θ* < θ) + ½ P*(θ* = θ)); a = Σu³ / (6 (Σu²)^{3/2}), u = mean(jack) − jack
    boot = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    jack = np.array([1.0, 2.0, 4.0])
    z0, a = bca_constants(boot, 1.0, jack)
    assert z0 == pytest.approx(stats.norm.ppf(0.3))
    u = jack.mean() - jack
    assert a == pytest.approx(np.sum(u**3) / (6 * np.sum(u**2) ** 1.5))
    assert bca_constants(boot, -1.0, jack) is None  # bootstrap wholly on one side of θ


def test_bca_with_no_bias_and_no_skew_is_the_percentile_interval():
    boot = np.concatenate([-np.linspace(0.01, 1, 500), np.linspace(0.01, 1, 500)])  # symmetric about 0
    jack = np.array([-1.0, 0.0, 1.0])  # Σu³ = 0: no acceleration
    est = Estimate("q", 0.0, bootstrap=boot, jackknife=jack)
    assert est.interval(0.9, method="bca") == pytest.approx(est.interval(0.9, method="percentile"), rel=1e-12)


def test_one_sided_p_value_equals_alpha_at_the_lower_bound():
    est = Estimate("q", -0.8, se=0.05, dof=6)
    low, _ = est.interval(0.99, "lower", "t")
    assert one_sided_p_value(est, low, "t") == pytest.approx(0.01, rel=1e-9)
    boot = np.arange(1, 101) / 100.0
    assert one_sided_p_value(Estimate("q", 0.5, bootstrap=boot), 0.25, "percentile") == pytest.approx(0.25)


@pytest.mark.parametrize("kwargs, name", [(dict(confidence=1.5), "confidence"), (dict(side="left"), "side"),
                                          (dict(method="wald"), "method")])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Estimate("q", 0.0, se=0.1, dof=3).interval(**kwargs)
