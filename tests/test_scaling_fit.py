"""β fits of log rank vs log width (docs/theory.md §C.6–C.7, §D item 15)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_limits.testing import assert_rate
from transformer_limits.verify.experiments.spectral_released import PUBLISHED_GLOBAL_BETAS
from transformer_limits.verify.scaling_fit import fit_points, fit_points_csv, read_points_csv
from transformer_limits.verify.stats.width_scaling import bootstrap_slopes
from transformer_limits.verify.stats.width_scaling import fit_width_scaling
import dataclasses
import math
from scipy import stats
from transformer_limits.verify.scaling_fit import read_points_csv

POINTS = Path(__file__).parent / "data" / "spectral_global_points_160m.csv"

# docs/theory.md §C.7, global (pooled) 160M: (optimizer, metric) -> (beta, ci_low, ci_high, R²); the
# one copy of the published numbers (tests/test_spectral_released.py checks it against docs/theory.md)
REPORTED = PUBLISHED_GLOBAL_BETAS


def mismatches(fits, reported=REPORTED):
    """The verifier: every reported (β, CI, R²) must be reproduced to 3 decimals."""
    got = {(f["optimizer"], f["metric"]): (f["beta"], f["ci_low"], f["ci_high"], f["r2"]) for f in fits}
    bad = []
    for key, want in reported.items():
        have = got.get(key)
        if have is None or any(abs(round(h, 3) - w) > 1e-9 for h, w in zip(have, want)):
            bad.append((key, have, want))
    return bad


def test_reproduces_reported_global_betas():
    fits = fit_points_csv(POINTS)
    assert len(fits) == 10
    assert all(f["n"] == 8 and f["stratum"] == "GLOBAL" for f in fits)
    assert mismatches(fits) == []
    # Δ = β_soft − β_hard column of docs/theory.md §C.7 (two decimals)
    beta = {(f["optimizer"], f["metric"]): f["beta"] for f in fits}
    for opt, delta in {"AdamW": 0.37, "Muon": 0.14, "NorMuon": 0.21, "Dion-1/2": 0.13, "Dion-1/16": 0.24}.items():
        assert round(beta[opt, "soft"] - beta[opt, "hard"], 2) == delta


def test_wrong_inputs_fail_the_reproduction_check(tmp_path):
    """Deliberately wrong models must fail: swapped width/value columns, and soft/hard labels swapped."""
    groups = read_points_csv(POINTS)
    swapped = {k: (y, x) for k, (x, y) in groups.items()}
    assert len(mismatches(fit_points(swapped))) == 10
    relabelled = {(o, s, "hard" if m == "soft" else "soft"): xy for (o, s, m), xy in groups.items()}
    assert len(mismatches(fit_points(relabelled))) == 10
    # β is invariant to the width unit (D vs ffn multiplier, docs/theory.md §C.9): not a wrong model
    mult = {k: (x / 768.0, y) for k, (x, y) in groups.items()}
    assert mismatches(fit_points(mult)) == []


def test_wrong_slope_dataset_is_rejected_and_true_slope_covered():
    rng = np.random.default_rng(7)
    widths = 768.0 * np.arange(1, 9)
    values = np.exp(2.0 + 0.5 * np.log(widths) + 0.05 * rng.standard_normal(8))
    fit = fit_width_scaling(widths, values, n_bootstrap=500, seed=3)
    assert fit.covers(0.5) and fit.covers(0.5, bootstrap=True)
    assert not fit.covers(1.0) and not fit.covers(1.0, bootstrap=True)
    assert fit.r2 > 0.95
    # the public rate assertion on the same log-log slope: "β = 0.5 within 0.1" passes with power,
    # the wrong slope β = 1 is rejected
    one_seed = values[:, None]  # (n_levels, n_seeds): a single seed, so the t-interval decides
    check = assert_rate({"D": widths}, one_seed, 0.5, check="equals", tolerance=0.1, strict=True)
    assert check.passed and check.statistics["power"] >= 0.8
    with pytest.raises(AssertionError, match="rate claim failed"):
        assert_rate({"D": widths}, one_seed, 1.0, check="equals", tolerance=0.1)


def test_interval_coverage_by_simulation():
    """400 synthetic 8-width datasets with Gaussian log-noise, true β = 0.7.  The t-interval is
    exact here (coverage 0.95); both bootstraps under-cover at n = 8 (≈ 0.89).  Fixed seeds make the
    test deterministic; under fresh seeds P(t-coverage < 0.90) ≈ 2e-6, P(boot < 0.82) < 1e-4."""
    widths = 768.0 * np.arange(1, 9)
    rng = np.random.default_rng(11)
    hits = {"t": 0, "residual": 0, "pairs": 0}
    reps = 400
    for i in range(reps):
        values = np.exp(1.0 + 0.7 * np.log(widths) + 0.2 * rng.standard_normal(8))
        res = fit_width_scaling(widths, values, n_bootstrap=400, seed=i)
        pairs = fit_width_scaling(widths, values, n_bootstrap=400, seed=i, bootstrap="pairs")
        hits["t"] += res.covers(0.7)
        hits["residual"] += res.covers(0.7, bootstrap=True)
        hits["pairs"] += pairs.covers(0.7, bootstrap=True)
    rate = {k: v / reps for k, v in hits.items()}
    assert 0.90 <= rate["t"] <= 0.99, rate
    assert rate["residual"] >= 0.82 and rate["pairs"] >= 0.82, rate


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.floats(-2, 2), st.floats(-5, 5), st.integers(3, 12))
def test_exact_power_law_is_recovered(beta, c, n):
    widths = np.geomspace(100, 10000, n)
    fit = fit_width_scaling(widths, np.exp(c + beta * np.log(widths)), n_bootstrap=50)
    assert fit.beta == pytest.approx(beta, abs=1e-9)
    assert fit.intercept == pytest.approx(c, abs=1e-8)
    assert fit.ci_high - fit.ci_low < 1e-6
    assert fit.boot_ci_low == pytest.approx(beta, abs=1e-6)
    # exact data: the public rate assertion proves β to 1e-6 (zero-width interval) and rejects β + 0.01
    values = np.exp(c + beta * np.log(widths))[:, None]
    assert assert_rate({"D": widths}, values, beta, check="equals", tolerance=1e-6, n_boot=50, strict=True).passed
    with pytest.raises(AssertionError, match="rate claim failed"):
        assert_rate({"D": widths}, values, beta + 0.01, check="equals", tolerance=1e-6, n_boot=50)


def test_bootstrap_is_seeded_and_handles_degenerate_pairs():
    lx = np.log(np.array([1.0, 2.0, 3.0]))
    ly = np.array([0.1, 0.5, 0.4])
    a = bootstrap_slopes(lx, ly, n_bootstrap=300, seed=5, method="pairs")
    b = bootstrap_slopes(lx, ly, n_bootstrap=300, seed=5, method="pairs")
    np.testing.assert_array_equal(a, b)
    assert 0 < a.size < 300 and np.all(np.isfinite(a))  # resamples with one distinct width dropped
    assert not np.array_equal(bootstrap_slopes(lx, ly, n_bootstrap=300, seed=6, method="residual"),
                              bootstrap_slopes(lx, ly, n_bootstrap=300, seed=5, method="residual"))
    with pytest.raises(ValueError, match="method"):
        bootstrap_slopes(lx, ly, n_bootstrap=10, method="wild")
    with pytest.raises(ValueError, match="n_bootstrap"):
        bootstrap_slopes(lx, ly, n_bootstrap=0)
    fit = fit_width_scaling([1.0, 2.0, 3.0], np.exp(ly))
    with pytest.raises(ValueError, match="bootstrap"):
        fit.covers(0.3, bootstrap=True)


def test_fit_argument_errors():
    with pytest.raises(ValueError, match="at least 3 points"):
        fit_width_scaling([1.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="values"):
        fit_width_scaling([1.0, 2.0, 3.0], [1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="distinct"):
        fit_width_scaling([2.0, 2.0, 2.0], [1.0, 3.0, 2.0])
    with pytest.raises(ValueError, match="confidence"):
        fit_width_scaling([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], confidence=1.5)


def _write(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


GOOD = [("A", "GLOBAL", "soft", 768, 10.0), ("A", "GLOBAL", "soft", 1536, 20.0), ("A", "GLOBAL", "soft", 2304, 25.0)]
HEADER = ["optimizer", "stratum", "metric", "width", "value"]


@pytest.mark.parametrize("header, rows, pattern", [
    (HEADER[:4], [r[:4] for r in GOOD], r"missing column\(s\) value"),
    (["optimizer", "metric", "width", "value"], [(r[0], *r[2:]) for r in GOOD], "missing column.*stratum"),
    (HEADER, GOOD[:2] + [("A", "GLOBAL", "soft", 2304, -1.0)], r"row 4: column 'value'.*finite and positive"),
    (HEADER, GOOD[:2] + [("A", "GLOBAL", "soft", 0, 1.0)], r"row 4: column 'width'"),
    (HEADER, GOOD[:2] + [("A", "GLOBAL", "soft", 2304, "nan")], r"row 4: column 'value'"),
    (HEADER, GOOD[:2] + [("A", "GLOBAL", "soft", 2304, "inf")], r"row 4: column 'value'"),
    (HEADER, GOOD[:2] + [("A", "GLOBAL", "soft", 2304, "abc")], r"row 4: column 'value': 'abc' is not a number"),
    (HEADER, GOOD[:2] + [("", "GLOBAL", "soft", 2304, 3.0)], r"row 4: column 'optimizer' is empty"),
    (HEADER, [], "no data rows"),
    (HEADER, GOOD[:2], r"A/GLOBAL/soft: need at least 3 points"),
])
def test_csv_validation_names_file_row_and_column(tmp_path, header, rows, pattern):
    path = _write(tmp_path / "points.csv", header, rows)
    with pytest.raises(ValueError, match=pattern) as info:
        fit_points_csv(path)
    assert "\n" not in str(info.value)


def test_csv_missing_file_and_empty_file(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_points_csv(tmp_path / "nope.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="missing column"):
        read_points_csv(tmp_path / "empty.csv")


def test_bootstrap_size_is_limited_up_front():
    """Issue 11: a huge n_bootstrap is a ValueError naming it (stated limit and memory estimate from
    transformer_limits.resource_limits), raised before any allocation."""
    with pytest.raises(ValueError, match=r"n_bootstrap must be <= 1000000"):
        fit_width_scaling([1.0, 2.0, 3.0], [1.0, 2.0, 3.5], n_bootstrap=10**12)
    with pytest.raises(ValueError, match=r"n_bootstrap must be <= 1000000"):
        bootstrap_slopes(np.log([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0]), n_bootstrap=10**12)
    with pytest.raises(ValueError, match=r"n_bootstrap=1000000 on 40000 points would need about"):
        fit_width_scaling(np.arange(1.0, 40_001.0), np.arange(1.0, 40_001.0) ** 0.5, n_bootstrap=10**6)

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_scaling_fit.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


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


def _write_points(path, rows):
    return _write(path, ["optimizer", "stratum", "metric", "width", "value"], rows)


def test_csv_accepts_values_below_one_and_rejects_an_empty_metric(tmp_path):
    # a width/value must be finite and positive, nothing more: 0.5 is a valid value
    rows = [["AdamW", "GLOBAL", "soft", 64, 0.5], ["AdamW", "GLOBAL", "soft", 128, 0.75],
            ["AdamW", "GLOBAL", "soft", 256, 1.0]]
    groups = read_points_csv(_write_points(tmp_path / "ok.csv", rows))
    np.testing.assert_array_equal(groups["AdamW", "GLOBAL", "soft"][1], [0.5, 0.75, 1.0])
    rows[1][2] = ""
    with pytest.raises(ValueError, match="row 3: column 'metric' is empty"):
        read_points_csv(_write_points(tmp_path / "bad.csv", rows))


def test_one_bootstrap_replicate_is_a_valid_request():
    """n_bootstrap is "a positive integer": 1 gives one replicate slope, 0 is refused."""
    x = np.log([1.0, 2.0, 4.0, 8.0])
    y = 0.5 * x + np.array([0.0, 0.1, -0.1, 0.0])
    assert bootstrap_slopes(x, y, n_bootstrap=1).shape == (1,)
    with pytest.raises(ValueError, match="n_bootstrap"):
        bootstrap_slopes(x, y, n_bootstrap=0)
