"""Properties of ``verify/scaling_fit.py`` that the mutation baseline showed were not pinned down.

The bootstraps are transcribed from their description (Davison & Hinkley 1997, *Bootstrap Methods
and their Application*, alg. 6.1 for the residual bootstrap with leverage-corrected residuals; case
resampling for "pairs"), drawing from ``numpy.random.default_rng(seed)`` as documented.
"""

import csv
import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.scaling_fit import read_points_csv
from transformer_limits.verify.stats.width_scaling import bootstrap_slopes
from transformer_limits.verify.stats.width_scaling import fit_width_scaling

WIDTHS = np.array([96.0, 104.0, 112.0, 128.0, 136.0, 150.0])  # close widths: log-range 0.45 < 1


def _slope(x, y):
    n = len(x)
    xbar, ybar = sum(x) / n, sum(y) / n
    return sum((a - xbar) * (b - ybar) for a, b in zip(x, y)) / sum((a - xbar) ** 2 for a in x)


def _residual_bootstrap_by_hand(x, y, n_boot, seed):
    """Davison & Hinkley alg. 6.1: fit, modified residuals r_i = e_i/sqrt(1 − h_ii) with leverage
    h_ii = 1/n + (x_i − x̄)²/Sxx, centred; y* = fitted + r_{I} with I uniform on {0..n−1}."""
    n = len(x)
    b = _slope(x, y)
    xbar, ybar = sum(x) / n, sum(y) / n
    a = ybar - b * xbar
    sxx = sum((v - xbar) ** 2 for v in x)
    fitted = [a + b * v for v in x]
    r = [(y[i] - fitted[i]) / math.sqrt(1.0 - (1.0 / n + (x[i] - xbar) ** 2 / sxx)) for i in range(n)]
    rbar = sum(r) / n
    r = [v - rbar for v in r]
    draws = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    return [_slope(x, [fitted[i] + r[draws[k, i]] for i in range(n)]) for k in range(n_boot)]


def _pairs_bootstrap_by_hand(x, y, n_boot, seed):
    """Case resampling: n (x, y) pairs drawn with replacement; resamples with one distinct x dropped."""
    n = len(x)
    draws = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    out = []
    for k in range(n_boot):
        xs, ys = [x[i] for i in draws[k]], [y[i] for i in draws[k]]
        if max(xs) > min(xs):
            out.append(_slope(xs, ys))
    return out


def _data(seed=3):
    rng = np.random.default_rng(seed)
    return WIDTHS, 5.0 * WIDTHS**0.7 * np.exp(0.05 * rng.standard_normal(WIDTHS.size))


def test_residual_bootstrap_is_davison_hinkley_6_1():
    w, r = _data()
    lx, ly = np.log(w), np.log(r)
    got = bootstrap_slopes(lx, ly, n_bootstrap=300, seed=11, method="residual")
    np.testing.assert_allclose(got, _residual_bootstrap_by_hand(list(lx), list(ly), 300, 11), rtol=1e-9)


def test_pairs_bootstrap_resamples_points_and_drops_degenerate_resamples():
    # 3 points: 3 of the 27 equally likely resamples have one distinct width (slope undefined)
    for w, r in (_data(), (WIDTHS[:3], 5.0 * WIDTHS[:3] ** 0.7 * np.array([1.01, 0.98, 1.02]))):
        lx, ly = np.log(w), np.log(r)
        expected = _pairs_bootstrap_by_hand(list(lx), list(ly), 400, 5)
        got = bootstrap_slopes(lx, ly, n_bootstrap=400, seed=5, method="pairs")
        np.testing.assert_allclose(got, expected, rtol=1e-9)
    assert len(expected) < 400  # the 3-point case did drop degenerate resamples


@pytest.mark.parametrize("bootstrap", ["residual", "pairs"])
@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_bootstrap_interval_is_the_equal_tailed_percentile_interval(bootstrap, confidence):
    w, r = _data()
    fit = fit_width_scaling(w, r, confidence=confidence, n_bootstrap=500, seed=2, bootstrap=bootstrap)
    slopes = np.sort(bootstrap_slopes(np.log(w), np.log(r), n_bootstrap=500, seed=2, method=bootstrap))
    tail = (1 - confidence) / 2
    # linear-interpolation quantile at level u: position u (B − 1) in the sorted slopes
    def quantile(u):
        pos = u * (slopes.size - 1)
        lo = int(math.floor(pos))
        return slopes[lo] + (pos - lo) * (slopes[min(lo + 1, slopes.size - 1)] - slopes[lo])
    assert fit.boot_ci_low == pytest.approx(quantile(tail), rel=1e-12)
    assert fit.boot_ci_high == pytest.approx(quantile(1 - tail), rel=1e-12)
    assert fit.bootstrap_n == slopes.size


def test_t_interval_is_closed_and_exact_fit_has_zero_standard_error():
    w, r = _data()
    fit = fit_width_scaling(w, r)
    t = stats.t.ppf(0.975, w.size - 2)
    assert fit.ci_low == pytest.approx(fit.beta - t * fit.stderr, rel=1e-12)
    assert fit.covers(fit.ci_low) and fit.covers(fit.ci_high)  # a confidence interval is closed
    boot = fit_width_scaling(w, r, n_bootstrap=100)
    assert boot.covers(boot.boot_ci_low, bootstrap=True) and boot.covers(boot.boot_ci_high, bootstrap=True)
    flat = fit_width_scaling(w, np.full(w.size, 7.0))  # constant R: slope 0 exactly, no uncertainty
    assert (flat.beta, flat.stderr, flat.ci_low, flat.ci_high) == (0.0, 0.0, 0.0, 0.0)


def test_two_distinct_widths_with_repeats_determine_a_slope():
    # 4 points at 2 widths: the slope is that through the two group means of log R, with 2 dof
    w = np.array([64.0, 64.0, 256.0, 256.0])
    r = np.array([10.0, 12.0, 30.0, 33.0])
    fit = fit_width_scaling(w, r)
    expected = (math.log(30 * 33) / 2 - math.log(10 * 12) / 2) / math.log(4.0)
    assert fit.beta == pytest.approx(expected, rel=1e-12) and fit.n == 4
    with pytest.raises(ValueError, match="two distinct widths"):
        fit_width_scaling([64.0, 64.0, 64.0], [1.0, 2.0, 3.0])


@pytest.mark.parametrize("confidence", [1.0, 0.0, 1.5])
def test_confidence_outside_open_unit_interval_is_rejected(confidence):
    w, r = _data()
    with pytest.raises(ValueError, match="confidence"):
        fit_width_scaling(w, r, confidence=confidence)


def test_fit_record_is_immutable():
    fit = fit_width_scaling(*_data())
    with pytest.raises(dataclasses.FrozenInstanceError):
        fit.beta = 1.0


def _write(path, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["optimizer", "stratum", "metric", "width", "value"])
        writer.writerows(rows)
    return path


def test_csv_accepts_values_below_one_and_rejects_an_empty_metric(tmp_path):
    # a width/value must be finite and positive, nothing more: 0.5 is a valid value
    rows = [["AdamW", "GLOBAL", "soft", 64, 0.5], ["AdamW", "GLOBAL", "soft", 128, 0.75],
            ["AdamW", "GLOBAL", "soft", 256, 1.0]]
    groups = read_points_csv(_write(tmp_path / "ok.csv", rows))
    np.testing.assert_array_equal(groups["AdamW", "GLOBAL", "soft"][1], [0.5, 0.75, 1.0])
    rows[1][2] = ""
    with pytest.raises(ValueError, match="row 3: column 'metric' is empty"):
        read_points_csv(_write(tmp_path / "bad.csv", rows))


def test_one_bootstrap_replicate_is_a_valid_request():
    """n_bootstrap is "a positive integer": 1 gives one replicate slope, 0 is refused."""
    x = np.log([1.0, 2.0, 4.0, 8.0])
    y = 0.5 * x + np.array([0.0, 0.1, -0.1, 0.0])
    assert bootstrap_slopes(x, y, n_bootstrap=1).shape == (1,)
    with pytest.raises(ValueError, match="n_bootstrap"):
        bootstrap_slopes(x, y, n_bootstrap=0)
