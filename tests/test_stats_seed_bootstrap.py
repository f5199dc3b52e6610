"""verify/stats/seed_bootstrap.py and fit_quality.py: level aggregates, the seed bootstrap and the F
lack-of-fit test, from their definitions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.fit_quality import fit_quality
from transformer_limits.verify.stats.seed_bootstrap import aggregate_seeds, ols_line, seed_replicates, sorted_levels

E = np.array([[1.0, 2.0, 4.0], [0.5, 0.5, 2.0]])


def test_aggregates_are_their_definitions():
    assert aggregate_seeds(E, "mean") == pytest.approx([7 / 3, 1.0])
    assert aggregate_seeds(E, "rms") == pytest.approx(np.sqrt([(1 + 4 + 16) / 3, (0.25 + 0.25 + 4) / 3]))
    assert aggregate_seeds(E, "geometric") == pytest.approx([2.0, (0.5 * 0.5 * 2.0) ** (1 / 3)])
    assert aggregate_seeds(E, "median") == pytest.approx([2.0, 0.5])


def test_levels_are_sorted_by_parameter():
    name, p, e = sorted_levels({"L": [8.0, 2.0]}, E)
    assert name == "L" and list(p) == [2.0, 8.0] and np.array_equal(e, E[::-1])
    with pytest.raises(ValueError, match="distinct"):
        sorted_levels([2.0, 2.0], E)


def test_paired_resampling_keeps_levels_coupled():
    """With the same seed indices at every level, identical rows stay identical in every resample."""
    e = np.array([[1.0, 2.0, 3.0, 5.0]] * 3)
    reps = seed_replicates(e, 200, 0, "paired", "mean")
    assert np.all(reps.bootstrap == reps.bootstrap[:, :1])
    reps = seed_replicates(e, 200, 0, "independent", "mean")
    assert not np.all(reps.bootstrap == reps.bootstrap[:, :1])


def test_bootstrap_spread_is_expanded_to_the_unbiased_variance():
    """The resampled mean of n seeds has variance (n − 1)/n · s²/n; the expansion by sqrt(n/(n − 1))
    restores s²/n (checked on log ē to first order: small noise)."""
    n = 5
    e = np.exp(0.01 * np.random.default_rng(1).standard_normal((1, n)))
    reps = seed_replicates(e, 20000, 2, "independent", "mean")
    var_unbiased = np.var(e[0] / e[0].mean(), ddof=1) / n
    assert np.var(reps.bootstrap[:, 0]) == pytest.approx(var_unbiased, rel=0.05)


def test_ols_line_rows():
    x = np.array([0.0, 1.0, 2.0])
    slope, intercept = ols_line(x, np.array([[1.0, 3.0, 5.0], [2.0, 2.0, 2.0]]))
    assert slope == pytest.approx([2.0, 0.0]) and intercept == pytest.approx([1.0, 2.0])


def test_f_statistic_transcription():
    log_obs = np.log(np.array([1.0, 0.5, 0.26, 0.12]))
    pred = np.array([1.0, 0.5, 0.25, 0.125])
    log_boot = np.random.default_rng(3).normal(log_obs, 0.05, size=(500, 4))
    q = fit_quality(log_obs, pred, log_boot, 2, 6)
    noise = np.mean(np.var(log_boot, axis=0, ddof=1))
    f = np.sum((log_obs - np.log(pred)) ** 2) / 2 / noise
    assert q.f_statistic == pytest.approx(f) and (q.dof, q.dof_noise) == (2, 20)
    assert q.p_value == pytest.approx(stats.f.sf(f, 2, 20))
    assert q.relative_residuals == pytest.approx(np.exp(log_obs) / pred - 1)


def test_ols_line_with_one_x_row_per_y_row_is_each_rows_least_squares_fit():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
    slope, intercept = ols_line(x, y)
    for k in range(5):
        b, a = np.polyfit(x[k], y[k], 1)
        assert slope[k] == pytest.approx(b, rel=1e-12) and intercept[k] == pytest.approx(a, rel=1e-12, abs=1e-14)
    shared, _ = ols_line(x[0], y)  # a shared x gives the same slopes as repeating it per row
    np.testing.assert_allclose(shared, ols_line(np.broadcast_to(x[0], y.shape), y)[0], rtol=1e-13)
