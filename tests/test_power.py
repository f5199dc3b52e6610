"""Power of a check against its declared alternative (verify/stats/power.py; docs/verification.md, "Power").

Written from the definition: a check rejects when a one-sided bound θ̂ ∓ h crosses its threshold; if
the truth lies D beyond the threshold and θ̂ ~ N(truth, se²), the rejection probability is
Φ((D − h)/se).  The formula is transcribed here independently (``_transcribed``), checked at the
points where it must be α, ½ and 1 − β, and the shift model is checked against the rejection rate
of the real verdicts on simulated data (``test_predicted_power_matches_simulated_rejections``).

False-failure rates: the formula tests are exact (no randomness).  The simulation test draws 300
datasets with fixed seeds; the empirical rate has binomial SE ≤ 0.029 and the assertion allows
0.12 (≥ 4 SE plus the model's own approximation), so it fails a correct implementation with
probability < 1e-4 and, being seeded, gives the same answer on every run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.beta_difference import ordering_finding, ordering_power
from transformer_limits.verify.stats.power import (POWER_THRESHOLD, bound_power, deterministic_power,
                                                   family_power, seeds_factor, two_sided_power, z_test_power)
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.stats.seed_bootstrap import lognormal_seed_noise
from transformer_limits.verify.verdicts import Check, attach_power, exponent_equals, rate_at_least, slope_zero


def _transcribed(distance, half_width, se):
    """P(N(truth, se²) − h > threshold) with truth = threshold + distance."""
    return 1.0 - stats.norm.cdf((0.0 + half_width - distance) / se)


@pytest.mark.parametrize("d,h,se", [(0.3, 0.2, 0.05), (0.1, 0.2, 0.05), (1.0, 0.0, 0.3), (0.25, 0.25, 0.1)])
def test_bound_power_is_the_normal_tail(d, h, se):
    assert bound_power(d, h, se) == pytest.approx(_transcribed(d, h, se), abs=1e-12)


def test_bound_power_landmarks():
    se = 0.1
    z = stats.norm.ppf(0.99)
    # at the threshold (D = 0) an exact one-sided 99 % bound rejects with probability α = 0.01
    assert bound_power(0.0, z * se, se) == pytest.approx(0.01, abs=1e-12)
    # truth exactly a half-width beyond the threshold: a coin toss
    assert bound_power(z * se, z * se, se) == pytest.approx(0.5, abs=1e-12)
    # 80 % needs D = h + z_0.8 se
    assert bound_power(z * se + stats.norm.ppf(0.8) * se, z * se, se) == pytest.approx(0.8, abs=1e-12)
    assert bound_power(1.0, 0.1, 0.0) == 1.0 and bound_power(0.05, 0.1, 0.0) == 0.0
    assert bound_power(5.0, math.inf, 0.1) == 0.0  # an open interval rejects nothing
    with pytest.raises(ValueError, match="half_width"):
        bound_power(0.1, -1.0, 0.1)


def test_two_sided_power_takes_the_weaker_side_and_is_zero_inside():
    se, tol = 0.05, 0.1
    low_side, high_side = 0.12, 0.2  # θ̂ − low decides the upper alternative, high − θ̂ the lower one
    p = two_sided_power(0.4, tol, (low_side, high_side), se)
    assert p == pytest.approx(min(_transcribed(0.3, low_side, se), _transcribed(0.3, high_side, se)))
    assert p == pytest.approx(_transcribed(0.3, high_side, se))
    assert two_sided_power(0.1, tol, (0.0, 0.0), se) == 0.0  # on the edge of the accepted region
    assert two_sided_power(-0.4, tol, (low_side, high_side), se) == p  # the sign of the offset is irrelevant


def test_z_test_power_against_monte_carlo():
    rng = np.random.default_rng(3)
    shift, se, zc = 0.3, 0.1, stats.norm.isf(0.01 / 16)  # two-sided at 0.01/8
    z = rng.normal(shift / se, 1.0, size=200_000)
    empirical = np.mean(np.abs(z) > zc)
    assert z_test_power(shift, se, zc) == pytest.approx(empirical, abs=0.005)  # MC SE ≈ 0.001
    assert z_test_power(0.0, se, zc) == pytest.approx(0.01 / 8, rel=1e-9)  # at the null: its level


def test_family_and_deterministic_power():
    assert family_power([0.9, 0.4, 0.99]) == 0.4
    with pytest.raises(ValueError):
        family_power([])
    assert deterministic_power(True) == 1.0 and deterministic_power(False) == 0.0


def test_seeds_factor_reaches_the_threshold():
    d, h, se = 0.15, 0.25, 0.1
    assert bound_power(d, h, se) < POWER_THRESHOLD
    f = seeds_factor(d, h, se)
    # f times the seeds shrink both the standard error and the half-width by sqrt(f)
    assert bound_power(d, h / math.sqrt(f), se / math.sqrt(f)) == pytest.approx(POWER_THRESHOLD, abs=1e-9)
    assert seeds_factor(0.0, h, se) == math.inf
    assert seeds_factor(1.0, 0.01, 0.01) < 1.0  # enough already


def _check(passed=True, power=None):
    return Check("c", "claim", 0.0, 0.0, (-1.0, 1.0), passed, {"alpha": 0.01}, "", power)


def test_check_states():
    assert _check(False, 0.99).state == "fail"
    assert _check(False, None).state == "fail"
    assert _check(True, 0.8).state == "pass"  # the threshold itself is enough
    assert _check(True, 0.7999).state == "inconclusive"
    assert _check(True, None).state == "inconclusive"  # no stated power: never a silent pass
    d = _check(True, 0.5).to_dict()
    assert d["state"] == "inconclusive" and d["power"] == 0.5
    back = Check.from_dict(d)
    assert back.power == 0.5 and back.state == "inconclusive"


def test_attach_power_explains_an_inconclusive_check():
    c = attach_power(_check(True), 0.3, "q = -0.5", distance=0.2, half_width=0.25, se=0.1)
    assert c.state == "inconclusive" and "inconclusive: power 0.30" in c.note and "the seeds" in c.note
    assert c.statistics["seeds_factor_for_power"] == pytest.approx(seeds_factor(0.2, 0.25, 0.1))
    with pytest.raises(ValueError, match="power"):
        attach_power(_check(True), 1.5, "x")


def _fit(q, seed, sigma=0.3, n_seeds=8, levels=2.0 ** np.arange(3, 8)):
    errors = lognormal_seed_noise(levels**q, n_seeds, sigma, seed)
    return fit_power_law({"L": levels}, errors, window="all", n_boot=200, seed=seed)


@pytest.mark.parametrize("verdict,q1", [("rate_at_least", -0.9), ("exponent_equals", -0.85)])
def test_predicted_power_matches_simulated_rejections(verdict, q1):
    """Data drawn at the alternative itself: the share of replicates the verdict rejects is the
    power; each replicate's predicted power (from its own data) must average to it (measured:
    0.44 vs 0.45 and 0.22 vs 0.27)."""
    q_claim, R = -1.0, 300
    rejected, predicted = [], []
    for r in range(R):
        fit = _fit(q1, 1000 + r)
        if verdict == "rate_at_least":
            chk = rate_at_least(fit, q_claim, 0.05, alternative=q1)
        else:
            chk = exponent_equals(fit, q_claim, 0.05, tolerance=0.05, alternative=q1)
        rejected.append(not chk.passed)
        predicted.append(chk.power)
    empirical, mean_predicted = float(np.mean(rejected)), float(np.mean(predicted))
    assert 0.15 < empirical < 0.95  # a case where power is neither 0 nor 1, so the comparison means something
    assert mean_predicted == pytest.approx(empirical, abs=0.12)


def test_verdicts_reject_alternatives_inside_the_null():
    fit = _fit(-1.0, 1)
    with pytest.raises(ValueError, match="slower"):
        rate_at_least(fit, -1.0, alternative=-1.2)
    with pytest.raises(ValueError, match="outside"):
        exponent_equals(fit, -1.0, tolerance=0.2, alternative=-0.9)
    with pytest.raises(ValueError, match="outside"):
        slope_zero(fit, tolerance=0.2, alternative=0.1)


def test_more_seeds_more_power():
    few = rate_at_least(_fit(-1.0, 5, n_seeds=4), -1.0, 0.01, alternative=-0.8)
    many = rate_at_least(_fit(-1.0, 5, n_seeds=64), -1.0, 0.01, alternative=-0.8)
    assert many.power > few.power and many.state == "pass" and few.state == "inconclusive"


def test_ordering_power_and_findings():
    # Δ̂ = 0.3, se 0.1, one-sided half-width 0.2: upper 0.5, lower 0.1
    row = dict(delta=0.3, upper=0.5, lower=0.1, se=0.1)
    p = ordering_power([row], 0.5)
    assert p["power"] == pytest.approx(_transcribed(0.5, 0.2, 0.1))
    weak = dict(delta=0.3, upper=0.9, lower=-0.3, se=0.3)
    assert ordering_power([row, weak], 0.5)["worst"] == 1
    assert ordering_finding([row], 0.4) == "reproduced"
    assert ordering_finding([row], 0.6) == "reproduced, smaller than published"
    assert ordering_finding([dict(row, lower=-0.1)], 0.6) == "effect excluded"
    assert ordering_finding([dict(row, lower=-0.1)], 0.4) == "undecided"
    assert ordering_finding([dict(row, upper=-0.01, lower=-0.5)], 0.4) == "reversed"
    # spectral-released rows name the lower optimizer "lower" and its bound "lower_bound"
    assert ordering_finding([dict(row, lower="AdamW", lower_bound=0.1)], 0.4) == "reproduced"


def test_edges_of_the_power_formulas():
    """Boundaries: an exact estimate exactly at the half-width is not rejected; standard errors
    must be finite and >= 0 (> 0 for the z-test); the seeds factor of an exact estimate."""
    assert bound_power(0.1, 0.1, 0.0) == 0.0 and bound_power(0.1 + 1e-12, 0.1, 0.0) == 1.0
    for se in (-0.5, -1e-9, math.nan, math.inf):
        with pytest.raises(ValueError, match="se"):
            bound_power(0.1, 0.0, se)
        with pytest.raises(ValueError, match="se"):
            seeds_factor(0.1, 0.0, se)
    for se in (0.0, -0.5):
        with pytest.raises(ValueError, match="se"):
            z_test_power(0.3, se, 2.0)
    assert seeds_factor(0.2, 0.1, 0.0) == 1.0 and seeds_factor(0.1, 0.2, 0.0) == math.inf
    assert seeds_factor(0.1, 0.1, 0.0) == math.inf  # at the half-width an exact estimate is not rejected
    assert seeds_factor(0.2, math.inf, 0.1) == math.inf
