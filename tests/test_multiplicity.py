"""Multiplicity corrections of the check families are pinned, not only "some correction exists".

A check that decides a *family* of k claims at family-wise false-failure rate α tests each member at
α/k (Bonferroni).  Every test below puts one member exactly between the per-member threshold (level
α/k) and the uncorrected one (level α), where the corrected and the uncorrected decisions disagree,
so dropping the correction (or dividing by the wrong k, or correcting twice) flips the verdict.
The thresholds are written here from the definitions with SciPy, not taken from the modules:

* ``propagation-of-chaos`` (``exponent_N``): ``rate_at_least(N^-1/2)`` per dimension d at α/n_d;
  the family passes when for every d the lower (1 − α/n_d) bound of the slope is ≤ −1/2;
* ``lyapunov`` (``lyapunov_agrees``): two-sided z-tests per setting, reject when some
  |z_s| > Φ⁻¹(1 − α/(2n));
* ``spectral-released`` orderings: per pair (a, b) the upper bound
  U = Δ̂ + t_{1−α/m, ν} √(SE_a² + SE_b²), ν Welch–Satterthwaite on n − 2 dof each; fail when some U < 0;
* ``beta_difference_check`` (``spectral-scaling``): U = max(bootstrap (1 − α/m)-quantile of Δ*,
  Welch-t bound at 1 − α/m); fail when some U < 0;
* ``rate check`` (``exponent_<p>``): ``rate_at_least`` per line in p at α/(number of lines).

Besides "uncorrected vs corrected", each family is also probed in the tight gaps between the levels
for k − 1, k and k + 1 members (:func:`_member_levels`), so a wrong divisor shows too.

Two simulations measure the family false-failure rate under the null with a fixed seed; each states
its own false-failure rate.  Everything here is deterministic (fixed seeds).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.experiment import ExperimentConfig

ALPHA_CHAOS = 0.01


def _member_levels(alpha: float, k: int) -> list[tuple[tuple[float, float], bool]]:
    """Pairs of one-sided confidence levels (c_low, c_high) around the member level 1 − α/k of a family
    of k, with whether the family must pass when the member's bound lies between the bounds at the two
    levels: between 1 − α/(k−1) and 1 − α/k it must pass (k > 1: an uncorrected test, or one dividing
    by fewer members, fails it), between 1 − α/k and 1 − α/(k+1) it must fail (a test dividing by more
    members, or correcting twice, passes it).  The gaps are tight so that any other divisor shows."""
    cases = [((1 - alpha / k, 1 - alpha / (k + 1)), False)]
    if k > 1:
        cases.append(((1 - alpha / (k - 1), 1 - alpha / k), True))
    return cases


# ================================================================================================
# propagation-of-chaos: rate_at_least per dimension, Bonferroni over the dimensions
# ================================================================================================


def _chaos_errors(N: np.ndarray, seeds: int, slope: float, seed: int) -> np.ndarray:
    """E-samples (n_N, seeds) of a power law N^slope with lognormal seed noise (σ = 0.3)."""
    rng = np.random.default_rng(seed)
    return 0.2 * N[:, None] ** slope * np.exp(0.3 * rng.standard_normal((N.size, seeds)))


def _lower(fit, level: float) -> float:
    """The lower one-sided bound of the fitted slope at confidence ``level`` (the fit's default method)."""
    return fit.exponent.interval(level, "lower")[0]


def _run_chaos(monkeypatch, errors_by_d: dict[int, np.ndarray]):
    """``propagation_of_chaos.run`` on given errors (no simulation); returns (result, fits by d)."""
    from transformer_limits.verify.experiments import propagation_of_chaos as chaos

    fits: list = []
    real_fit = chaos.fit_power_law

    def spy(*args, **kwargs):
        fit = real_fit(*args, **kwargs)
        fits.append(fit)
        return fit

    monkeypatch.setattr(chaos, "chaos_errors_sweep", lambda config, s, **kw: ({d: errors_by_d[d] for d in s["dims"]}, {}))
    monkeypatch.setattr(chaos, "fit_power_law", spy)
    result = chaos.run(ExperimentConfig(profile="quick"))
    dims = chaos.SETTINGS["quick"]["dims"]
    assert len(fits) == len(dims)
    return result, dict(zip(dims, fits))


@pytest.mark.parametrize("dims", [(3,), (2, 3), (2, 3, 5)])
def test_chaos_exponent_N_tests_each_dimension_at_alpha_over_n_d(monkeypatch, dims):
    """The last dimension's lower slope bound is placed in the gaps of :func:`_member_levels` around
    its member level 1 − α/k (k = number of dimensions): the family passes or fails as Bonferroni says.
    The other dimensions decay like N^-1, far below the claim N^-1/2."""
    from transformer_limits.verify.experiments import propagation_of_chaos as chaos

    monkeypatch.setitem(chaos.SETTINGS, "quick", dict(chaos.SETTINGS["quick"], dims=dims))
    s = chaos.SETTINGS["quick"]
    N, k, last = np.array(s["N_levels"], dtype=float), len(dims), dims[-1]
    base = {d: _chaos_errors(N, s["seeds"], -1.0 if d != last else -0.5, seed=10 + d) for d in dims}
    # pass 1: the fit the experiment makes of the last dimension's base data
    _, fits = _run_chaos(monkeypatch, base)
    for (c_low, c_high), passes in _member_levels(ALPHA_CHAOS, k):
        # a lower bound falls as the confidence rises: bound(c_high) < bound(c_low)
        lo, hi = _lower(fits[last], c_high), _lower(fits[last], c_low)
        assert lo < hi
        # multiplying every seed's error by N^c shifts the slope, its bootstrap and t bounds by c exactly
        errors = dict(base)
        errors[last] = base[last] * N[:, None] ** (-0.5 - (lo + hi) / 2)
        result, shifted = _run_chaos(monkeypatch, errors)
        # the premise, checked on the fit the experiment made: the claim -1/2 sits in the gap
        assert _lower(shifted[last], c_high) < -0.5 < _lower(shifted[last], c_low)
        for d in dims[:-1]:  # the others are far below the claim at any level
            assert _lower(shifted[d], 1 - ALPHA_CHAOS / 100) < -0.7
        (check,) = result.checks
        assert check.name == chaos.EXPONENT_N.name
        assert check.statistics["alpha"] == ALPHA_CHAOS
        assert check.passed is passes, (k, c_low, c_high, check.note)


# ================================================================================================
# rate check: exponent_<p> is rate_at_least per line in p, Bonferroni over the lines
# ================================================================================================


def test_rate_check_exponent_tests_each_line_at_alpha_over_the_lines():
    """Claim ``L^-1 H^-1`` on a complete (L, H) grid with H ∈ {1, 2}: two lines in L.  The line at
    H = 1 decays like L^-1.5 (far below the claim); the line at H = 2 is tilted so that the claimed
    exponent −1 sits in the gaps of :func:`_member_levels` around its member level 1 − α/2.  The line
    fit is the documented one: ``fit_power_law`` of the line over all its levels (window "all") with
    the check's seed and default bootstrap."""
    from transformer_limits.verify.rate.check import rate_check
    from transformer_limits.verify.stats.power_law import fit_power_law

    alpha, k = ALPHA_CHAOS, 2
    L = np.array([4.0, 8.0, 16.0, 32.0, 64.0])
    rng = np.random.default_rng(31)
    lines = {1.0: 3.0 * L[:, None] ** -1.5 * np.exp(0.05 * rng.standard_normal((L.size, 8))),
             2.0: 1.5 * L[:, None] ** -1.0 * np.exp(0.3 * rng.standard_normal((L.size, 8)))}

    def lower(errors, level):
        return fit_power_law({"L": L}, errors, window="all", seed=0).exponent.interval(level, "lower")[0]

    assert lower(lines[1.0], 1 - alpha / 100) < -1.3
    for (c_low, c_high), passes in _member_levels(alpha, k):
        lo, hi = lower(lines[2.0], c_high), lower(lines[2.0], c_low)
        tilted = dict(lines)
        tilted[2.0] = lines[2.0] * L[:, None] ** (-1.0 - (lo + hi) / 2)
        assert lower(tilted[2.0], c_high) < -1.0 < lower(tilted[2.0], c_low)
        cols = {"L": [], "H": [], "seed": [], "error": []}
        for H, err in tilted.items():
            for i, Lv in enumerate(L):
                for j in range(err.shape[1]):
                    cols["L"].append(Lv)
                    cols["H"].append(H)
                    cols["seed"].append(j)
                    cols["error"].append(err[i, j])
        result = rate_check({c: np.array(v) for c, v in cols.items()}, "L^-1 H^-1", seed_column="seed", alpha=alpha)
        check = next(c for c in result.checks if c.name == "exponent_L")
        assert check.statistics["alpha"] == alpha
        assert check.passed is passes, (c_low, c_high, check.note)


# ================================================================================================
# lyapunov: two-sided z-tests, Bonferroni over the settings
# ================================================================================================


def _z_family(z: np.ndarray, alpha: float = 0.01, labels=None):
    from transformer_limits.verify.experiments import lyapunov as ly

    pred = -0.1 * np.arange(1, z.size + 1)
    se = np.full(z.size, 0.02)
    return ly.lyapunov_z_test(pred + z * se, se, pred, alpha=alpha, labels=labels)


@pytest.mark.parametrize("n", [1, 2, 6, 24])
def test_lyapunov_z_family_rejects_exactly_beyond_the_bonferroni_quantile(n):
    """One setting at |z| just inside z* = Φ⁻¹(1 − α/(2n)) passes, just outside fails; a setting
    between the uncorrected Φ⁻¹(1 − α/2) and z* passes (n > 1), and one between z* and the
    over-corrected Φ⁻¹(1 − α/(4n)) fails."""
    alpha = 0.01
    z_star = stats.norm.isf(alpha / (2 * n))
    z_uncorrected, z_over = stats.norm.isf(alpha / 2), stats.norm.isf(alpha / (4 * n))
    z_fewer, z_more = stats.norm.isf(alpha / (2 * max(n - 1, 1))), stats.norm.isf(alpha / (2 * (n + 1)))
    cases = [(z_star * (1 - 1e-9), True), (z_star * (1 + 1e-9), False), ((z_star + z_over) / 2, False),
             ((z_star + z_more) / 2, False)]
    if n > 1:  # between the uncorrected (or n − 1 settings') quantile and z*: must pass
        cases += [((z_uncorrected + z_star) / 2, True), ((z_fewer + z_star) / 2, True)]
    for z_edge, passes in cases:
        for sign in (+1, -1):
            z = np.zeros(n)
            z[-1] = sign * z_edge
            check, z_out = _z_family(z, alpha)
            assert check.passed is passes, (n, z_edge, sign, check.statistics["z_critical"])
            np.testing.assert_allclose(z_out, z, rtol=1e-9, atol=1e-12)
    check, _ = _z_family(np.zeros(n), alpha)
    assert check.statistics["z_critical"] == pytest.approx(z_star, rel=1e-12)
    assert check.ci == pytest.approx((-z_star, z_star), rel=1e-12)


def test_lyapunov_z_family_false_failure_rate_under_the_null():
    """6 settings, z_s i.i.d. N(0, 1) (the null: the formula is right, SEs exact), 4000 families
    from seed 20260523 (measured: 0.01025).  Bonferroni's family rate is 1 − (1 − α/6)^6 = 0.00996
    at α = 0.01; the uncorrected test would reject 1 − 0.99^6 = 5.85 % of families.  The band
    [0.0045, 0.0155] is ±3.5 binomial standard errors (0.00157) around 0.00996: a correct test leaves
    it with probability < 5e-4 (here: never, the seed is fixed)."""
    rng = np.random.default_rng(20260523)
    reps, n = 4000, 6
    Z = rng.standard_normal((reps, n))
    fails = sum(not _z_family(z)[0].passed for z in Z)
    rate = fails / reps
    assert 0.0045 <= rate <= 0.0155, rate


def test_lyapunov_experiment_decides_its_settings_as_one_bonferroni_family(monkeypatch):
    """End to end through ``lyapunov.run`` with the sweep replaced by chosen estimates: with the
    quick profile's settings (n of them), one setting at |z| between Φ⁻¹(1 − α/2) and
    Φ⁻¹(1 − α/(2n)) passes the run, one at |z| between Φ⁻¹(1 − α/(2n)) and Φ⁻¹(1 − α/(4n)) fails it.
    The Richardson combination λ_R = 2 λ̂(Δt/2) − λ̂(Δt), SE_R = √(4 SE_f² + SE_c²) is used to place z."""
    from transformer_limits.verify.experiments import lyapunov as ly

    profile = ly.Profile(settings=(("relu", 3, 0.0), ("relu", 5, 0.1), ("relu", 8, 0.1)), chains=2, steps=1)
    monkeypatch.setitem(ly.PROFILES, "quick", profile)
    n, alpha = len(profile.settings), ly.LYAPUNOV_AGREES.alpha
    theory = {s: ly.predicted_lambda_1(*s)["lambda_1"] for s in profile.settings}
    z_unc, z_star, z_over = (stats.norm.isf(alpha / (2 * m)) for m in (1, n, 2 * n))

    def fake_sweep(z_last):
        def run_points(config, fn, grid, **kw):
            rows = []
            for sg in grid["grid"]["setting"]:
                s = (sg["activation"], sg["d"], sg["sigma"])
                z = z_last if s == profile.settings[-1] else 0.0
                se_c, se_f = 0.03, 0.02  # SE_R = √(4·0.02² + 0.03²) = 0.05
                lam = theory[s] + z * math.sqrt(4 * se_f**2 + se_c**2)  # coarse = fine = lam → λ_R = lam
                for refinement, se in ((1, se_c), (2, se_f)):
                    rows.append({"setting": sg, "refinement": refinement, "seed": 0, "estimate": lam,
                                 "standard_error": se, "dt": 0.01 / refinement})
            return SimpleNamespace(table=rows)
        return run_points

    for z_last, passes in (((z_unc + z_star) / 2, True), ((z_star + z_over) / 2, False)):
        monkeypatch.setattr(ly, "run_points", fake_sweep(z_last))
        result = ly.run(ExperimentConfig(profile="quick"))
        (check,) = result.checks
        assert check.statistics["n_settings"] == n
        assert check.measured == pytest.approx(z_last, rel=1e-9)
        assert check.passed is passes, (z_last, check.statistics["z_critical"])


# ================================================================================================
# spectral-released: one-sided Welch tests of Δβ_hard, Bonferroni over the pairs of each check
# ================================================================================================

WIDTHS = 768.0 * np.arange(1, 9)


def _exact_points(beta: float, se: float, widths: np.ndarray = WIDTHS) -> np.ndarray:
    """Ranks whose OLS fit of log R on log D has slope ``beta`` and standard error ``se`` exactly
    (see :func:`_exact_fit`)."""
    x = np.log(widths)
    xc = x - x.mean()
    e = np.cos(np.arange(x.size) * 2.1)  # any vector, then made orthogonal to 1 and x
    e = e - e.mean()
    e = e - (e @ xc) / (xc @ xc) * xc
    e *= se * math.sqrt((x.size - 2) * (xc @ xc) / (e @ e))
    return np.exp(1.0 + beta * x + e)


def _exact_fit(beta: float, se: float, widths: np.ndarray = WIDTHS):
    """A real :func:`fit_width_scaling` fit whose OLS slope is ``beta`` and standard error ``se``
    exactly: log R = 1 + β log D + e with e ⟂ (1, log D) scaled so that
    SE² = Σe² / ((n − 2) Σ(log D − mean)²)."""
    from transformer_limits.verify.stats.width_scaling import fit_width_scaling

    fit = fit_width_scaling(widths, _exact_points(beta, se, widths))
    assert fit.beta == pytest.approx(beta, abs=1e-12) and fit.stderr == pytest.approx(se, rel=1e-9)
    return fit


def _welch_upper(fa, fb, level: float) -> float:
    """U = Δ̂ + t_{level, ν} SE with ν = SE⁴ / (SE_a⁴/(n_a − 2) + SE_b⁴/(n_b − 2))."""
    se2 = fa.stderr**2 + fb.stderr**2
    nu = se2**2 / (fa.stderr**4 / (fa.n - 2) + fb.stderr**4 / (fb.n - 2))
    return fa.beta - fb.beta + stats.t.ppf(level, nu) * math.sqrt(se2)


def _delta_between(se_a: float, se_b: float, n: int, level_lo: float, level_hi: float) -> float:
    """Δ̂ placing 0 between the upper bounds at ``level_lo`` < ``level_hi``: U(level_lo) < 0 < U(level_hi)."""
    se2 = se_a**2 + se_b**2
    nu = se2**2 / ((se_a**4 + se_b**4) / (n - 2))
    return -math.sqrt(se2) * (stats.t.ppf(level_lo, nu) + stats.t.ppf(level_hi, nu)) / 2


@pytest.mark.parametrize("m", [1, 2, 3])
def test_released_ordering_check_tests_each_pair_at_alpha_over_m(m):
    """m pairs, the first m − 1 far above 0; the last pair's Δ̂ puts 0 between the upper bounds at
    1 − α and 1 − α/m (it must pass for m > 1: a missing correction fails it), or between 1 − α/m
    and 1 − α/(2m) (it must fail: a doubled correction passes it)."""
    from transformer_limits.verify.experiments import spectral_released as sr

    alpha = sr.ALPHA
    se_a, se_b = 0.12, 0.07
    names = [f"O{i}" for i in range(2 * m)]
    pairs = tuple((names[2 * i], names[2 * i + 1]) for i in range(m))
    # upper bounds rise with the level: Δ̂ puts 0 between U(lo) < 0 < U(hi)
    cases = [((1 - alpha / m, 1 - alpha / (2 * m)), False)] + ([((1 - alpha, 1 - alpha / m), True)] if m > 1 else [])
    cases += _member_levels(alpha, m)
    for (lo, hi), passes in cases:
        fits = {}
        for a, b in pairs[:-1]:
            fits[(a, "hard")], fits[(b, "hard")] = _exact_fit(0.9, se_a), _exact_fit(0.2, se_b)
        a, b = pairs[-1]
        delta = _delta_between(se_a, se_b, WIDTHS.size, lo, hi)
        fits[(a, "hard")], fits[(b, "hard")] = _exact_fit(0.5 + delta, se_a), _exact_fit(0.5, se_b)
        assert _welch_upper(fits[(a, "hard")], fits[(b, "hard")], lo) < 0 < \
            _welch_upper(fits[(a, "hard")], fits[(b, "hard")], hi)
        check = sr.ordering_check("t", pairs, fits, alpha)
        assert check.passed is passes, (m, lo, hi, check.statistics["pairs"][-1])
        assert check.statistics["alpha"] == alpha
        assert check.statistics["pairs"][-1]["upper"] == pytest.approx(
            _welch_upper(fits[(a, "hard")], fits[(b, "hard")], 1 - alpha / m), rel=1e-10, abs=1e-12)


def test_released_experiment_corrects_over_the_pairs_of_each_check():
    """Through ``analyse`` on synthetic released points: ``muon_hard_beta_exceeds_adamw`` has two pairs
    (Muon, AdamW) and (NorMuon, AdamW).  NorMuon − AdamW sits between the 1 − α and 1 − α/2 upper
    bounds: the check passes; with the pair's Δ̂ between the 1 − α/2 and 1 − α/4 bounds it fails."""
    from transformer_limits.verify.experiments import spectral_released as sr

    alpha, se = sr.ALPHA, 0.1
    for (lo, hi), passes in (((1 - alpha, 1 - alpha / 2), True), ((1 - alpha / 2, 1 - alpha / 4), False)):
        delta = _delta_between(se, se, WIDTHS.size, lo, hi)
        betas = {"AdamW": 0.5, "Muon": 1.5, "NorMuon": 0.5 + delta, "Dion-1/2": 0.9, "Dion-1/16": 0.4}
        groups = {(opt, "GLOBAL", metric): (WIDTHS.copy(), _exact_points(beta, se))
                  for opt, beta in betas.items() for metric in ("soft", "hard")}
        result = sr.analyse(groups, ExperimentConfig())
        check = next(c for c in result.checks if c.name == "muon_hard_beta_exceeds_adamw")
        assert len(check.statistics["pairs"]) == 2
        assert check.passed is passes, (lo, hi, check.statistics["pairs"])
        dion = next(c for c in result.checks if c.name == "dion_rank_monotone")
        assert dion.passed


def test_released_ordering_family_false_failure_rate_under_the_null():
    """Two pairs at the boundary of the claim (equal true slopes), Gaussian log-noise σ = 0.1 at the
    8 widths, 2000 families from seed 20260524.  Bonferroni at α = 0.05 over 2 pairs gives a family
    rate ≈ 1 − (1 − 0.025)² = 0.049 (Welch's t is nearly exact here: equal σ and n); the uncorrected
    test ≈ 0.0975.  The band [0.03, 0.068] is about ±3.9 binomial standard errors (0.0048) around
    0.049: a correct test leaves it with probability < 2e-4 (measured: 0.0425)."""
    from transformer_limits.verify.experiments import spectral_released as sr
    from transformer_limits.verify.stats.width_scaling import fit_width_scaling

    rng = np.random.default_rng(20260524)
    x = np.log(WIDTHS)
    reps, fails = 2000, 0
    pairs = (("A", "B"), ("C", "D"))
    for _ in range(reps):
        fits = {(o, "hard"): fit_width_scaling(WIDTHS, np.exp(1.0 + 0.5 * x + 0.1 * rng.standard_normal(8)))
                for o in "ABCD"}
        fails += not sr.ordering_check("null", pairs, fits).passed
    assert 0.03 <= fails / reps <= 0.068, fails / reps


# ================================================================================================
# beta_difference_check (spectral-scaling): conservative bounds at α/m per pair
# ================================================================================================


def _bfit(beta: float, bootstrap, ols_beta: float, stderr: float, n: int) -> SimpleNamespace:
    return SimpleNamespace(beta=beta, seed_fit=SimpleNamespace(exponent=SimpleNamespace(bootstrap=np.asarray(bootstrap))),
                           ols=SimpleNamespace(beta=ols_beta, stderr=stderr, n=n))


FAR = _bfit(1.0, np.full(400, 1.0), 1.0, 0.01, 12), _bfit(0.0, np.full(400, 0.0), 0.0, 0.01, 12)


@pytest.mark.parametrize("m", [1, 2, 4])
def test_beta_difference_t_bound_is_at_alpha_over_m(m):
    """Bootstrap bound hopeless (every Δ* = −10), so the Welch-t bound decides: the last pair's OLS Δ̂
    puts 0 between the t bounds at levels 1 − α and 1 − α/m (pass for m > 1) or between 1 − α/m
    and 1 − α/(2m) (fail)."""
    from transformer_limits.verify.stats.beta_difference import beta_difference_check

    alpha, se, n = 0.05, 0.08, 12
    cases = [((1 - alpha / m, 1 - alpha / (2 * m)), False)] + ([((1 - alpha, 1 - alpha / m), True)] if m > 1 else [])
    cases += _member_levels(alpha, m)
    for (lo, hi), passes in cases:
        delta = _delta_between(se, se, n, lo, hi)
        a = _bfit(0.5 + delta, np.full(400, -9.5), 0.5 + delta, se, n)
        b = _bfit(0.5, np.full(400, 0.5), 0.5, se, n)
        pairs = [(f"S{i}", *FAR) for i in range(m - 1)] + [("LAST", a, b)]
        check = beta_difference_check("d", "c", pairs, alpha)
        assert check.passed is passes, (m, lo, hi, check.statistics["pairs"][-1])


@pytest.mark.parametrize("m", [1, 2, 4])
def test_beta_difference_bootstrap_bound_is_at_alpha_over_m(m):
    """Welch-t bound hopeless (Δ̂_ols = −10, tiny SE), so the bootstrap quantile decides: Δ* takes the
    values of a fine grid on [−1, 1] shifted so that 0 lies between its (1 − α)- and (1 − α/m)-quantiles
    (pass for m > 1), or between its (1 − α/m)- and (1 − α/(2m))-quantiles (fail)."""
    from transformer_limits.verify.stats.beta_difference import beta_difference_check

    alpha = 0.05
    grid = np.linspace(-1.0, 1.0, 4001)
    cases = [((1 - alpha / m, 1 - alpha / (2 * m)), False)] + ([((1 - alpha, 1 - alpha / m), True)] if m > 1 else [])
    cases += _member_levels(alpha, m)
    for (lo, hi), passes in cases:
        shift = -(np.quantile(grid, lo) + np.quantile(grid, hi)) / 2
        boot = grid + shift
        assert np.quantile(boot, lo) < 0 < np.quantile(boot, hi)
        a = _bfit(shift, boot + 0.3, -9.7, 1e-6, 12)
        b = _bfit(0.0, np.full(grid.size, 0.3), 0.3, 1e-6, 12)
        pairs = [(f"S{i}", *(_bfit(1.0, np.full(grid.size, 1.0), 1.0, 0.01, 12),
                             _bfit(0.0, np.zeros(grid.size), 0.0, 0.01, 12))) for i in range(m - 1)]
        check = beta_difference_check("d", "c", pairs + [("LAST", a, b)], alpha)
        assert check.passed is passes, (m, lo, hi, check.statistics["pairs"][-1])


def test_spectral_scaling_muon_check_is_one_family_over_mid_and_tail():
    """``muon_hard_beta_check`` tests MID and TAIL as one family at α = 0.05: a TAIL Δ̂ between the 1 − α
    and 1 − α/2 bounds passes, between 1 − α/2 and 1 − α/4 fails (bootstrap hopeless, t decides)."""
    from transformer_limits.verify.experiments import spectral_scaling as ss

    alpha, se, n = ss.ALPHA, 0.08, 12
    for (lo, hi), passes in (((1 - alpha, 1 - alpha / 2), True), ((1 - alpha / 2, 1 - alpha / 4), False)):
        delta = _delta_between(se, se, n, lo, hi)
        fits = {("muon", "MID", "hard"): FAR[0], ("adamw", "MID", "hard"): FAR[1],
                ("muon", "TAIL", "hard"): _bfit(0.5 + delta, np.full(400, -9.5), 0.5 + delta, se, n),
                ("adamw", "TAIL", "hard"): _bfit(0.5, np.full(400, 0.5), 0.5, se, n)}
        check = ss.muon_hard_beta_check(fits)
        assert check.passed is passes, (lo, hi, check.statistics["pairs"])
