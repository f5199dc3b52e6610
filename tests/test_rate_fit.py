"""Power-law and multi-term rate fits on synthetic data with known exponents and lognormal seed noise.

Statistical tests use fixed seeds; the margins are binomial 99.9 % quantiles, so with a correct
interval each coverage assertion would fail for fewer than 1 in 1000 seed choices.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from transformer_limits.testing import assert_rate
from transformer_limits.verify import InconclusiveWarning
from transformer_limits.verify.stats.asymptotic_window import choose_asymptotic_window, local_orders
from transformer_limits.verify.stats.multi_term import fit_rate_claim
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.stats.seed_bootstrap import lognormal_seed_noise
import math
from transformer_limits.verify.stats.estimate import Estimate
from transformer_limits.verify.stats.fit_quality import fit_quality

L = 2.0 ** np.arange(2, 9)  # 7 levels
SIGMA, N_SEEDS = 0.5, 20


def _data(exponent=-1.0, constant=3.0, seed=0, params=L, sigma=SIGMA, n_seeds=N_SEEDS):
    return lognormal_seed_noise(constant * params**exponent, n_seeds, sigma, seed)


def test_recovers_exponent_and_constant():
    fit = fit_power_law({"L": L}, _data(-1.0, 3.0, seed=1, n_seeds=400), n_boot=500)
    assert fit.param == "L"
    assert abs(fit.exponent.value + 1.0) < 0.03
    assert abs(fit.constant.value / 3.0 - 1.0) < 0.1
    for method in ("bca", "percentile", "t"):
        low, high = fit.interval("exponent", method=method)
        assert low < -1.0 < high
    assert fit.interval("constant", side="lower")[1] == np.inf
    assert fit.interval("exponent", side="upper")[0] == -np.inf
    # the same data through the public rate assertion: the exponent equals −1 within 0.03 (decided
    # on the interval, with power), and decays at least like L^-1 but not like L^-3/2
    errors = _data(-1.0, 3.0, seed=1, n_seeds=400)
    assert assert_rate({"L": L}, errors, "L^-1", check="equals", tolerance=0.03, n_boot=500, strict=True).passed
    assert assert_rate({"L": L}, errors, "L^-1", n_boot=500, strict=True).passed
    with pytest.raises(AssertionError, match="rate claim failed"):
        assert_rate({"L": L}, errors, "L^-3/2", n_boot=500)


@pytest.fixture(scope="module")
def replicate_fits():
    """200 replicate datasets err = 3 L^-1 × lognormal(σ=0.5) noise, 20 seeds, fitted with expected=-1."""
    return [fit_power_law(L, _data(seed=1000 + r), expected=-1.0, n_boot=1000, seed=r) for r in range(200)]


@pytest.mark.parametrize("method", ["conservative", "bca", "percentile", "t"])
def test_ci_coverage(replicate_fits, method):
    # 95 % two-sided CIs: misses ~ Binomial(200, 0.05) for a correct interval; allow its 99.9 % quantile.
    misses = sum(not (lo <= -1.0 <= hi) for lo, hi in (f.interval("exponent", 0.95, method=method)
                                                        for f in replicate_fits))
    assert misses <= stats.binom.ppf(0.999, 200, 0.05)
    widths = [np.diff(f.interval("exponent", 0.95, method=method))[0] for f in replicate_fits]
    assert np.median(widths) < 0.3


def test_window_rarely_trims_a_clean_power_law(replicate_fits):
    trimmed = sum(len(f.window.used) < L.size for f in replicate_fits)
    assert trimmed <= stats.binom.ppf(0.999, 200, 0.02)  # curvature rule at 1 %, plateau rule ≲ 1 %


def test_local_orders():
    exact = local_orders(L, 3.0 * L[:, None] ** -0.5 * np.ones((1, 4)), n_boot=50)
    np.testing.assert_allclose(exact.orders, -0.5)
    np.testing.assert_allclose(exact.std, 0.0, atol=1e-12)
    noisy = local_orders(L, _data(seed=3), n_boot=500)
    assert noisy.orders.shape == (L.size - 1,)
    assert np.all(noisy.std > 0) and np.all(noisy.low < noisy.high)
    # spread of a log-ratio of two means of 20 lognormal(0.5) seeds over log 2: ~ sqrt(2)·0.53/sqrt(20)/log 2
    # (the bootstrap sd from 20 lognormal seeds is itself noisy: within a factor 1.5)
    assert np.all(np.abs(noisy.std / (np.sqrt(2) * 0.53 / np.sqrt(20) / np.log(2)) - 1) < 0.5)


def test_plateau_at_round_off_floor_is_excluded():
    Lp = 2.0 ** np.arange(2, 16)
    rng = np.random.default_rng(7)
    floor = 1e-4 * np.exp(0.3 * rng.standard_normal((Lp.size, N_SEEDS)))  # round-off floor at the finest levels
    errors = (1.0 / Lp[:, None] + floor) * np.exp(0.1 * rng.standard_normal((Lp.size, N_SEEDS)))
    for kwargs in ({"expected": -1.0}, {}, {"noise_floor": 1e-4}):
        fit = fit_power_law(Lp, errors, **kwargs)
        assert {12, 13} <= set(fit.window.excluded), kwargs     # the two plateau levels (1/L < floor)
        assert max(fit.window.used) <= 10
        assert any("plateau" in r or "noise floor" in r for r in fit.window.reasons)
        low, high = fit.interval(method="t")
        assert low - 0.02 <= -1.0 <= high + 0.02, kwargs
    contaminated = fit_power_law(Lp, errors, window="all")
    assert contaminated.interval()[0] > -0.95  # without the window the plateau biases the fit


def test_pre_asymptotic_levels_are_excluded():
    Lq = 2.0 ** np.arange(1, 13)
    law = 1.0 / Lq + 30.0 / Lq**2  # local orders drift from ≈ −2 toward −1
    errors = lognormal_seed_noise(law, N_SEEDS, 0.2, seed=11)
    window = choose_asymptotic_window(Lq, errors)
    assert 0 in window.excluded and "pre-asymptotic" in window.excluded[0]
    assert window.used[-1] == Lq.size - 1
    fit = fit_power_law(Lq, errors)
    full = fit_power_law(Lq, errors, window="all")
    # the window removes most of the bias; what is left (true local orders −1.14 … −1.01 inside it)
    # is what exponent_equals(tolerance=...) is for
    assert abs(fit.exponent.value + 1.0) < 0.12
    assert abs(fit.exponent.value + 1.0) < 0.4 * abs(full.exponent.value + 1.0)
    # the public assertion fits on the same window: "L^-1" within that tolerance holds there, and
    # is rejected when the pre-asymptotic levels are kept
    assert assert_rate({"L": Lq}, errors, "L^-1", check="equals", tolerance=0.12, strict=True).passed
    with pytest.raises(AssertionError, match="rate claim failed"):
        assert_rate({"L": Lq}, errors, "L^-1", check="equals", tolerance=0.12, window="all")
    orders = local_orders(Lq, errors).orders
    assert orders[0] < -1.5 and abs(orders[-1] + 1.0) < 0.25  # last pair: bootstrap sd ≈ 0.08


def test_window_given_by_caller_and_options():
    errors = _data(seed=5)
    fit = fit_power_law(L, errors, window=[1, 2, 3, 4])
    assert fit.window.used == (1, 2, 3, 4) and set(fit.window.excluded) == {0, 5, 6}
    with pytest.raises(ValueError, match="window"):
        fit_power_law(L, errors, window=[1])
    with pytest.raises(ValueError, match="unknown window rule"):
        fit_power_law(L, errors, drift=3)
    with pytest.raises(ValueError, match="noise_floor"):
        fit_power_law(L, errors, noise_floor=1.0)  # every level is below 4 × 1.0


def test_multi_term_nnls_recovers_constants_on_grid():
    Ls, Hs = np.meshgrid(2.0 ** np.arange(2, 8), 4.0 ** np.arange(0, 4), indexing="ij")
    table = {"L": Ls.ravel(), "H": Hs.ravel()}
    law = 2.0 / table["L"] + 0.5 * table["L"] ** (-1 / 3) * table["H"] ** -0.5
    # 40 replicate datasets: 95 % percentile CIs on C1, C2; misses ~ Binomial(40, 0.05), allow 99.9 % quantile.
    misses = np.zeros(2)
    for r in range(40):
        fit = fit_rate_claim("L^-1 + L^-1/3 H^-1/2", table, lognormal_seed_noise(law, 16, 0.3, seed=r),
                             n_boot=200, seed=r)
        for k, (name, truth) in enumerate((("C1", 2.0), ("C2", 0.5))):
            low, high = fit.interval(name)
            misses[k] += not low <= truth <= high
            assert abs(fit.constants[name].value / truth - 1) < 0.15
    assert np.all(misses <= stats.binom.ppf(0.999, 40, 0.05))
    assert fit.quality.max_abs_relative_residual < 0.2
    np.testing.assert_allclose(fit.predict(table), fit.design @ [fit.constants["C1"].value, fit.constants["C2"].value])


def test_multi_term_exact_data_and_bca():
    Ls, ms = np.meshgrid([4.0, 8, 16, 32, 64], [1.0, 10, 100], indexing="ij")
    table = {"L": Ls.ravel(), "m": ms.ravel()}
    law = 0.7 * np.log(table["L"]) / table["L"] + 2.0 / table["m"]
    exact = fit_rate_claim("log(L)/L + 1/m", table, law[:, None] * np.ones((1, 3)), n_boot=20)
    assert exact.constants["C1"].value == pytest.approx(0.7) and exact.constants["C2"].value == pytest.approx(2.0)
    noisy = fit_rate_claim("log(L)/L + 1/m", table, lognormal_seed_noise(law, 12, 0.3, 2), n_boot=200,
                           method="bca")
    assert noisy.interval("C1")[0] < 0.7 < noisy.interval("C1")[1]
    with pytest.raises(ValueError, match="method"):
        noisy.interval("C1", method="t")


def test_paired_resampling_keeps_the_coupling():
    # Seeds coupled across levels: a common per-seed factor.  Paired resampling sees it cancel in the
    # slope; independent resampling does not (conservative, wider).
    rng = np.random.default_rng(9)
    errors = (3.0 / L[:, None]) * np.exp(0.5 * rng.standard_normal((1, N_SEEDS)) + 0.05 * rng.standard_normal((L.size, N_SEEDS)))
    paired = fit_power_law(L, errors, resample="paired", window="all")
    independent = fit_power_law(L, errors, resample="independent", window="all")
    assert paired.exponent.value == independent.exponent.value
    assert np.diff(paired.interval())[0] < 0.5 * np.diff(independent.interval())[0]
    assert paired.interval()[0] < -1.0 < paired.interval()[1]


def test_one_seed_uses_t_interval():
    fit = fit_power_law(L, 3.0 / L * np.exp(0.01 * np.random.default_rng(0).standard_normal(L.size)))
    assert fit.exponent.bootstrap is None
    assert fit.interval() == fit.interval(method="t")  # "conservative" falls back to t
    assert fit.interval()[0] < -1.0 < fit.interval()[1]
    with pytest.raises(ValueError, match="bootstrap"):
        fit.interval(method="bca")


@pytest.mark.parametrize("bad, match", [
    (dict(params=[1.0, 1.0, 2.0]), "distinct"),
    (dict(params=[1.0, -2.0, 3.0]), "params"),
    (dict(errors=np.zeros((3, 2))), "errors"),
    (dict(errors=np.ones((4, 2))), "errors"),
    (dict(resample="blocks"), "resample"),
    (dict(aggregate="max"), "aggregate"),
    (dict(confidence=1.5), "confidence"),
])
def test_bad_inputs(bad, match):
    args = dict(params=[1.0, 2.0, 4.0], errors=np.ones((3, 2)))
    args.update(bad)
    params, errors = args.pop("params"), args.pop("errors")
    with pytest.raises(ValueError, match=match):
        fit_power_law(params, errors, **args)
    with pytest.raises(ValueError, match=match):  # the public rate assertion fits the same way
        assert_rate(params, errors, -1.0, **args)


# -- hypothesis: invariances -----------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**20), st.floats(-6, 6), st.floats(-2.0, 0.5))
def test_fit_invariant_to_scaling_errors(seed, log_scale, exponent):
    errors = _data(exponent=exponent, seed=seed, n_seeds=8)
    base = fit_power_law(L, errors, n_boot=200, seed=seed, window="all")
    scaled = fit_power_law(L, errors * np.exp(log_scale), n_boot=200, seed=seed, window="all")
    assert scaled.exponent.value == pytest.approx(base.exponent.value, abs=1e-9)
    np.testing.assert_allclose(scaled.interval(method="bca"), base.interval(method="bca"), atol=1e-9)
    np.testing.assert_allclose(scaled.interval(method="t"), base.interval(method="t"), atol=1e-9)
    assert scaled.constant.value == pytest.approx(base.constant.value * np.exp(log_scale), rel=1e-9)
    np.testing.assert_allclose(scaled.local_orders.orders, base.local_orders.orders, atol=1e-9)
    # so is the public assertion's decision on the drawn exponent (whatever it is: pass, inconclusive, fail)
    state, error = _decision(L, errors, exponent, seed)
    scaled_state, scaled_error = _decision(L, errors * np.exp(log_scale), exponent, seed)
    assert scaled_state == state and scaled_error == (None if error is None else pytest.approx(error, rel=1e-9))


def _decision(params, errors, exponent, seed):
    """assert_rate's verdict on "the exponent equals ``exponent`` within 0.25": the Check's state
    ("pass", "inconclusive") and the exponent's standard error, or ("failed", None)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InconclusiveWarning)
        try:
            check = assert_rate({"L": params}, errors, exponent, check="equals", tolerance=0.25, n_boot=200,
                                seed=seed, window="all")
        except AssertionError:
            return "failed", None
    return check.state, check.statistics["standard_error"]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**20), st.permutations(range(L.size)))
def test_fit_invariant_to_level_order(seed, permutation):
    errors = _data(seed=seed, n_seeds=8)
    perm = np.array(permutation)
    base = fit_power_law(L, errors, n_boot=200, seed=seed)
    shuffled = fit_power_law(L[perm], errors[perm], n_boot=200, seed=seed)
    assert shuffled.window.used == base.window.used
    assert shuffled.exponent.value == pytest.approx(base.exponent.value, abs=1e-12)
    np.testing.assert_allclose(shuffled.interval(), base.interval(), atol=1e-12)
    np.testing.assert_allclose(shuffled.params, base.params)


def test_bootstrap_size_is_limited_up_front():
    """Issue 11: n_boot=10**12 used to raise MemoryError; it is a ValueError naming n_boot, raised before
    any allocation, against the stated limit (resource_limits.MAX_BOOTSTRAP_REPLICATES) and the memory
    estimate n_boot · n_levels · n_seeds · 32 bytes against MEMORY_BUDGET_BYTES."""
    from transformer_limits.resource_limits import MAX_BOOTSTRAP_REPLICATES, MEMORY_BUDGET_BYTES
    from transformer_limits.verify.stats.seed_bootstrap import bootstrap_memory_bytes

    errors = _data(seed=12)
    for call in (lambda n: fit_power_law(L, errors, n_boot=n), lambda n: local_orders(L, errors, n_boot=n),
                 lambda n: choose_asymptotic_window(L, errors, n_boot=n),
                 lambda n: fit_rate_claim("L^-1", {"L": L}, errors, n_boot=n)):
        with pytest.raises(ValueError, match=r"n_boot must be <= 1000000 .*stated") as info:
            call(10**12)
        assert "\n" not in str(info.value)
        with pytest.raises(ValueError, match="n_boot"):
            call(-1)
    assert MAX_BOOTSTRAP_REPLICATES == 10**6
    # within the count limit but over the memory budget: refused with the estimate in the message
    n_seeds = 4000
    assert bootstrap_memory_bytes(10**5, L.size, n_seeds) > MEMORY_BUDGET_BYTES
    with pytest.raises(ValueError, match=r"n_boot=100000 on 7 levels x 4000 seeds would need about .* GiB"):
        fit_power_law(L, np.ones((L.size, n_seeds)), n_boot=10**5)
    assert bootstrap_memory_bytes(2000, 9, 64) < 0.1 * MEMORY_BUDGET_BYTES  # the defaults are far below


@pytest.mark.parametrize("resample", ["independent", "paired"])
@pytest.mark.parametrize("aggregate", ["mean", "rms", "geometric", "median"])
def test_bootstrap_memory_estimate_bounds_the_measured_peak(resample, aggregate):
    """The stated estimate is an upper bound of the resampling's measured peak (tracemalloc sees NumPy
    buffers) and not wildly loose (within a factor 4)."""
    import tracemalloc

    from transformer_limits.verify.stats.seed_bootstrap import bootstrap_memory_bytes, seed_replicates

    errors = _data(seed=13, n_seeds=50)
    tracemalloc.start()
    try:
        seed_replicates(errors, 2000, 0, resample, aggregate)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    estimate = bootstrap_memory_bytes(2000, *errors.shape)
    assert estimate / 4 <= peak <= estimate, peak / (2000 * errors.size)

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_rate_fit.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


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
