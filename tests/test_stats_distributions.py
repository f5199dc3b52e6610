"""verify/stats/distributions: the same values as scipy.stats.norm and scipy.stats.t to the bit (so every
verdict, interval and power is unchanged), and the mathematics itself checked against mpmath at 30 digits."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats import distributions as dist

X = np.concatenate([np.linspace(-40, 40, 801), [-1e-300, 0.0, 1e-300, -np.inf, np.inf, np.nan]])
Q = np.concatenate([np.linspace(0, 1, 1001), [1e-300, 1e-17, 1e-9, 1 - 1e-9, 1 - 1e-16, -0.1, 1.1, np.nan]])
DOFS = [0.5, 1, 2, 3.7, 10, 29, 120, 1e6]


def _same_signs(ours, theirs):
    """±0 as well (assert_array_equal takes −0.0 == 0.0); a NaN's sign bit means nothing."""
    number = ~np.isnan(theirs)
    np.testing.assert_array_equal(np.signbit(ours[number]), np.signbit(theirs[number]))


@pytest.mark.parametrize("ours, theirs, grid", [
    (dist.normal_cdf, stats.norm.cdf, X), (dist.normal_sf, stats.norm.sf, X),
    (dist.normal_ppf, stats.norm.ppf, Q), (dist.normal_isf, stats.norm.isf, Q)])
def test_normal_functions_are_scipy_stats_to_the_bit(ours, theirs, grid):
    np.testing.assert_array_equal(ours(grid), theirs(grid))
    _same_signs(ours(grid), theirs(grid))
    for v in grid[::37]:  # scalars too: the callers pass floats
        np.testing.assert_array_equal(ours(float(v)), theirs(float(v)))


@pytest.mark.parametrize("dof", DOFS)
def test_t_functions_are_scipy_stats_to_the_bit(dof):
    np.testing.assert_array_equal(dist.t_sf(X, dof), stats.t.sf(X, dof))
    np.testing.assert_array_equal(dist.t_ppf(Q, dof), stats.t.ppf(Q, dof))
    _same_signs(dist.t_sf(X, dof), stats.t.sf(X, dof))
    _same_signs(dist.t_ppf(Q, dof), stats.t.ppf(Q, dof))
    np.testing.assert_array_equal(dist.t_ppf(0.975, dof), stats.t.ppf(0.975, dof))


def _t_cdf_mp(x, nu):
    """P(T_ν ≤ x) = 1 − I_{ν/(ν+x²)}(ν/2, 1/2)/2 for x ≥ 0 (regularised incomplete beta), by symmetry below 0."""
    x, nu = mpmath.mpf(x), mpmath.mpf(nu)
    tail = mpmath.betainc(nu / 2, mpmath.mpf(1) / 2, 0, nu / (nu + x * x), regularized=True) / 2
    return 1 - tail if x >= 0 else tail


def test_the_values_are_the_distributions_themselves():
    with mpmath.workdps(30):
        for x in (-7.5, -1.96, -0.3, 0.0, 0.8, 2.5758293035489, 6.0):
            phi = mpmath.ncdf(x)
            assert float(dist.normal_cdf(x)) == pytest.approx(float(phi), rel=1e-14)
            assert float(dist.normal_sf(x)) == pytest.approx(float(1 - phi), rel=1e-14)
        for q in (1e-12, 0.005, 0.025, 0.3, 0.5, 0.9, 0.995):
            z = float(dist.normal_ppf(q))
            assert float(mpmath.ncdf(z)) == pytest.approx(q, rel=1e-13)
            assert float(dist.normal_isf(q)) == -z
        for nu in (1, 3, 12.5, 200):
            for x in (-4.0, -0.7, 0.0, 1.3, 9.0):
                assert float(dist.t_sf(x, nu)) == pytest.approx(float(1 - _t_cdf_mp(x, nu)), rel=1e-12)
            for q in (0.01, 0.3, 0.5, 0.95, 0.999):
                t = float(dist.t_ppf(q, nu))
                assert float(_t_cdf_mp(t, nu)) == pytest.approx(q, rel=1e-12)
    # printed table values (Student 1908 / any t table): t_{0.975, 10} = 2.228, t_{0.995, 1} = 63.657
    assert float(dist.t_ppf(0.975, 10)) == pytest.approx(2.2281388519649385, rel=1e-10)
    assert float(dist.t_ppf(0.995, 1)) == pytest.approx(63.65674116287399, rel=1e-10)


def test_outside_the_domain_is_nan_and_the_ends_are_infinite():
    assert np.isnan(dist.normal_ppf(1.5)) and np.isnan(dist.t_ppf(-0.1, 3.0)) and np.isnan(dist.t_ppf(0.5, -1.0))
    assert np.isnan(dist.t_ppf(0.0, 0.0)) and np.isnan(stats.t.ppf(0.0, 0.0))  # no t with ν = 0, at either end
    assert dist.normal_ppf(0.0) == -np.inf and dist.normal_isf(0.0) == np.inf
    assert dist.t_ppf(0.0, 4.0) == -np.inf and dist.t_ppf(1.0, 4.0) == np.inf
