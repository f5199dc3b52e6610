"""The Bonferroni family of z-tests (transformer_limits.verify.stats.z_family), from its definition:
critical value Φ⁻¹(1 − α/(2n)), the family-wise false-failure rate α under the claim, and the power
against one setting off by r |θ| (the shift model against simulated families)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from transformer_limits.verify.stats.z_family import z_test_family


def test_critical_value_and_verdict_from_the_definition():
    est, se, pred = [1.0, 2.2, -0.5], [0.1, 0.1, 0.2], [1.0, 2.0, -0.5]
    check, z = z_test_family("c", "claim", est, se, pred, 0.01, labels=["a", "b", "c"])
    z_star = norm.ppf(1 - 0.01 / 6)  # two-sided at α/n, n = 3
    assert check.statistics["z_critical"] == pytest.approx(z_star, rel=1e-12)
    assert z == pytest.approx([0.0, 2.0, 0.0], abs=1e-12)
    assert check.passed and check.measured == pytest.approx(2.0)  # |z| = 2 < z* ≈ 2.94
    assert check.statistics["worst_setting"] == "b"
    assert check.statistics["bonferroni_p_value"] == pytest.approx(min(1.0, 3 * 2 * norm.sf(2.0)))
    bad, _ = z_test_family("c", "claim", [1.0, 2.3, -0.5], se, pred, 0.01)
    assert not bad.passed and "1/3 settings reject" in bad.note  # |z| = 3 > z*


def test_false_failure_rate_is_at_most_alpha_under_the_claim():
    # 4000 families of 5 Gaussian estimates at their predictions: the rejection rate is ≤ α = 0.05 up to
    # sampling error (binomial sd 0.0034; the bound 0.05 + 3.5 sd is exceeded with probability < 3e-4)
    rng = np.random.default_rng(12)
    pred, se = np.linspace(-1, 1, 5), np.full(5, 0.2)
    rejected = [not z_test_family("c", "x", pred + se * rng.standard_normal(5), se, pred, 0.05)[0].passed
                for _ in range(4000)]
    assert np.mean(rejected) <= 0.05 + 3.5 * math.sqrt(0.05 * 0.95 / 4000)


def test_power_matches_simulated_rejections_of_one_shifted_setting():
    pred, se, r = np.array([-0.4, -0.2, -0.1]), np.array([0.02, 0.02, 0.02]), 0.25
    check, _ = z_test_family("c", "x", pred, se, pred, 0.01, relative_alternative=r, alternative_text="off")
    power = check.power
    # the weakest member is the smallest |θ| (shift 0.025 = 1.25 SE): Φ(1.25 − z*) + Φ(−1.25 − z*)
    z_star = norm.ppf(1 - 0.01 / 6)
    assert power == pytest.approx(norm.cdf(1.25 - z_star) + norm.cdf(-1.25 - z_star), rel=1e-9)
    rng = np.random.default_rng(3)
    shifted = pred.copy()
    shifted[2] *= 1 + r
    hits = [not z_test_family("c", "x", shifted + se * rng.standard_normal(3), se, pred, 0.01)[0].passed
            for _ in range(3000)]
    assert abs(np.mean(hits) - power) < 4 * math.sqrt(power * (1 - power) / 3000) + 0.01


@pytest.mark.parametrize("kwargs, word", [
    (dict(estimates=[1.0], standard_errors=[0.0], predicted=[1.0]), "standard_errors"),
    (dict(estimates=[1.0, 2.0], standard_errors=[0.1], predicted=[1.0]), "equal-length"),
    (dict(estimates=[1.0], standard_errors=[0.1], predicted=[1.0], alpha=0.7), "alpha"),
    (dict(estimates=[1.0], standard_errors=[0.1], predicted=[1.0], labels=["a", "b"]), "labels"),
])
def test_bad_input_names_the_argument(kwargs, word):
    kwargs.setdefault("alpha", 0.01)
    with pytest.raises(ValueError, match=word):
        z_test_family("c", "x", **kwargs)


def test_recorded_statistics_and_the_boundary_from_the_definition():
    z_star = norm.isf(0.02 / (2 * 2))
    # |z| exactly at z* passes (the acceptance region is closed), and the interval is (−z*, z*)
    check, _ = z_test_family("c", "x", [z_star, 0.0], [1.0, 1.0], [0.0, 0.0], 0.02)
    assert check.passed and check.ci == (-z_star, z_star)
    st = check.statistics
    assert st["per_test_alpha"] == pytest.approx(0.01) and st["n_settings"] == 2
    # z = 0 everywhere: p = 1, and the Bonferroni-adjusted p-value is capped at 1
    flat, _ = z_test_family("c", "x", [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], 0.02)
    assert flat.statistics["bonferroni_p_value"] == 1.0
    # the seeds factor reads the weakest member's distance r|θ| and half-width z*·SE (shift model)
    from transformer_limits.verify.stats.power import seeds_factor

    pred, se = [-0.4, -0.1], [0.02, 0.05]
    c, _ = z_test_family("c", "x", pred, se, pred, 0.01, relative_alternative=0.25, alternative_text="off")
    z2 = norm.isf(0.01 / 4)
    assert c.statistics["seeds_factor_for_power"] == pytest.approx(seeds_factor(0.025, z2 * 0.05, 0.05))


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_alpha_must_lie_strictly_between_0_and_one_half(alpha):
    with pytest.raises(ValueError, match="alpha"):
        z_test_family("c", "x", [1.0], [0.1], [1.0], alpha)


@pytest.mark.parametrize("estimates", [np.zeros((2, 2)), np.zeros(0)])
def test_estimates_must_be_a_non_empty_vector(estimates):
    with pytest.raises(ValueError, match="equal-length"):
        z_test_family("c", "x", estimates, np.ones_like(estimates), np.zeros_like(estimates), 0.01)
