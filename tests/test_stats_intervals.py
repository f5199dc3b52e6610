"""verify/stats/intervals.py: the one Student-t interval of the verify layer, from its definition.

For X_1..X_n i.i.d. N(μ, σ²), (X̄ − μ) / (s/√n) is Student t with n − 1 degrees of freedom, so
X̄ ± t_{1−α/2, n−1} s/√n covers μ with probability exactly 1 − α.  The coverage tests draw R
replicates with a fixed seed and accept the empirical coverage inside the central binomial band that
holds all but FALSE_FAILURE = 1e-6 of Binomial(R, 1 − α): a correct interval fails this test with
probability at most 1e-6, and the band (±1.2 points at R = 8 000) excludes the normal quantile at
4 dof (coverage 87.8 % at nominal 95 %).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.intervals import t_interval, t_quantile, welch_satterthwaite_dof

FALSE_FAILURE = 1e-6
R = 8_000


def band(n: int, nominal: float) -> tuple[float, float]:
    return stats.binom.ppf(FALSE_FAILURE / 2, n, nominal) / n, stats.binom.isf(FALSE_FAILURE / 2, n, nominal) / n


def _samples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).normal(1.5, 2.0, size=(R, n))
    return x.mean(axis=1), x.std(axis=1, ddof=1) / math.sqrt(n)


def test_quantiles_match_printed_tables():
    # Student t table: t_{0.975, 10} = 2.228, t_{0.95, 4} = 2.132, t_{0.995, 1} = 63.657; normal: 1.960
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=5e-4)
    assert t_quantile(0.95, 4) == pytest.approx(2.132, abs=5e-4)
    assert t_quantile(0.995, 1) == pytest.approx(63.657, abs=5e-4)
    assert t_quantile(0.975, math.inf) == pytest.approx(1.95996, abs=1e-5)
    assert t_quantile(0.025, 7) == pytest.approx(-t_quantile(0.975, 7), rel=1e-12)


def test_interval_shapes_and_sides():
    q = t_quantile(0.975, 6)
    low, high = t_interval(2.0, 0.5, 6, level=0.95)
    assert low == pytest.approx(2.0 - q * 0.5, rel=1e-14) and high == pytest.approx(2.0 + q * 0.5, rel=1e-14)
    # a one-sided (1 − α) bound is the end of the two-sided (1 − 2α) interval
    lo1, inf = t_interval(2.0, 0.5, 6, level=0.95, side="lower")
    ninf, hi1 = t_interval(2.0, 0.5, 6, level=0.95, side="upper")
    lo2, hi2 = t_interval(2.0, 0.5, 6, level=0.90)
    assert inf == math.inf and ninf == -math.inf
    assert lo1 == pytest.approx(lo2, rel=1e-12) and hi1 == pytest.approx(hi2, rel=1e-12)
    assert t_interval(3.0, 0.0, 4, level=0.99) == (3.0, 3.0)  # an exact estimate has no error


@pytest.mark.parametrize("kwargs, name", [(dict(level=1.0), "level"), (dict(level=0.0), "level"),
                                          (dict(level=0.9, side="both"), "side")])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        t_interval(0.0, 1.0, 3, **kwargs)
    with pytest.raises(ValueError, match="se"):
        t_interval(0.0, -1.0, 3, level=0.9)
    with pytest.raises(ValueError, match="dof"):
        t_quantile(0.9, 0)
    with pytest.raises(ValueError, match="p must"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="p must"):
        t_quantile(0.0, 3)


def test_two_sided_coverage_is_nominal():
    mean, se = _samples(5, seed=1)
    lows, highs = zip(*(t_interval(m, s, 4, level=0.95) for m, s in zip(mean, se)))
    cover = np.mean((np.array(lows) <= 1.5) & (1.5 <= np.array(highs)))
    lo, hi = band(R, 0.95)
    assert lo <= cover <= hi, cover


def test_one_sided_coverage_is_nominal():
    mean, se = _samples(4, seed=2)
    lower = np.array([t_interval(m, s, 3, level=0.9, side="lower")[0] for m, s in zip(mean, se)])
    upper = np.array([t_interval(m, s, 3, level=0.9, side="upper")[1] for m, s in zip(mean, se)])
    lo, hi = band(R, 0.9)
    assert lo <= np.mean(lower <= 1.5) <= hi and lo <= np.mean(1.5 <= upper) <= hi


def test_normal_quantile_at_small_dof_is_caught():
    """Power: the same data with the normal quantile (dof = ∞) undercover (≈ 87.8 % at 4 dof)."""
    mean, se = _samples(5, seed=1)
    lows, highs = zip(*(t_interval(m, s, math.inf, level=0.95) for m, s in zip(mean, se)))
    cover = np.mean((np.array(lows) <= 1.5) & (1.5 <= np.array(highs)))
    assert cover < band(R, 0.95)[0]


def test_welch_satterthwaite_limits():
    # equal standard errors and dof: ν = (2s²)² / (2s⁴/ν) = 2ν; one exact estimate: ν of the other
    assert welch_satterthwaite_dof(0.3, 5, 0.3, 5) == pytest.approx(10.0)
    assert welch_satterthwaite_dof(0.3, 5, 0.0, 9) == pytest.approx(5.0)
    assert welch_satterthwaite_dof(0.0, 5, 0.0, 9) == 14.0
    nu = welch_satterthwaite_dof(0.2, 3, 0.5, 12)
    assert min(3, 12) <= nu <= 3 + 12


def test_welch_difference_coverage_is_close_to_nominal():
    """Δ = X̄_a − X̄_b of samples of sizes 4 and 9 with σ_a = 1, σ_b = 3: the Welch interval is an
    approximation (exact coverage ≈ 95 %); accepted within [93 %, 96.5 %] over 8 000 replicates."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.0, 1.0, (R, 4)), rng.normal(0.0, 3.0, (R, 9))
    se_a, se_b = a.std(axis=1, ddof=1) / 2.0, b.std(axis=1, ddof=1) / 3.0
    hits = 0
    for d, sa, sb in zip(a.mean(axis=1) - b.mean(axis=1), se_a, se_b):
        lo, hi = t_interval(d, math.hypot(sa, sb), welch_satterthwaite_dof(sa, 3, sb, 8), level=0.95)
        hits += lo <= 0.0 <= hi
    assert 0.93 <= hits / R <= 0.965
