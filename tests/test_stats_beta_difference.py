"""The Δβ test of paper C's exponent orderings (docs/theory.md §C.7):
:func:`transformer_limits.verify.stats.beta_difference.beta_difference_check`.

For pairs ``(S, A, B)`` claiming ``β_A(S) > β_B(S)``, each pair at level ``α' = α/m`` (Bonferroni
over ``m`` pairs) gets the conservative upper bound

    U = max( q_{1−α'}(β*_A,b − β*_B,b),  Δ̂_ols + t_{1−α', ν} sqrt(SE_A² + SE_B²) ),
    ν = (SE_A² + SE_B²)² / (SE_A⁴/(n_A − 2) + SE_B⁴/(n_B − 2))        (Welch–Satterthwaite),

and the check fails when some ``U < 0``.  The expected numbers below are written from these
formulas with SciPy's t quantile, not from the module.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.beta_difference import beta_difference_check


def _fit(beta: float, bootstrap, ols_beta: float, stderr: float, n: int) -> SimpleNamespace:
    """An exponent fit as the check reads it: point β, seed-bootstrap replicates, OLS slope."""
    return SimpleNamespace(beta=beta, seed_fit=SimpleNamespace(exponent=SimpleNamespace(bootstrap=np.asarray(bootstrap))),
                           ols=SimpleNamespace(beta=ols_beta, stderr=stderr, n=n))


def _expected(a: SimpleNamespace, b: SimpleNamespace, level: float) -> dict[str, float]:
    """The bounds of one pair, transcribed from the formulas in the module docstring."""
    boot = a.seed_fit.exponent.bootstrap - b.seed_fit.exponent.bootstrap
    se2 = a.ols.stderr**2 + b.ols.stderr**2
    nu = se2**2 / (a.ols.stderr**4 / (a.ols.n - 2) + b.ols.stderr**4 / (b.ols.n - 2))
    t = stats.t.ppf(1.0 - level, nu)
    d_ols = a.ols.beta - b.ols.beta
    return {"upper": max(np.quantile(boot, 1.0 - level), d_ols + t * math.sqrt(se2)),
            "lower": min(np.quantile(boot, level), d_ols - t * math.sqrt(se2)),
            "dof": nu, "t_upper": d_ols + t * math.sqrt(se2)}


def test_bounds_are_the_welch_bonferroni_formula():
    rng = np.random.default_rng(7)
    mid = (_fit(0.80, 0.80 + 0.05 * rng.standard_normal(400), 0.78, 0.06, 12),
           _fit(0.30, 0.30 + 0.08 * rng.standard_normal(400), 0.33, 0.09, 12))
    tail = (_fit(0.52, 0.52 + 0.10 * rng.standard_normal(400), 0.53, 0.08, 9),
            _fit(0.50, 0.50 + 0.05 * rng.standard_normal(400), 0.49, 0.05, 15))
    alpha = 0.05
    check = beta_difference_check("d", "β_A > β_B", [("MID", *mid), ("TAIL", *tail)], alpha)
    level = alpha / 2  # Bonferroni over the two strata
    assert check.statistics["per_pair_level"] == level
    rows = {r["stratum"]: r for r in check.statistics["pairs"]}
    for stratum, (a, b) in (("MID", mid), ("TAIL", tail)):
        want = _expected(a, b, level)
        for key, value in want.items():
            assert rows[stratum][key] == pytest.approx(value, rel=1e-12, abs=1e-14), (stratum, key)
        assert rows[stratum]["delta"] == pytest.approx(a.beta - b.beta, abs=1e-15)
    # TAIL's small Δβ has the smallest upper bound: it sets measured and ci
    worst = min(rows.values(), key=lambda r: r["upper"])
    assert worst["stratum"] == "TAIL"
    assert check.ci == (worst["lower"], worst["upper"]) and check.measured == worst["delta"]
    assert check.passed and check.false_failure_rate == alpha
    assert rows["MID"]["supported"] and not rows["TAIL"]["supported"] and not check.statistics["supported"]


def test_one_pair_is_tested_at_the_full_level():
    rng = np.random.default_rng(3)
    a = _fit(0.6, 0.6 + 0.1 * rng.standard_normal(300), 0.6, 0.1, 10)
    b = _fit(0.4, 0.4 + 0.1 * rng.standard_normal(300), 0.4, 0.1, 10)
    one = beta_difference_check("d", "c", [("GLOBAL", a, b)], 0.05)
    two = beta_difference_check("d", "c", [("GLOBAL", a, b), ("MID", a, b)], 0.05)
    assert one.statistics["per_pair_level"] == 0.05
    # equal SEs and dof: ν = 2(n − 2) exactly
    assert one.statistics["pairs"][0]["dof"] == pytest.approx(16.0, rel=1e-12)
    # a smaller per-pair level widens the bound
    assert two.statistics["pairs"][0]["upper"] > one.statistics["pairs"][0]["upper"]
    assert one.statistics["pairs"][0]["upper"] == pytest.approx(_expected(a, b, 0.05)["upper"], rel=1e-12)


def _synthetic(beta: float, seed: int, noise: float = 0.05):
    """A real exponent fit of R = 3 D^β e^{noise Z} at 4 widths × 3 seeds (the experiment's fit)."""
    from transformer_limits.verify.experiments.spectral_scaling import fit_betas

    rng = np.random.default_rng(seed)
    widths = np.array([64.0, 128.0, 256.0, 512.0])
    R = 3.0 * widths[:, None] ** beta * np.exp(noise * rng.standard_normal((4, 3)))
    return fit_betas(widths, R, seed=seed, n_boot=500)


def test_a_wrong_ordering_fails_and_the_right_one_passes():
    # Δβ = 0.6 with log-noise 0.05 is many standard errors: the right ordering is supported and the
    # reversed claim (β_small > β_large) is contradicted, pair by pair and as a whole
    large, small = _synthetic(0.9, seed=1), _synthetic(0.3, seed=2)
    right = beta_difference_check("order", "β_large > β_small", [("GLOBAL", large, small)])
    wrong = beta_difference_check("order", "β_small > β_large", [("GLOBAL", small, large)])
    assert right.passed and right.statistics["supported"] and right.ci[0] > 0
    assert right.note.startswith("supported")
    assert not wrong.passed and wrong.ci[1] < 0 and "contradicted" in wrong.note
    # one wrong pair among right ones fails the whole check
    mixed = beta_difference_check("order", "both", [("MID", large, small), ("TAIL", small, large)])
    assert not mixed.passed and mixed.statistics["pairs"][1]["upper"] < 0


def test_bad_arguments_are_value_errors():
    a = _fit(0.5, np.zeros(10), 0.5, 0.1, 6)
    with pytest.raises(ValueError, match="pairs"):
        beta_difference_check("d", "c", [])
    with pytest.raises(ValueError, match="alpha"):
        beta_difference_check("d", "c", [("S", a, a)], alpha=1.5)
    for edge in (0.0, 1.0):
        with pytest.raises(ValueError, match="alpha"):
            beta_difference_check("d", "c", [("S", a, a)], alpha=edge)
    # equal fits: Δβ = 0 exactly, neither contradicted nor established (the note says so)
    tie = beta_difference_check("d", "c", [("S", a, a)])
    assert tie.passed and not tie.statistics["supported"] and tie.note.startswith("not contradicted")


# ------------------------------------------------------------------------------------------------
# bootstrap_difference_bounds: the percentile bounds of a − b from two independent bootstraps
# ------------------------------------------------------------------------------------------------


def test_bootstrap_difference_bounds_are_the_quantiles_of_paired_replicates():
    from transformer_limits.verify.stats.beta_difference import bootstrap_difference_bounds

    rng = np.random.default_rng(21)
    a, b = 0.4 + 0.1 * rng.standard_normal(500), -0.3 + 0.2 * rng.standard_normal(300)
    out = bootstrap_difference_bounds(a, b, 0.05)
    diff = a[:300] - b[:300]  # the b-th replicate of each, as far as the shorter bootstrap goes
    assert out["n"] == 300 and np.array_equal(out["differences"], diff)
    assert out["lower"] == np.quantile(diff, 0.05) and out["upper"] == np.quantile(diff, 0.95)
    assert out["lower"] < out["upper"]


def test_bootstrap_difference_bounds_a_planted_reversal_is_below_zero():
    """b exceeds a by many bootstrap sds: the upper bound of a − b is below 0 (the claim a > b is
    contradicted) and the lower bound of b − a is above 0."""
    from transformer_limits.verify.stats.beta_difference import bootstrap_difference_bounds

    rng = np.random.default_rng(2)
    a, b = -2.0 + 0.05 * rng.standard_normal(400), -0.5 + 0.05 * rng.standard_normal(400)
    assert bootstrap_difference_bounds(a, b, 0.01)["upper"] < 0 < bootstrap_difference_bounds(b, a, 0.01)["lower"]


def test_bootstrap_difference_lower_bound_covers_with_probability_one_minus_level():
    """Parametric bootstrap of two Gaussian estimates (replicates θ̂ + σ Z): the lower (1 − α) bound of
    a − b covers the true difference in ≈ 1 − α of 2000 datasets (binomial sd 0.005 at α = 0.1)."""
    from transformer_limits.verify.stats.beta_difference import bootstrap_difference_bounds

    rng = np.random.default_rng(8)
    level, sa, sb, true = 0.1, 0.2, 0.3, 0.5
    hits = []
    for _ in range(2000):
        a_hat, b_hat = true + sa * rng.standard_normal(), sb * rng.standard_normal()
        low = bootstrap_difference_bounds(a_hat + sa * rng.standard_normal(400), b_hat + sb * rng.standard_normal(400),
                                          level)["lower"]
        hits.append(low <= true)
    assert abs(np.mean(hits) - (1 - level)) < 4 * math.sqrt(level * (1 - level) / 2000) + 0.01


def test_bootstrap_difference_bounds_refuse_bad_input():
    from transformer_limits.verify.stats.beta_difference import bootstrap_difference_bounds

    with pytest.raises(ValueError, match="boot_a, boot_b"):
        bootstrap_difference_bounds(np.array([]), np.ones(3), 0.05)
    with pytest.raises(ValueError, match="level"):
        bootstrap_difference_bounds(np.ones(3), np.ones(3), 0.0)


# ------------------------------------------------------------------------------------------------
# welch_ordering_check: the ordering test from OLS fits alone (spectral-released)
# ------------------------------------------------------------------------------------------------


def test_welch_ordering_check_is_the_welch_bound_at_alpha_over_m():
    from transformer_limits.verify.stats.beta_difference import welch_ordering_check

    a, b, c = (SimpleNamespace(beta=x, stderr=s, n=8) for x, s in ((0.8, 0.3), (0.3, 0.2), (0.5, 0.04)))
    check = welch_ordering_check("o", "claim", [("A", "B", a, b), ("C", "B", c, b)], 0.05)
    level = 0.05 / 2
    for row, (x, y) in zip(check.statistics["pairs"], ((a, b), (c, b))):
        se2 = x.stderr**2 + y.stderr**2
        nu = se2**2 / (x.stderr**4 / 6 + y.stderr**4 / 6)
        t = stats.t.ppf(1 - level, nu)
        assert row["upper"] == pytest.approx(x.beta - y.beta + t * math.sqrt(se2), rel=1e-12)
        assert row["lower_bound"] == pytest.approx(x.beta - y.beta - t * math.sqrt(se2), rel=1e-12)
    assert check.passed and check.statistics["per_pair_level"] == level and check.ci[0] == -math.inf
    # a planted reversal (β(B) far above β(C) with small SEs) is contradicted
    bad = welch_ordering_check("o", "claim", [("C", "B", c, SimpleNamespace(beta=1.5, stderr=0.04, n=8))], 0.05)
    assert not bad.passed and bad.note.startswith("contradicted") and bad.ci[1] < 0
