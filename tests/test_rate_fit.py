"""Power-law and multi-term rate fits on synthetic data with known exponents and lognormal seed noise.

Statistical tests use fixed seeds; the margins are binomial 99.9 % quantiles, so with a correct
interval each coverage assertion would fail for fewer than 1 in 1000 seed choices.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from transformer_limits.verify.stats.asymptotic_window import choose_asymptotic_window, local_orders
from transformer_limits.verify.stats.multi_term import fit_rate_claim
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.stats.seed_bootstrap import lognormal_seed_noise

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
