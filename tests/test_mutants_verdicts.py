"""Properties of ``verify/verdicts.py`` that the mutation baseline showed were not pinned down.

Written from the verdict table in the module docstring (H0, rejection rule, α in (0, 0.5)) and the
F lack-of-fit test; data from fixed seeds, and no assertion is a rate, so none fails by chance.
"""

import dataclasses

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.estimate import Estimate
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.stats.seed_bootstrap import lognormal_seed_noise
from transformer_limits.verify.verdicts import (
    constant_below,
    exponent_equals,
    fit_adequate,
    rate_at_least,
    slope_zero,
)

L7 = 2.0 ** np.arange(2, 9)


@pytest.fixture(scope="module")
def fit():
    """err = 3 L^-1 with small lognormal seed noise (σ = 0.05, 12 seeds): the exponent CI is narrow."""
    return fit_power_law({"L": L7}, lognormal_seed_noise(3.0 / L7, 12, 0.05, seed=21), n_boot=400)


def test_text_form_states_the_verdict_and_the_note(fit):
    passing, failing = rate_at_least(fit, -1.0, alternative=-0.5), rate_at_least(fit, -2.0)
    assert passing.passed and not failing.passed and passing.state == "pass"
    assert str(passing).startswith("PASS rate_at_least: ") and not str(passing).endswith(" — ")
    assert "power 1.00" in str(passing) and "power not stated" in str(failing)
    assert " — " not in str(passing)  # empty note: nothing appended
    assert str(failing).startswith("FAIL rate_at_least: ") and str(failing).endswith(" — " + failing.note)


@pytest.mark.parametrize("alpha", [0.0, 0.5, -0.1, 0.7])
def test_alpha_outside_open_interval_is_rejected(fit, alpha):
    # α = 0 never rejects (an infinite interval); α ≥ 0.5 makes a one-sided bound cross the estimate
    for verdict in (lambda: rate_at_least(fit, -1.0, alpha), lambda: exponent_equals(fit, -1.0, alpha),
                    lambda: slope_zero(fit, alpha), lambda: constant_below(fit, 10.0, alpha),
                    lambda: fit_adequate(fit, alpha)):
        with pytest.raises(ValueError, match="alpha"):
            verdict()


def test_claim_parameter_is_matched_by_name(fit):
    unnamed = fit_power_law(L7, fit.errors, n_boot=50)
    assert unnamed.param == "p"
    # one-parameter claim: the unnamed levels are that parameter
    assert exponent_equals(unnamed, "L^-1").expected == -1.0
    # two-parameter claim: which parameter the levels vary is ambiguous, so it is refused
    with pytest.raises(ValueError, match="'p'"):
        exponent_equals(unnamed, "L^-1 + L^-1/3 H^-1/2")
    # a named fit picks its own parameter's slowest term
    assert exponent_equals(fit, "L^-1 + L^-1/3 H^-1/2").expected == pytest.approx(-1 / 3)
    named_h = fit_power_law({"H": L7}, fit.errors, n_boot=50)
    assert exponent_equals(named_h, "L^-1 + L^-1/3 H^-1/2").expected == -0.5


@pytest.mark.parametrize("expected, tolerance", [(-2.0, 0.1), (0.0, 0.2), (-1.0, 0.0), (-0.9, 0.05)])
def test_two_sided_distance_is_the_gap_between_ci_and_tolerance_band(fit, expected, tolerance):
    check = exponent_equals(fit, expected, tolerance=tolerance)
    low, high = fit.interval("exponent", 0.99, "two-sided")
    band_low, band_high = expected - tolerance, expected + tolerance
    gap = low - band_high if low > band_high else band_low - high if high < band_low else 0.0
    assert check.statistics["distance"] == pytest.approx(gap, abs=1e-12)
    assert check.passed == (gap == 0.0)
    assert ("tolerance" in check.note) == (tolerance > 0)
    if not check.passed:
        assert f"excludes [{band_low:.3g}, {band_high:.3g}]" in check.note
    else:
        assert "excludes" not in check.note


def test_failure_notes_state_the_confidence(fit):
    check = rate_at_least(fit, -2.0, alpha=0.05)
    assert not check.passed and check.note.endswith("with confidence 0.95")
    check = constant_below(fit, 1.0, alpha=0.05)  # C ≈ 3
    assert not check.passed and check.note.endswith("with confidence 0.95")
    assert constant_below(fit, 100.0).note == ""


def test_constant_below_rejects_only_when_the_lower_bound_exceeds_the_bound(fit):
    # H0 C ≤ bound is rejected when the lower (1 − α) bound of C is > bound; a lower bound equal to
    # the bound is consistent with H0.  A degenerate bootstrap at 2.0 makes the bound exactly 2.0.
    at_two = dataclasses.replace(fit, constant=Estimate("constant", 2.0, bootstrap=np.full(100, 2.0)))
    check = constant_below(at_two, 2.0, method="percentile")
    assert check.ci[0] == 2.0 and check.passed and check.note == ""
    assert not constant_below(at_two, 1.999, method="percentile").passed


def test_fit_adequate_critical_value_is_the_f_quantile(fit):
    # the acceptance region of the F test is [0, F_{dof, dof_noise; 1−α}] and the check passes iff the
    # statistic lies in it (equivalently p ≥ α)
    for alpha in (0.01, 0.2):
        check = fit_adequate(fit, alpha)
        q = fit.quality
        critical = stats.f.ppf(1 - alpha, q.dof, q.dof_noise)
        assert check.ci == (0.0, pytest.approx(critical, rel=1e-12))
        assert check.passed == (q.f_statistic <= critical) == (q.p_value >= alpha)


def test_t_p_value_is_the_t_tail(fit):
    # H0 q ≤ q_claim, t statistic (q̂ − q_claim)/se with n_window − 2 degrees of freedom
    est = fit.exponent
    for q_claim in (-1.05, -1.0, -0.97):
        p = rate_at_least(fit, q_claim, method="t").statistics["p_value"]
        assert p == pytest.approx(stats.t.sf((est.value - q_claim) / est.se, len(fit.window.used) - 2), rel=1e-12)


def test_percentile_p_value_counts_bootstrap_ties_at_the_null():
    """F*(null) = P*(θ* ≤ null), the bootstrap distribution function at the null, ties included
    (a replicate equal to the null is not evidence against H0: θ ≤ null): replicates (1, 2, 2, 3)
    and null 2 give 3/4, not the 1/4 of a strict inequality."""
    from transformer_limits.verify.stats.estimate import one_sided_p_value

    est = Estimate("q", 2.0, bootstrap=np.array([1.0, 2.0, 2.0, 3.0]))
    assert one_sided_p_value(est, 2.0, "percentile") == 0.75
    assert one_sided_p_value(est, 1.5, "percentile") == 0.25
