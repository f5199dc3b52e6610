"""verify/stats/ratio_trend.py: the joint regression of log r̄ over an (L, H) grid, transcribed from
its definition (OLS with an intercept, one-sided t and seed-bootstrap lower bounds)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.ratio_trend import ratio_trend

GRID_L, GRID_H = np.array([2.0, 8.0, 32.0]), np.array([1.0, 4.0, 16.0, 64.0])


def test_exact_power_law_ratio_gives_its_slopes():
    LL, HH = np.meshgrid(GRID_L, GRID_H, indexing="ij")
    r = 0.7 * LL**0.25 * HH**-0.5
    out = ratio_trend(np.repeat(r[:, :, None], 4, axis=2), GRID_L, GRID_H, seed=0, alpha=0.01, n_boot=50)
    assert out["L"]["slope"] == pytest.approx(0.25, abs=1e-12) and out["H"]["slope"] == pytest.approx(-0.5, abs=1e-12)
    assert out["dof"] == GRID_L.size * GRID_H.size - 3
    assert out["rms_log_residual"] == pytest.approx(0.0, abs=1e-12)
    assert out["L"]["lower"] == pytest.approx(0.25, abs=1e-10)  # no noise: every bound is the slope


def test_t_bound_matches_an_independent_ols():
    rng = np.random.default_rng(4)
    ratio = np.exp(0.2 * rng.standard_normal((GRID_L.size, GRID_H.size, 5)))
    out = ratio_trend(ratio, GRID_L, GRID_H, seed=1, alpha=0.05, n_boot=200)
    LL, HH = np.meshgrid(np.log(GRID_L), np.log(GRID_H), indexing="ij")
    X = np.column_stack([np.ones(LL.size), LL.ravel(), HH.ravel()])
    y = np.log(ratio.mean(axis=2)).ravel()
    coef, rss, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = y.size - 3
    se = np.sqrt(rss[0] / dof * np.diag(np.linalg.inv(X.T @ X)))
    for k, name in ((1, "L"), (2, "H")):
        assert out[name]["slope"] == pytest.approx(coef[k], abs=1e-12)
        assert out[name]["se"] == pytest.approx(se[k], rel=1e-10)
        assert out[name]["t_lower"] == pytest.approx(coef[k] - stats.t.ppf(0.95, dof) * se[k], rel=1e-10)
        assert out[name]["lower"] == min(out[name]["t_lower"], out[name]["bootstrap_lower"])


def test_bad_shapes_and_alpha_are_refused():
    with pytest.raises(ValueError, match="ratio"):
        ratio_trend(np.ones((2, 4, 3)), GRID_L, GRID_H, seed=0, alpha=0.01)
    with pytest.raises(ValueError, match="alpha"):
        ratio_trend(np.ones((3, 4, 3)), GRID_L, GRID_H, seed=0, alpha=1.5)
    with pytest.raises(ValueError, match="cells"):
        ratio_trend(np.ones((1, 3, 2)), [2.0], [1.0, 2.0, 4.0], seed=0, alpha=0.01)


def test_zero_alpha_is_refused():
    with pytest.raises(ValueError, match="alpha"):
        ratio_trend(np.ones((3, 4, 3)), GRID_L, GRID_H, seed=0, alpha=0.0)


def test_bootstrap_bound_matches_a_transcription():
    """Seeds resampled jointly over the grid (one index draw per replicate, shared by every cell), the
    cell means of the resample regressed as above, the α-quantile of each slope."""
    rng_data = np.random.default_rng(9)
    seeds = 7  # differs from n_L and n_H, so resampling the wrong axis shows
    ratio = np.exp(0.3 * rng_data.standard_normal((GRID_L.size, GRID_H.size, seeds)))
    out = ratio_trend(ratio, GRID_L, GRID_H, seed=5, alpha=0.1, n_boot=300)
    LL, HH = np.meshgrid(np.log(GRID_L), np.log(GRID_H), indexing="ij")
    X = np.column_stack([np.ones(LL.size), LL.ravel(), HH.ravel()])
    draws = np.random.default_rng(5).integers(seeds, size=(300, seeds))
    slopes = np.array([np.linalg.lstsq(X, np.log(ratio[:, :, idx].mean(axis=2)).ravel(), rcond=None)[0]
                       for idx in draws])
    for k, name in ((1, "L"), (2, "H")):
        assert out[name]["bootstrap_lower"] == pytest.approx(np.quantile(slopes[:, k], 0.1), rel=1e-9)


# ------------------------------------------------------------------------------------------------
# ratio_bound_check: the rate_bound_holds verdict (attention-depth-width and `rate check`)
# ------------------------------------------------------------------------------------------------


def _noisy_ratio(s_L: float, s_H: float, seed: int, sigma: float = 0.2, seeds: int = 6) -> np.ndarray:
    LL, HH = np.meshgrid(GRID_L, GRID_H, indexing="ij")
    rng = np.random.default_rng(seed)
    return (LL**s_L * HH**s_H)[:, :, None] * np.exp(sigma * rng.standard_normal((GRID_L.size, GRID_H.size, seeds)))


def test_ratio_bound_check_is_the_trend_at_alpha_over_two_per_slope():
    from transformer_limits.verify.stats.ratio_trend import ratio_bound_check, trend_power

    ratio = _noisy_ratio(0.0, -0.1, 3)
    check, trend = ratio_bound_check("rate_bound_holds", "c", ratio, GRID_L, GRID_H, alpha=0.02, seed=4,
                                     alternative=0.3, alternative_text="grows", params=("D", "W"), n_boot=300)
    want = ratio_trend(ratio, GRID_L, GRID_H, seed=4, alpha=0.01, n_boot=300)  # Bonferroni over the two slopes
    assert trend == want and check.statistics["trend"] == want
    assert check.statistics["slopes"] == {"D": want["L"], "W": want["H"]}
    worst = max(("L", "H"), key=lambda k: want[k]["lower"])
    assert check.measured == want[worst]["slope"] and check.ci == (want[worst]["lower"], np.inf)
    assert check.passed == (want["L"]["lower"] <= 0 and want["H"]["lower"] <= 0)
    assert check.statistics["worst_slope"] == f"s_{dict(L='D', H='W')[worst]}"
    assert check.power == trend_power(want, 0.3)["power"] and check.alternative == "grows"
    assert set(check.statistics["power_per_slope"]) == {"D", "W"}


def test_ratio_bound_check_fails_a_planted_growing_ratio():
    """r = e / claim growing like H^0.5 (heads scaled 1/√H instead of 1/H): the lower bound of s_H is > 0."""
    from transformer_limits.verify.stats.ratio_trend import ratio_bound_check

    check, trend = ratio_bound_check("rate_bound_holds", "c", _noisy_ratio(0.0, 0.5, 7, sigma=0.1), GRID_L, GRID_H,
                                     alpha=0.01, seed=0, alternative=0.3, alternative_text="grows", n_boot=300)
    assert not check.passed and trend["H"]["lower"] > 0 and check.statistics["worst_slope"] == "s_H"
    assert "e / claim grows in H" in check.note and "grows in L" not in check.note


def test_ratio_bound_check_false_failure_rate_is_at_most_alpha():
    """A flat ratio (the bound holds with slopes 0, the boundary of the claim): 300 datasets fail in at most
    the binomial 99.9 % quantile of α = 0.05 (≤ 27 of 300; the union of two bounds at α/2 each)."""
    from transformer_limits.verify.stats.ratio_trend import ratio_bound_check

    failed = sum(not ratio_bound_check("r", "c", _noisy_ratio(0.0, 0.0, 100 + k), GRID_L, GRID_H, alpha=0.05, seed=k,
                                       alternative=0.3, alternative_text="grows", n_boot=200)[0].passed
                 for k in range(300))
    assert failed <= 27
