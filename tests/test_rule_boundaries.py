"""Every decision rule is tested at its threshold: just inside passes, just outside fails.

The other tests of these rules sit far from the thresholds, so moving a threshold (say tenfold) went
unnoticed.  Here each rule gets inputs placed a relative 1e-9 (or a few ulps of the statistic) on
either side of the threshold that its documentation states, with the defaults the documentation
states (nothing is passed that the rule would take from its defaults):

* Gegenbauer identity of λ̄ (docs/theory.md §B.7, ``symbolic/lyapunov.py``): holds iff
  |residual − tail| ≤ |tail|/5 + last_terms + 10·error, and a pass is only reported when that tolerance
  is ≤ 1 % of (d−1)|k'(1)| + |d−3||k(1)| (else "not evaluated");
* asymptotic window (docs/verification.md §2): noise floor margin 4, plateau stall_fraction 0.5 and
  stall_z 2 bootstrap sd, curvature lack-of-fit at 0.01, rules 2–3 stop at min_levels 3;
* verdicts (docs/verification.md §3, default α = 0.01): rate_at_least, exponent_equals / slope_zero
  with a tolerance, constant_below, fit_adequate (p-value vs α, critical F);
* Taylor test (``verify/taylor.py``): pass iff ≥ 2 usable rates and the three finest usable rates are
  ≥ k + 1 − 0.1; a remainder ≤ 1e3·ε·max(1, |f(x)|) is unusable;
* ``spectral-scaling`` ``training_learns``: every run closes ≥ 1/2 of the gap H(μ) − L_Bayes;
* ``spectral-released`` ``published_betas_reproduced``: |refit − published| ≤ ½·10⁻³;
* ``synchronization``: ``decay_rate_bound`` needs ε + λ̄' < 0 and rate_at_least; ``sign_change_d3``
  needs λ̄₊ > 0 > λ̄₋ and the α-quantile of the bootstrap rate difference > 0;
* ``attention-depth-width`` ``rate_bound_holds``: fails iff a lower (1 − α/2) bound of the ratio trend
  slopes s_L, s_H is > 0.

No statistical test here: every input is deterministic (fixed seeds).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from types import SimpleNamespace

import mpmath
import numpy as np
import pytest
from scipy import stats

EPS_REL = 1e-9
ALPHA = 0.01  # the documented default of every verdict


def _sides(edge: float, rel: float = EPS_REL) -> tuple[float, float]:
    """(just below, just above) ``edge``."""
    d = rel * max(abs(edge), 1e-300)
    return edge - d, edge + d


# ================================================================================================
# Gegenbauer identity of λ̄ (symbolic/lyapunov.py)
# ================================================================================================


def _identity(**kw):
    from transformer_limits.symbolic.lyapunov import GegenbauerIdentity

    m = mpmath.mpf
    base = dict(partial=m(1), tail=m(0), residual=m(0), error=m(0), last_terms=m(0))
    base.update({k: m(v) for k, v in kw.items()})
    return GegenbauerIdentity(**base)


@pytest.mark.parametrize("part, kw", [
    ("tail / 5", dict(tail="3e-5")),
    ("last terms", dict(last_terms="3e-5")),
    ("10 error", dict(error="3e-6")),
])
def test_gegenbauer_identity_holds_up_to_each_term_of_its_tolerance(part, kw):
    """Each term of the tolerance on its own: residual − tail just inside holds, just outside not,
    on both sides of the tail estimate."""
    m = mpmath.mpf
    tol = {"tail / 5": m("3e-5") / 5, "last terms": m("3e-5"), "10 error": 10 * m("3e-6")}[part]
    tail = m(kw.get("tail", 0))
    for sign in (+1, -1):
        inside = _identity(**kw, residual=tail + sign * tol * (1 - m(EPS_REL)))
        outside = _identity(**kw, residual=tail + sign * tol * (1 + m(EPS_REL)))
        assert inside.holds and not outside.holds, (part, sign)
        assert float(inside.tolerance) == pytest.approx(float(tol), rel=1e-15)


def test_gegenbauer_check_reports_a_pass_only_below_one_percent_of_the_terms(monkeypatch):
    """``derive lyapunov``'s Gegenbauer line: an identity that holds with tolerance just under
    1 % of (d−1)|k'(1)| + |d−3||k(1)| is "passed" (consistent); just over, "not evaluated" (vacuous)."""
    import transformer_limits as tl
    import transformer_limits.symbolic.lyapunov as lyap
    from transformer_limits.symbolic.derivation import check_state

    derivation_module = importlib.import_module("transformer_limits.symbolic.derivation")
    lyap._symbolic_checks()
    states = {}
    for factor in (1 - EPS_REL, 1 + EPS_REL):
        def fake_identity(kernel, coefficients, factor=factor):
            scale = (kernel.d - 1) * abs(kernel.dk1.value) + abs(kernel.d - 3) * abs(kernel.k1.value)
            assert scale > 0
            # residual = tail = 0: the identity holds; the tolerance is the last terms alone
            return _identity(last_terms=scale / 100 * mpmath.mpf(factor))

        monkeypatch.setattr(lyap, "gegenbauer_identity", fake_identity)
        monkeypatch.setattr(derivation_module, "_CACHE", {})
        d = tl.derivation("lyapunov", activation="relu", d=5, sigma_u=0.1, sigma_w=0.1, n_max=8)
        line = next(c for c in d.checks if c.startswith("Gegenbauer"))
        states[factor] = check_state(line)
    assert states == {1 - EPS_REL: "passed", 1 + EPS_REL: "not evaluated"}


# ================================================================================================
# asymptotic window (verify/stats/asymptotic_window.py), documented defaults
# ================================================================================================

P6 = 2.0 ** np.arange(6)  # p = 1 .. 32


def _window(errors, p=P6, **kw):
    from transformer_limits.verify.stats.asymptotic_window import choose_asymptotic_window

    return choose_asymptotic_window(p, errors, n_boot=400, seed=1, **kw)


def _noisy_power_law(p=P6, q=-1.0, seeds=8, sigma=0.05, seed=0):
    rng = np.random.default_rng(seed)
    return p[:, None] ** q * np.exp(sigma * rng.standard_normal((p.size, seeds)))


def test_noise_floor_drops_levels_at_or_below_four_times_the_floor():
    e = _noisy_power_law()
    finest = e[-1].mean()  # the level aggregate is the mean over seeds
    for floor, dropped in ((finest / 4 * (1 - EPS_REL), False), (finest / 4 * (1 + EPS_REL), True)):
        w = _window(e, noise_floor=floor)
        assert (5 in w.excluded and "noise floor" in w.excluded[5]) is dropped, (floor, w.excluded)
        assert not any("noise floor" in w.excluded.get(i, "") for i in range(5))  # the others are far above


def _exact(orders, seeds=4):
    """Errors identical over seeds (bootstrap sd 0) with the given local orders between p-levels."""
    log_e = np.concatenate([[0.0], np.cumsum(np.asarray(orders) * np.log(2.0))])
    return np.repeat(np.exp(log_e)[:, None], seeds, axis=1)


def test_plateau_drops_the_finest_level_shallower_than_half_the_reference_order():
    """Reference = median local order = −1 (four of five orders), so the finest level is a plateau
    iff its order q > 0.5 · (−1) (bootstrap sd 0 here)."""
    for q_last, dropped in ((-0.5 - 1e-6, False), (-0.5 + 1e-6, True)):
        w = _window(_exact([-1.0, -1.0, -1.0, -1.0, q_last]))
        assert w.reference_order == pytest.approx(-1.0, rel=1e-12)
        assert (w.excluded.get(5, "").startswith("plateau")) is dropped, (q_last, w.excluded)


def test_plateau_allows_two_bootstrap_sd_of_its_last_order():
    """Only the finest level is noisy: its local order q has bootstrap sd s (measured with
    :func:`local_orders`, the same resampling); it is a plateau iff q − 2 s > −0.5 (reference −1)."""
    from transformer_limits.verify.stats.asymptotic_window import local_orders

    rng = np.random.default_rng(5)
    base = _exact([-1.0] * 5, seeds=8)
    base[-1] *= np.exp(0.2 * rng.standard_normal(8))
    sd = local_orders(P6, base, n_boot=400, seed=1).std[-1]
    q0 = local_orders(P6, base, n_boot=400, seed=1).orders[-1]
    assert 0.02 < sd < 0.5  # 2 sd is far from 0 and from 20 sd: a changed stall_z shows
    for target, dropped in ((-0.5 + 2 * sd - 1e-6, False), (-0.5 + 2 * sd + 1e-6, True)):
        e = base.copy()
        e[-1] *= 2.0 ** (target - q0)  # scales the finest level: q moves to target, sd unchanged
        lo = local_orders(P6, e, n_boot=400, seed=1)
        assert lo.orders[-1] == pytest.approx(target, abs=1e-12) and lo.std[-1] == pytest.approx(sd, rel=1e-9)
        w = _window(e)
        assert (w.excluded.get(5, "").startswith("plateau")) is dropped, (target, sd, w.excluded)


def _lack_of_fit_p(errors, p=P6) -> float:
    """p-value of the straight-line lack-of-fit F test (docs/verification.md, Fit quality): F = mean
    squared log residual per dof (n − 2) over the mean bootstrap variance of log ē_i, on
    (n − 2, n (n_seeds − 1)) dof; the bootstrap replicates of the seed bootstrap."""
    from transformer_limits.verify.stats.seed_bootstrap import seed_replicates

    reps = seed_replicates(np.asarray(errors), 400, 1, "independent", "mean")
    x, y = np.log(p), reps.observed
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    noise = np.mean(np.var(reps.bootstrap, axis=0, ddof=1))
    F = np.sum(resid**2) / (p.size - 2) / noise
    return float(stats.f.sf(F, p.size - 2, p.size * (errors.shape[1] - 1)))


def test_curvature_rule_trims_at_lack_of_fit_p_value_one_percent():
    """Bend a noisy power law by exp(a (log p − mean)²) with a < 0 (steeper at the fine end: no plateau).
    The bend moves the log level means and leaves the bootstrap variances alone, so the lack-of-fit
    p-value falls with |a|; at the a where it is 0.01 the window keeps all levels just inside and
    trims just outside."""
    from scipy.optimize import brentq

    base = _noisy_power_law(sigma=0.1, seed=3)
    x = np.log(P6)
    bend = (x - x.mean()) ** 2

    def bent(a):
        return base * np.exp(a * bend)[:, None]

    a_star = brentq(lambda a: math.log(_lack_of_fit_p(bent(a))) - math.log(0.01), -1.0, 0.0, xtol=1e-14)
    for a, trimmed in ((a_star * (1 - 1e-6), False), (a_star * (1 + 1e-6), True)):
        assert (_lack_of_fit_p(bent(a)) < 0.01) is trimmed
        w = _window(bent(a))
        assert (any("lack-of-fit" in why for why in w.excluded.values())) is trimmed, (a, w.excluded)
        assert not any(why.startswith("plateau") for why in w.excluded.values())


def test_plateau_and_curvature_rules_stop_at_three_levels():
    """Three levels with a flat last step (plateau) or a strong bend: nothing is dropped at the default
    min_levels = 3; with min_levels = 2 the rule acts (so it is the floor, not the data, that stops it)."""
    p3 = P6[:3]
    flat = _exact([-1.0, 0.0])
    assert _window(flat, p=p3).used == (0, 1, 2)
    assert _window(flat, p=p3, min_levels=2).used == (0, 1)
    bent = _noisy_power_law(p=p3, sigma=0.02, seed=2) * np.array([1.0, 3.0, 1.0])[:, None]
    assert _window(bent, p=p3).used == (0, 1, 2)
    assert len(_window(bent, p=p3, min_levels=2).used) == 2


# ================================================================================================
# verdicts (verify/verdicts.py) at the edge of their intervals, default α = 0.01
# ================================================================================================


@pytest.fixture(scope="module")
def fit():
    from transformer_limits.verify.stats.power_law import fit_power_law

    L = 2.0 ** np.arange(2, 9)
    rng = np.random.default_rng(11)
    errors = 3.0 / L[:, None] * np.exp(0.3 * rng.standard_normal((L.size, 12)))
    return fit_power_law({"L": L}, errors, window="all", seed=4)


def test_rate_at_least_fails_iff_the_lower_99_percent_bound_exceeds_the_claim(fit):
    from transformer_limits.verify.verdicts import rate_at_least

    low = fit.exponent.interval(1 - ALPHA, "lower")[0]
    below, above = _sides(low)
    assert not rate_at_least(fit, below).passed  # claim just under the bound: decay significantly slower
    assert rate_at_least(fit, above).passed


@pytest.mark.parametrize("tolerance", [0.0, 0.1])
def test_exponent_equals_and_slope_zero_accept_up_to_the_tolerance(fit, tolerance):
    """Pass iff the two-sided 99 % CI [lo, hi] meets [q0 − tol, q0 + tol]: the edges are
    q0 = lo − tol and q0 = hi + tol.  slope_zero is the same rule at q0 = 0 (tested on the data
    tilted by p^{−q}, which moves the CI by −q)."""
    from transformer_limits.verify.verdicts import exponent_equals, slope_zero

    lo, hi = fit.exponent.interval(1 - ALPHA, "two-sided")
    for edge, inside_is_above in ((lo - tolerance, True), (hi + tolerance, False)):
        below, above = _sides(edge, 1e-9)
        inside, outside = (above, below) if inside_is_above else (below, above)
        assert exponent_equals(fit, inside, tolerance=tolerance).passed, (edge, inside)
        assert not exponent_equals(fit, outside, tolerance=tolerance).passed, (edge, outside)
    from transformer_limits.verify.stats.power_law import fit_power_law

    # slope_zero on the data tilted by p^{-q}: its CI is [lo - q, hi - q], which meets [-tol, tol]
    # iff lo - tol <= q <= hi + tol
    for q, passes in ((lo - tolerance - 1e-7, False), (lo - tolerance + 1e-7, True),
                      (hi + tolerance - 1e-7, True), (hi + tolerance + 1e-7, False)):
        tilted = fit_power_law({"L": fit.params}, fit.errors * fit.params[:, None] ** (-q), window="all", seed=4)
        t_lo, t_hi = tilted.exponent.interval(1 - ALPHA, "two-sided")
        assert (t_lo, t_hi) == pytest.approx((lo - q, hi - q), abs=1e-10)
        assert slope_zero(tilted, tolerance=tolerance).passed is passes, (q, tolerance)


def test_constant_below_fails_iff_the_lower_99_percent_bound_of_C_exceeds_the_bound(fit):
    from transformer_limits.verify.verdicts import constant_below

    low = fit.constant.interval(1 - ALPHA, "lower")[0]
    below, above = _sides(low)
    assert not constant_below(fit, below).passed
    assert constant_below(fit, above).passed


def _quality_fit(p_value: float, dof: int = 5, dof_noise: int = 77):
    from transformer_limits.verify.stats.fit_quality import FitQuality

    f = float(stats.f.isf(p_value, dof, dof_noise))
    q = FitQuality(np.zeros(dof + 2), f, dof, dof_noise, p_value)
    return SimpleNamespace(quality=q, settings={"n_boot": 10, "n_seeds": 8}, param="L")


def test_fit_adequate_fails_iff_the_p_value_is_below_alpha():
    from transformer_limits.verify.verdicts import fit_adequate

    below, above = _sides(ALPHA)
    assert not fit_adequate(_quality_fit(below)).passed
    assert fit_adequate(_quality_fit(above)).passed
    check = fit_adequate(_quality_fit(0.3))
    assert check.ci == pytest.approx((0.0, stats.f.ppf(1 - ALPHA, 5, 77)), rel=1e-12)
    assert check.statistics["alpha"] == ALPHA
    # at another α the edge moves with it
    assert not fit_adequate(_quality_fit(0.05 * (1 - EPS_REL)), 0.05).passed
    assert fit_adequate(_quality_fit(0.05 * (1 + EPS_REL)), 0.05).passed


def test_fit_quality_f_statistic_is_the_documented_ratio():
    """F = [Σ (log ē_i − log pred_i)² / (n − n_fitted)] / mean_i var_b(log ē*_i), p = P(F_{dof, n(s−1)} ≥ F):
    the statistic whose threshold fit_adequate applies."""
    from transformer_limits.verify.stats.fit_quality import fit_quality

    rng = np.random.default_rng(2)
    obs = rng.normal(size=6)
    pred = np.exp(obs + 0.1 * rng.normal(size=6))
    boot = obs + 0.05 * rng.normal(size=(300, 6))
    q = fit_quality(obs, pred, boot, 2, 9)
    F = np.sum((obs - np.log(pred)) ** 2) / 4 / np.mean(np.var(boot, axis=0, ddof=1))
    assert q.f_statistic == pytest.approx(F, rel=1e-12) and (q.dof, q.dof_noise) == (4, 6 * 8)
    assert q.p_value == pytest.approx(stats.f.sf(F, 4, 48), rel=1e-10)


# ================================================================================================
# Taylor test (verify/taylor.py): rate ≥ k + 1 − 0.1 at the three finest usable steps
# ================================================================================================


def _taylor(remainders, f0=0.0, **kw):
    """taylor_test of f(x + h·1) = f0 + R(h) at x = 0 with c_1 = 0 (so the remainder is |R(h)|
    up to the rounding of f0 + R), R given per default step h = 0.02 · 2^-i."""
    from transformer_limits.verify.taylor import taylor_test

    steps = 2e-2 * 0.5 ** np.arange(len(remainders))
    table = dict(zip(steps.tolist(), remainders))

    def f(x):
        h = float(x[0])
        return np.array([f0 + (table[min(table, key=lambda s: abs(s - h))] if h else 0.0)])

    return taylor_test(f, np.zeros(1), np.ones(1), [np.zeros(1)], levels=len(remainders), **kw)


def test_taylor_passes_iff_the_finest_rates_reach_k_plus_one_minus_the_tolerance():
    steps = 2e-2 * 0.5 ** np.arange(6)
    for r, passes in ((1.9 * (1 + 1e-9), True), (1.9 * (1 - 1e-9), False)):
        res = _taylor(list(steps**r))
        assert res.min_rate == pytest.approx(r, rel=1e-12)
        assert res.passed is passes, r
    # only the three finest rates are judged: a coarse pre-asymptotic rate 1.0 does not fail the test
    rem = list(steps**2.0)
    rem[0] = rem[1] * 2.0  # rate 1 between the two coarsest steps
    assert _taylor(rem).passed
    rem = list(steps**2.0)
    rem[2] = rem[3] * 2.0 ** 1.8  # rate 1.8 inside the finest three
    assert not _taylor(rem).passed


def test_taylor_round_off_floor_is_a_thousand_eps_times_max_one_f():
    """A remainder ≤ 1e3·ε·max(1, |f(x)|) is at the floor and its rate is not used; fewer than two
    usable rates is a failure, never a pass."""
    floor = 1e3 * np.finfo(np.float64).eps
    # |f(x)| = 50: the remainder 50 + R − 50 carries the rounding of 50 (1e-14 ≈ 6e-4 R), so ±1 %
    for f0, scale, rel in ((0.0, 1.0, 1e-9), (50.0, 50.0, 1e-2)):
        edge = floor * scale
        for just, used in ((edge * (1 + rel), True), (edge * (1 - rel), False)):
            rem = [4.0 * just * 4.0**k for k in (3, 2, 1, 0)] + [just]  # rates 2, the last pair at `just`
            res = _taylor(rem, f0=f0)
            assert bool(res.used[-1]) is used, (f0, just)
    res = _taylor([1e-16] * 5)
    assert res.used.sum() == 0 and not res.passed
    # two usable rates (both 2) suffice; one usable rate 2 does not
    two = _taylor([1e-6, 2.5e-7, 6.25e-8, 1e-16, 1e-16])
    one = _taylor([1e-6, 2.5e-7, 1e-16, 1e-16, 1e-16])
    assert two.used.sum() == 2 and two.min_rate == pytest.approx(2.0) and two.passed
    assert one.used.sum() == 1 and one.min_rate == pytest.approx(2.0) and not one.passed


# ================================================================================================
# spectral-scaling: training_learns (≥ 1/2 of the learnable gap)
# ================================================================================================


def test_training_learns_needs_half_of_the_learnable_gap(monkeypatch):
    pytest.importorskip("torch")
    from transformer_limits.verify.experiment import ExperimentConfig
    from transformer_limits.verify.experiments import spectral_scaling as ss

    grid = ss.TrainingGrid(ffn_mults=(1, 2, 4), seeds=2, steps=1, batch_size=1, eval_sequences=1, d_model=8)
    H, B = 3.0, 1.0
    rng = np.random.default_rng(0)

    def fake_run_points(worst_margin):
        def run_points(config, fn, spec, **kw):
            rows = []
            axes = spec["grid"]
            for i, (opt, k, seed) in enumerate((o, k, s) for o in axes["optimizer"] for k in axes["k"]
                                               for s in axes["seed"]):
                margin = worst_margin if i == 7 else 0.9
                width = k * grid.d_model
                ranks = {s_: [float(width ** 0.5 * np.exp(0.05 * rng.standard_normal())) for _ in ss.RENYI_ALPHAS]
                         for s_ in ss.STRATA_ALL}
                summary = dict(optimizer=opt, ffn_mult=k, width=width, seed=seed, unigram_entropy=H,
                               bayes_loss=B, eval_loss=H - margin * (H - B), seconds=0.0)
                rows.append(dict(optimizer=opt, k=k, seed=seed, width=width, ranks=ranks, settings={},
                                 summary=summary, loss_history=[], strata_types={}, strata_share={},
                                 tokens_per_stratum={}))
            return SimpleNamespace(table=rows, n_run=len(rows), n_skipped=0)
        return run_points

    for margin, passes in ((0.5 * (1 + 1e-9), True), (0.5 * (1 - 1e-9), False)):
        monkeypatch.setattr(ss, "run_points", fake_run_points(margin))
        result = ss.run_grid(grid, ExperimentConfig(profile="quick"))
        check = next(c for c in result.checks if c.name == "training_learns")
        assert check.measured == pytest.approx(margin, rel=1e-12)
        assert check.passed is passes, margin


# ================================================================================================
# spectral-released: published values reproduced within half a unit of the 3rd decimal
# ================================================================================================


def test_published_check_tolerates_half_a_unit_of_the_last_printed_decimal():
    from transformer_limits.verify.experiments import spectral_released as sr
    from transformer_limits.verify.stats.width_scaling import fit_width_scaling

    widths = 768.0 * np.arange(1, 9)
    real = fit_width_scaling(widths, widths**0.5 * np.exp(0.01 * np.cos(np.arange(8))))
    published = {("X", "hard"): (0.5, 0.4, 0.6, 0.9)}
    for field, index in (("beta", 0), ("ci_low", 1), ("ci_high", 2), ("r2", 3)):
        for sign in (+1, -1):
            for delta, passes in ((5e-4 * (1 - 1e-6), True), (5e-4 * (1 + 1e-6), False)):
                values = dict(beta=0.5, ci_low=0.4, ci_high=0.6, r2=0.9)
                values[field] = published[("X", "hard")][index] + sign * delta
                fits = {("X", "hard"): dataclasses.replace(real, **values)}
                assert sr.published_check(fits, published).passed is passes, (field, sign, delta)


# ================================================================================================
# synchronization: the sign of the claimed rate and the sign-change contrast
# ================================================================================================


def test_decay_rate_bound_needs_a_negative_claimed_rate_and_rate_at_least(fit):
    from transformer_limits.verify.experiments import synchronization as sy

    low = fit.exponent.interval(1 - ALPHA, "lower")[0]
    below, above = _sides(low)
    assert sy.decay_rate_check(fit, above).passed and not sy.decay_rate_check(fit, below).passed
    # a fit decaying at rate ≈ −1 against the claimed rate 0: rate_at_least passes, the sign does not
    assert low < -0.5
    assert not sy.decay_rate_check(fit, 0.0).passed
    assert sy.decay_rate_check(fit, -1e-12).passed


def test_sign_change_needs_the_alpha_quantile_of_the_rate_difference_above_zero():
    from transformer_limits.verify.experiments import synchronization as sy

    grid = np.linspace(-1.0, 1.0, 2001)

    def fits(shift):
        pos = SimpleNamespace(exponent=SimpleNamespace(required_bootstrap=grid + shift, value=shift))
        neg = SimpleNamespace(exponent=SimpleNamespace(required_bootstrap=np.zeros(grid.size), value=0.0))
        return pos, neg

    q = np.quantile(grid, ALPHA)  # the α-quantile of the difference is q + shift
    for shift, passes in ((-q + 1e-9, True), (-q - 1e-9, False)):
        assert sy.sign_change_check(*fits(shift), 0.1, -0.1).passed is passes, shift
    # the signs of λ̄ at the two settings: strict on both sides
    for lam_pos, lam_neg, passes in ((1e-12, -1e-12, True), (0.0, -0.1, False), (0.1, 0.0, False)):
        assert sy.sign_change_check(*fits(-q + 0.5), lam_pos, lam_neg).passed is passes


# ================================================================================================
# attention-depth-width: rate_bound_holds (lower (1 − α/2) bounds of the ratio-trend slopes ≤ 0)
# ================================================================================================


def test_rate_bound_holds_fails_iff_a_ratio_trend_slope_is_significantly_positive():
    """Errors = claim × lognormal noise on a 3 × 3 (L, H) grid.  The ratio-trend slopes move by c under
    errors × L^c (or H^c); c is set so the lower (1 − α/2) bound of s_L (then s_H) is ∓1e-7."""
    from transformer_limits.verify.experiments import attention_depth_width as adw
    from transformer_limits.verify.stats.ratio_trend import ratio_trend

    Lg, Hg = np.array([2.0, 4.0, 8.0]), np.array([1.0, 4.0, 16.0])
    claim = 1 / Lg[:, None] + Lg[:, None] ** (-1 / 3) * Hg[None, :] ** -0.5
    rng = np.random.default_rng(8)
    errors = claim[:, :, None] * np.exp(0.1 * rng.standard_normal((3, 3, 6)))
    base = ratio_trend(errors / claim[:, :, None], Lg, Hg, seed=0, alpha=adw.ALPHA / 2)
    for name, axis_values in (("L", Lg[:, None, None]), ("H", Hg[None, :, None])):
        for eps, passes in ((-1e-7, True), (1e-7, False)):
            c = eps - base[name]["lower"]
            tilted = errors * axis_values ** c
            check, _ = adw.rate_bound_check(Lg, Hg, tilted, seed=0)
            assert check.statistics["trend"][name]["lower"] == pytest.approx(eps, abs=1e-9)
            other = "H" if name == "L" else "L"
            assert check.statistics["trend"][other]["lower"] < 0
            assert check.passed is passes, (name, eps)
