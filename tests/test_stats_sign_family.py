"""The Bonferroni family of one-sided sign tests (transformer_limits.verify.stats.sign_family), from its
definition: critical value t_{1−α/n, ν}, each member bounded on the side its prediction says, the
family-wise false-failure rate ≤ α at the boundary, and the power against the other sign (the shift
model, against simulated families)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.sign_family import sign_test_family


def test_bounds_and_verdict_from_the_definition():
    est, se, pred = [0.09, -0.12], [0.02, 0.03], [0.1, -0.1]
    check = sign_test_family("s", "claim", est, se, pred, 0.01, ["a", "b"], dof=15, relative_alternative=-1.0,
                             alternative_text="the other sign")
    t = stats.t.ppf(1 - 0.01 / 2, 15)  # one-sided at α/n, n = 2
    assert check.statistics["z_critical"] == pytest.approx(t, rel=1e-12)
    members = check.statistics["members"]
    # predicted growth: the upper bound est + t SE; predicted decay: the lower bound est − t SE
    assert members["a"]["ci"] == [None, pytest.approx(0.09 + t * 0.02, rel=1e-12)]
    assert members["b"]["ci"] == [pytest.approx(-0.12 - t * 0.03, rel=1e-12), None]
    assert members["a"]["statistics"]["alpha"] == pytest.approx(0.005)
    assert check.passed and check.statistics["alpha_per_member"] == pytest.approx(0.005)
    # power per member Φ((|r θ| − t SE)/SE) with r = −1; the family's is the weakest member's
    want = min(stats.norm.cdf((0.1 - t * 0.02) / 0.02), stats.norm.cdf((0.1 - t * 0.03) / 0.03))
    assert check.power == pytest.approx(want, rel=1e-12)
    # the normal quantile without degrees of freedom
    normal = sign_test_family("s", "claim", est, se, pred, 0.01, ["a", "b"])
    assert normal.statistics["z_critical"] == pytest.approx(stats.norm.ppf(1 - 0.005), rel=1e-12)


def test_a_planted_wrong_sign_fails():
    # b grows significantly (0.09 − t·0.02 > 0) where decay is predicted: that member and the family fail
    check = sign_test_family("s", "claim", [0.09, 0.09], [0.02, 0.02], [0.1, -0.1], 0.01, ["a", "b"], dof=15,
                             quantity="rate", symbol="λ̄")
    assert not check.passed and check.statistics["worst_member"] == "b"
    assert "rate 0.09" in check.note and "λ̄ = -0.1" in check.note
    # a member whose estimate sits near 0 is not evidence against either sign: it passes
    assert sign_test_family("s", "c", [0.09, 0.01], [0.02, 0.02], [0.1, -0.1], 0.01, ["a", "b"]).passed


def test_false_failure_rate_is_at_most_alpha_at_the_boundary():
    """Every true mean at 0 (the least favourable point of the claim): 4000 families of 4 t-distributed
    estimates fail in ≤ α of them (binomial sd 0.0034 at α = 0.05)."""
    rng = np.random.default_rng(5)
    pred, se, dof = np.array([0.2, -0.1, 0.05, -0.3]), np.full(4, 0.1), 9
    failed = [not sign_test_family("s", "c", se * rng.standard_t(dof, 4), se, pred, 0.05, list("abcd"),
                                   dof=dof).passed for _ in range(4000)]
    assert np.mean(failed) <= 0.05 + 3.5 * math.sqrt(0.05 * 0.95 / 4000)


def test_power_matches_simulated_rejections_of_the_mirror_image():
    pred, se = np.array([0.1, -0.15]), np.array([0.03, 0.03])
    check = sign_test_family("s", "c", pred, se, pred, 0.01, ["a", "b"], relative_alternative=-1.0,
                             alternative_text="the other sign")
    rng = np.random.default_rng(11)
    truth = pred.copy()
    truth[0] = -pred[0]  # the weakest member (smallest |θ|) has the other sign
    hits = [not sign_test_family("s", "c", truth + se * rng.standard_normal(2), se, pred, 0.01, ["a", "b"]).passed
            for _ in range(3000)]
    power = check.power
    assert abs(np.mean(hits) - power) < 4 * math.sqrt(power * (1 - power) / 3000) + 0.01


@pytest.mark.parametrize("kwargs, word", [
    (dict(estimates=[1.0, 2.0], standard_errors=[0.1], predicted=[1.0], labels=["a"]), "equal-length"),
    (dict(estimates=[1.0], standard_errors=[0.1], predicted=[1.0], labels=["a"], alpha=0.7), "alpha"),
    (dict(estimates=[1.0], standard_errors=[float("nan")], predicted=[1.0], labels=["a"]), "standard_errors"),
    (dict(estimates=[1.0], standard_errors=[0.1], predicted=[1.0], labels=["a"], relative_alternative=0.5),
     "relative_alternative"),
])
def test_bad_input_names_the_argument(kwargs, word):
    args = dict(name="s", claim="c", alpha=0.01) | kwargs
    with pytest.raises(ValueError, match=word):
        sign_test_family(**args)


def test_power_scales_with_the_relative_alternative():
    """Mutation round: with r = −0.5 (not −1, where r θ and θ / r coincide in size) the distance is |r θ|."""
    est, se, pred = [0.09], [0.02], [0.2]
    check = sign_test_family("s", "claim", est, se, pred, 0.01, ["a"], dof=15, relative_alternative=-0.5,
                             alternative_text="half the rate, other sign")
    t = stats.t.ppf(1 - 0.01, 15)
    assert check.power == pytest.approx(stats.norm.cdf((0.5 * 0.2 - t * 0.02) / 0.02), rel=1e-12)


def test_a_bound_exactly_at_zero_is_not_evidence_of_the_other_sign():
    """Mutation round: the bounds are closed (≥ 0 for predicted growth, ≤ 0 for decay): with SE 0 an
    estimate of exactly 0 passes on either side, a predicted 0 counts as decay."""
    assert sign_test_family("s", "c", [0.0, 0.0], [0.0, 0.0], [0.1, -0.1], 0.01, ["a", "b"]).passed
    check = sign_test_family("s", "c", [0.05], [0.0], [0.0], 0.01, ["a"])
    assert not check.passed  # θ = 0 is tested as decay: a growing estimate contradicts it
    assert check.statistics["members"]["a"]["ci"][1] is None
