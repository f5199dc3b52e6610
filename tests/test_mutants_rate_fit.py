"""Properties of the rate fits (``verify/stats/``: power_law, asymptotic_window, seed_bootstrap, estimate, multi_term) that the mutation baseline showed were not pinned down.

Each test is written from the statistics (OLS formulas, Efron's BCa, the lack-of-fit F test, the
documented window rules and option meanings), never from a snapshot of the module's output.  All
data come from fixed seeds; no assertion here is a coverage rate, so none can fail by chance.
"""

import math

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.asymptotic_window import choose_asymptotic_window, local_orders
from transformer_limits.verify.stats.estimate import Estimate
from transformer_limits.verify.stats.fit_quality import fit_quality
from transformer_limits.verify.stats.multi_term import fit_rate_claim
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.stats.seed_bootstrap import lognormal_seed_noise

L7 = 2.0 ** np.arange(2, 9)  # 7 levels


# -- plain transcriptions ---------------------------------------------------------------------------

def _ols_by_hand(x, y):
    """Slope, intercept and their textbook standard errors (e.g. Draper & Smith, Applied Regression
    Analysis, 3rd ed., §1.4): s² = RSS/(n−2), se_b = sqrt(s²/Sxx), se_a = sqrt(s²(1/n + x̄²/Sxx))."""
    n = len(x)
    xbar = sum(x) / n
    ybar = sum(y) / n
    sxx = sum((xi - xbar) ** 2 for xi in x)
    sxy = sum((xi - xbar) * (yi - ybar) for xi, yi in zip(x, y))
    b = sxy / sxx
    a = ybar - b * xbar
    rss = sum((yi - a - b * xi) ** 2 for xi, yi in zip(x, y))
    s2 = rss / (n - 2)
    return b, a, math.sqrt(s2 / sxx), math.sqrt(s2 * (1.0 / n + xbar**2 / sxx))


def _bca_levels_by_hand(boot, theta, jack, levels):
    """Efron & Tibshirani, An Introduction to the Bootstrap (1993), eqs. 14.10, 14.14, 14.15:
    α' = Φ(z0 + (z0 + z_α)/(1 − a (z0 + z_α))), z0 = Φ⁻¹(#{θ* < θ̂}/B) (no ties here),
    a = Σ (θ̄₍.₎ − θ₍ᵢ₎)³ / (6 [Σ (θ̄₍.₎ − θ₍ᵢ₎)²]^{3/2}), a = 0 when the jackknife is constant."""
    below = sum(1 for b in boot if b < theta) / len(boot)
    z0 = stats.norm.ppf(below)
    jbar = sum(jack) / len(jack)
    num = sum((jbar - j) ** 3 for j in jack)
    den = sum((jbar - j) ** 2 for j in jack)
    a = 0.0 if den == 0 else num / (6.0 * den**1.5)
    out = []
    for level in levels:
        z = stats.norm.ppf(level)
        out.append(stats.norm.cdf(z0 + (z0 + z) / (1.0 - a * (z0 + z))))
    return out, a


# -- OLS fit and its t-intervals -------------------------------------------------------------------

@pytest.mark.parametrize("params, n_seeds", [([5.0, 11.0, 40.0], 1), ([5.0, 11.0, 40.0], 6),
                                             ([3.0, 9.0, 14.0, 30.0, 90.0], 1)])
def test_t_intervals_are_the_textbook_ols_intervals(params, n_seeds):
    # 3 levels leave one residual degree of freedom: the t-interval still exists (t_{1} quantile).
    # mean(log p) is 2.57 / 2.80 (not 0, 1 or 2), so x̄² differs from x̄, x̄³ and 2x̄ and Sxx ≠ 1.
    p = np.array(params)
    law = 2.0 * p**-0.7 * np.exp(0.3 * np.sin(3.0 * p))  # off the line: non-zero residuals
    errors = lognormal_seed_noise(law, n_seeds, 0.2, seed=4)
    fit = fit_power_law(p, errors, window="all", n_boot=50)
    x = [math.log(v) for v in p]
    y = [math.log(sum(row) / len(row)) for row in errors]
    b, a, se_b, se_a = _ols_by_hand(x, y)
    t = stats.t.ppf(0.975, len(x) - 2)
    assert fit.exponent.value == pytest.approx(b, rel=1e-12)
    assert fit.constant.value == pytest.approx(math.exp(a), rel=1e-12)
    np.testing.assert_allclose(fit.interval("exponent", 0.95, method="t"), [b - t * se_b, b + t * se_b],
                               rtol=1e-10)
    np.testing.assert_allclose(fit.interval("constant", 0.95, method="t"),
                               [math.exp(a - t * se_a), math.exp(a + t * se_a)], rtol=1e-10)


def test_two_levels_give_the_two_point_slope_and_a_bootstrap_interval():
    # Two levels: the slope is log(ē₂/ē₁)/log(p₂/p₁) exactly and no residual is left, so there is no
    # t-interval; "conservative" is then the percentile interval alone (the one that exists).
    p = np.array([8.0, 32.0])
    errors = lognormal_seed_noise(3.0 / p, 12, 0.3, seed=2)
    means = errors.mean(axis=1)
    for fit in (fit_power_law(p, errors, n_boot=300),
                fit_power_law(np.r_[4.0, p, 64.0], np.vstack([errors[:1] * 2, errors, errors[-1:] / 2]),
                              window=[1, 2], n_boot=300)):
        assert fit.exponent.value == pytest.approx(math.log(means[1] / means[0]) / math.log(4.0), rel=1e-12)
        assert fit.exponent.dof == 0
        conservative = fit.interval("exponent", method="conservative")
        assert np.all(np.isfinite(conservative))
        assert conservative == fit.interval("exponent", method="percentile")


# -- Estimate: the interval methods and the standard error ------------------------------------------

def test_conservative_interval_is_the_union_of_t_and_percentile():
    # the smallest bootstrap the percentile method accepts (2 replicates) still enters the union
    est = Estimate("theta", 0.0, bootstrap=np.array([-5.0, 5.0]), se=0.1, dof=5)
    t_low, t_high = est.interval(0.9, method="t")
    p_low, p_high = est.interval(0.9, method="percentile")
    assert (p_low, p_high) == pytest.approx((-5.0 + 0.05 * 10, 5.0 - 0.05 * 10))  # linear quantiles
    assert est.interval(0.9, method="conservative") == (min(t_low, p_low), max(t_high, p_high))
    assert est.interval(0.9, "lower", "conservative")[0] == min(est.interval(0.9, "lower", "t")[0],
                                                                est.interval(0.9, "lower", "percentile")[0])
    # with 0 degrees of freedom there is no t-interval (t_0 is undefined): the union is the percentile
    # interval alone, not the whole line
    no_dof = Estimate("theta", 0.0, bootstrap=np.array([-5.0, 5.0]), se=0.1, dof=0)
    assert no_dof.interval(0.9, method="conservative") == no_dof.interval(0.9, method="percentile")


@pytest.mark.parametrize("se, dof", [(0.1, None), (None, 3)])
def test_t_method_needs_both_standard_error_and_dof(se, dof):
    est = Estimate("theta", 1.0, bootstrap=np.linspace(0.0, 2.0, 50), se=se, dof=dof)
    with pytest.raises(ValueError, match="not available"):
        est.interval(method="t")


def test_standard_error_is_the_bootstrap_sample_sd_else_the_analytic_one():
    boot = np.array([1.0, 2.0, 4.0])
    mean = sum(boot) / 3
    sd = math.sqrt(sum((b - mean) ** 2 for b in boot) / (3 - 1))
    assert Estimate("t", 2.0, bootstrap=boot, se=9.0).standard_error == pytest.approx(sd, rel=1e-12)
    # one replicate has no sample sd: the analytic standard error is reported
    assert Estimate("t", 2.0, bootstrap=np.array([3.0]), se=0.25).standard_error == 0.25
    assert math.isnan(Estimate("t", 2.0).standard_error)


def test_bca_interval_is_efrons():
    rng = np.random.default_rng(5)
    boot = rng.gamma(2.0, size=4001)            # skewed, θ̂ below the median: z0 ≠ 0
    theta = 1.5
    jack = rng.exponential(size=40)             # skewed jackknife: a ≠ 0
    for confidence, side in ((0.9, "two-sided"), (0.95, "lower"), (0.8, "upper")):
        tail = 1 - confidence
        levels = [tail / 2, 1 - tail / 2] if side == "two-sided" else [tail, 1 - tail]
        adjusted, a = _bca_levels_by_hand(boot, theta, jack, levels)
        assert abs(a) > 0.02
        expected = np.quantile(boot, adjusted)
        got = Estimate("t", theta, bootstrap=boot, jackknife=jack).interval(confidence, side, "bca")
        if side == "two-sided":
            np.testing.assert_allclose(got, expected, rtol=1e-12)
        elif side == "lower":
            assert got == (pytest.approx(expected[0], rel=1e-12), math.inf)
        else:
            assert got == (-math.inf, pytest.approx(expected[1], rel=1e-12))
    # a constant jackknife has no skewness: a = 0 and only the bias correction remains
    flat = np.full(10, 0.75)  # exactly representable: the jackknife deviations are exactly 0
    adjusted, a = _bca_levels_by_hand(boot, theta, flat, [0.05, 0.95])
    assert a == 0.0
    np.testing.assert_allclose(Estimate("t", theta, bootstrap=boot, jackknife=flat).interval(0.9, method="bca"),
                               np.quantile(boot, adjusted), rtol=1e-12)


# -- level aggregates, validation ------------------------------------------------------------------

@pytest.mark.parametrize("aggregate", ["mean", "rms", "geometric", "median"])
def test_level_aggregates_are_their_definitions(aggregate):
    errors = lognormal_seed_noise(3.0 / L7, 5, 0.8, seed=6)  # 5 seeds: the median is one of them
    definitions = {
        "mean": lambda r: sum(r) / len(r),
        "rms": lambda r: math.sqrt(sum(v * v for v in r) / len(r)),
        "geometric": lambda r: math.exp(sum(math.log(v) for v in r) / len(r)),
        "median": lambda r: sorted(r)[len(r) // 2],
    }
    expected = [definitions[aggregate](list(row)) for row in errors]
    fit = fit_power_law(L7, errors, aggregate=aggregate, n_boot=20, window="all")
    np.testing.assert_allclose(fit.level_errors, expected, rtol=1e-12)
    # the four aggregates really differ on these data
    assert len({round(definitions[k](list(errors[0])), 9) for k in definitions}) == 4


@pytest.mark.parametrize("confidence", [0.0, -0.5, 1.0])
def test_confidence_outside_open_unit_interval_is_rejected(confidence):
    errors = lognormal_seed_noise(3.0 / L7, 4, 0.2, seed=1)
    with pytest.raises(ValueError, match="confidence"):
        fit_power_law(L7, errors, confidence=confidence)
    with pytest.raises(ValueError, match="confidence"):
        Estimate("t", 1.0, se=0.1, dof=3).interval(confidence, method="t")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_errors_are_rejected(bad):
    errors = lognormal_seed_noise(3.0 / L7, 4, 0.2, seed=1)
    errors[3, 2] = bad
    with pytest.raises(ValueError, match="errors must be finite"):
        fit_power_law(L7, errors)
    with pytest.raises(ValueError, match="errors must be finite"):
        fit_rate_claim("L^-1", {"L": L7}, errors)


# -- lack-of-fit F test ----------------------------------------------------------------------------

def test_lack_of_fit_f_test_uses_pure_error_degrees_of_freedom():
    # n points with n_seeds seeds each: the pooled seed variance has n (n_seeds − 1) degrees of freedom
    # (pure error; e.g. Draper & Smith §2.1), the residuals n − n_fitted.
    rng = np.random.default_rng(8)
    n, n_seeds, n_fitted = 6, 5, 2
    log_obs = rng.normal(size=n)
    predicted = np.exp(log_obs + 0.3 * rng.normal(size=n))
    log_boot = log_obs + 0.2 * rng.normal(size=(400, n))
    q = fit_quality(log_obs, predicted, log_boot, n_fitted, n_seeds)
    noise = sum(np.var(log_boot[:, i], ddof=1) for i in range(n)) / n
    f = sum((log_obs[i] - math.log(predicted[i])) ** 2 for i in range(n)) / (n - n_fitted) / noise
    assert (q.dof, q.dof_noise) == (n - n_fitted, n * (n_seeds - 1))
    assert q.f_statistic == pytest.approx(f, rel=1e-12)
    assert q.p_value == pytest.approx(stats.f.sf(f, n - n_fitted, n * (n_seeds - 1)), rel=1e-12)
    np.testing.assert_allclose(q.relative_residuals, np.exp(log_obs) / predicted - 1, rtol=1e-12)


# -- window rules ----------------------------------------------------------------------------------

def _flattening_tail(target_sds: float, n_boot: int = 400, seed: int = 0):
    """Errors 3/p (7 levels, 20 seeds, σ = 0.1) whose finest level is rescaled so that its local
    order is ``target_sds`` bootstrap sd above the stall line 0.5 × reference.  Rescaling one level
    shifts all its bootstrap log-aggregates by the same constant, so its sd is unchanged; the
    reference (median order) is that of the other orders with the last one the largest."""
    errors = lognormal_seed_noise(3.0 / L7, 20, 0.1, seed=3)
    base = local_orders(L7, errors, n_boot=n_boot, seed=seed)
    reference = float(np.median(np.r_[base.orders[:-1], np.inf]))  # the median once the last is largest
    target = 0.5 * reference + target_sds * base.std[-1]
    assert target > np.max(base.orders[:-1])
    errors = errors.copy()
    errors[-1] *= math.exp((target - base.orders[-1]) * math.log(L7[-1] / L7[-2]))
    after = local_orders(L7, errors, n_boot=n_boot, seed=seed)
    assert after.orders[-1] == pytest.approx(target, abs=1e-9)
    assert after.std[-1] == pytest.approx(base.std[-1], rel=1e-9)
    assert float(np.median(after.orders)) == pytest.approx(reference, abs=1e-12)
    return errors


def test_plateau_rule_drops_iff_shallower_than_stall_by_stall_z_sds():
    # rule 2: drop the finest level iff q_last − stall_z · sd_last > stall_fraction · reference.
    # The curvature rule is switched off (curvature_alpha=0) so only rule 2 decides.
    errors = _flattening_tail(1.5)
    kept = choose_asymptotic_window(L7, errors, n_boot=400, stall_z=1.6, curvature_alpha=0.0)
    dropped = choose_asymptotic_window(L7, errors, n_boot=400, stall_z=1.4, curvature_alpha=0.0)
    assert kept.used == tuple(range(7)) and not kept.excluded
    assert dropped.used == tuple(range(6))
    assert dropped.excluded[6].startswith("plateau: ")
    # the documented default stall_z is 2 (docs/verification.md, choose_asymptotic_window): the level
    # 1.5 sd above the stall line is kept by default
    assert choose_asymptotic_window(L7, errors, n_boot=400, curvature_alpha=0.0).used == tuple(range(7))


def test_window_defaults_are_the_documented_ones():
    fit = fit_power_law(L7, lognormal_seed_noise(3.0 / L7, 4, 0.2, seed=1), n_boot=20)
    documented = dict(floor_margin=4.0, stall_fraction=0.5, stall_z=2.0, curvature_alpha=0.01, min_levels=3)
    assert {k: fit.settings[k] for k in documented} == documented


def test_curvature_rule_names_the_end_it_drops_and_reports_the_local_orders():
    # errors approaching a floor, 1/p + c: local orders rise steadily from ≈ −1 toward 0, so the
    # straight line fails at the fine end; with the plateau rule switched off (stall_z huge) the
    # curvature rule drops the finest level, whose local order is above the median: "approaching a
    # plateau".  The reason quotes the first and last local orders of the window before the drop.
    p = 2.0 ** np.arange(1, 10)
    errors = lognormal_seed_noise(1.0 / p + 0.002, 20, 0.02, seed=12)
    window = choose_asymptotic_window(p, errors, n_boot=400, stall_z=1e9)
    q = local_orders(p, errors, n_boot=10).orders
    assert q[-1] > np.median(q) > q[1] > q[0]
    first = window.reasons[0]
    assert first.startswith(f"level {p.size - 1} ") and "approaching a plateau" in first
    assert f"(local orders {q[0]:.3g} -> {q[-1]:.3g})" in first
    # the pre-asymptotic head: 1/p + 30/p² (orders drift from ≈ −2 to −1), dropped from the coarse end
    pq = 2.0 ** np.arange(1, 13)
    errors = lognormal_seed_noise(1.0 / pq + 30.0 / pq**2, 20, 0.2, seed=11)
    window = choose_asymptotic_window(pq, errors)
    q = local_orders(pq, errors, n_boot=10).orders
    first = window.reasons[0]
    assert first.startswith("level 0 ") and "pre-asymptotic" in first
    assert f"(local orders {q[0]:.3g} -> {q[-1]:.3g})" in first


# -- multi-term fit: BCa jackknife -----------------------------------------------------------------

def test_multi_term_bca_uses_a_jackknife_of_at_most_max_jackknife_refits():
    Ls = np.array([4.0, 8.0, 16.0, 32.0, 64.0, 128.0])
    errors = lognormal_seed_noise(2.0 / Ls, 4, 0.3, seed=7)
    n_jack = Ls.size * 4  # independent resampling: one deletion per (point, seed)
    bca = fit_rate_claim("L^-1", {"L": Ls}, errors, n_boot=100, method="bca", max_jackknife=n_jack)
    jack = bca.constants["C1"].jackknife
    assert jack is not None and jack.shape == (n_jack,)
    est = bca.constants["C1"]
    adjusted, _ = _bca_levels_by_hand(est.bootstrap, est.value, jack, [0.025, 0.975])
    np.testing.assert_allclose(bca.interval("C1"), np.quantile(est.bootstrap, adjusted), rtol=1e-12)
    # one refit too many: no jackknife, and BCa falls back to the percentile interval
    capped = fit_rate_claim("L^-1", {"L": Ls}, errors, n_boot=100, method="bca", max_jackknife=n_jack - 1)
    assert capped.constants["C1"].jackknife is None
    assert capped.interval("C1") == capped.interval("C1", method="percentile")
