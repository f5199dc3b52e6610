"""Power of every verdict just outside its declared tolerance, and the experiments' tolerances pinned.

For each verdict of verify/verdicts.py: synthetic data whose exponent (or constant) lies just outside
what the claim plus its tolerance allows — ``claim ± 1.5 × tolerance`` — must be rejected, and data
at the claim must pass.  Data: err = C p^q × lognormal(σ) seed noise (``lognormal_seed_noise``),
fixed seeds, ``R`` replicate datasets per case.  False-failure rates of these assertions:

* "rejected in every replicate": the alternative lies ≥ 10 standard errors of the fitted exponent
  beyond the edge of the accepted region (``_gap_in_se``), the 99 % interval is ≈ 3.5 se wide on
  each side, so a replicate escapes rejection with probability < 1e-4 and the assertion fails a
  correct verdict with probability < 2R · 1e-4 ≤ 4e-3 (the experiment cases use the full
  profiles' level grids, 5–9 levels, with 64 seeds, and reject every replicate too);
* "passes at the claim": at the claim itself (a tolerance away from both edges) a check fails with
  probability ≪ α; at the edge of the tolerance its rate is ≤ α/2 (two-sided) and the assertion
  allows the binomial 99.9 % quantile of Binomial(R, α).

The experiments declare tolerances in code (``TOLERANCE`` constants, ``TAYLOR_STEPS``) and justify
them in docs/verification.md ("Declared tolerances").  ``test_declared_tolerances_match_the_docs``
pins each to its documented value, so a doubled tolerance fails; the ``*_rejects_just_outside``
tests feed a synthetic rate 1.5 × tolerance away from the claim to the same verdict call the
experiment makes (its ALPHA, fit options and levels), which a doubled tolerance would accept.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.stats.multi_term import fit_rate_claim
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.stats.seed_bootstrap import lognormal_seed_noise
from transformer_limits.verify.taylor import taylor_test
from transformer_limits.verify.verdicts import (
    constant_below,
    exponent_equals,
    fit_adequate,
    rate_at_least,
    slope_zero,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "verification.md"
L9 = 2.0 ** np.arange(2, 11)  # 9 levels
R = 20
N_SEEDS, SIGMA = 64, 0.2


def _data(law, seed, n_seeds=N_SEEDS, sigma=SIGMA):
    return lognormal_seed_noise(law, n_seeds, sigma, seed)


def _fits(q, levels=L9, constant=2.0, offset=0, **fit_options):
    """R fits over all levels (``window="all"``, as the experiments fit: the verdict is under test,
    not the window rules)."""
    return [fit_power_law(levels, _data(constant * levels**q, offset + r), n_boot=500, seed=r, window="all",
                          **fit_options) for r in range(R)]


# Standard error of the fitted exponent: sd(log ē_i) ≈ σ/√n_seeds per level, over Sxx = Σ (log p_i − mean)².
SE_TRUE = SIGMA / np.sqrt(N_SEEDS) / np.sqrt(np.sum((np.log(L9) - np.log(L9).mean()) ** 2))


def _gap_in_se(gap):
    """The distance from the alternative to the edge of the accepted region, in standard errors.  The
    99 % conservative half-width is ≈ 3.5 se (t_{0.995, 7} for 9 levels), so a gap ≥ 10 se leaves a
    margin > 6 se: a replicate escapes rejection with probability < 1e-4 (the docstring's rate)."""
    return gap / SE_TRUE


# ------------------------------------------------------------------------------------------------
# verdicts.py: each verdict just outside and at its claim
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tolerance", [0.1, 0.2])
def test_exponent_equals_rejects_just_outside_the_tolerance(tolerance):
    q0 = -1.0
    for sign in (+1, -1):
        outside = _fits(q0 + sign * 1.5 * tolerance, offset=1000 * (sign + 2))
        # the accepted region ends at q0 ± tol: the 99 % conservative CI must clear it
        assert all(not exponent_equals(f, q0, tolerance=tolerance).passed for f in outside)
        assert _gap_in_se(0.5 * tolerance) >= 10
        edge = _fits(q0 + sign * tolerance, offset=5000 + 1000 * sign)
        assert sum(not exponent_equals(f, q0, tolerance=tolerance).passed for f in edge) <= \
            stats.binom.ppf(0.999, R, 0.005)
    at_claim = _fits(q0, offset=9000)
    assert all(exponent_equals(f, q0, tolerance=tolerance).passed for f in at_claim)
    # and without the tolerance the same just-outside data are rejected more easily still
    assert all(not exponent_equals(f, q0).passed for f in _fits(q0 + 1.5 * tolerance, offset=11_000))


@pytest.mark.parametrize("tolerance", [0.1, 0.2])
def test_slope_zero_rejects_just_outside_the_tolerance(tolerance):
    for sign in (+1, -1):
        outside = _fits(sign * 1.5 * tolerance, offset=20_000 + 1000 * sign)
        assert all(not slope_zero(f, tolerance=tolerance).passed for f in outside)
        assert _gap_in_se(0.5 * tolerance) >= 10
    assert all(slope_zero(f, tolerance=tolerance).passed for f in _fits(0.0, offset=23_000))


def test_rate_at_least_rejects_a_slightly_slower_decay():
    """One-sided: a decay 0.15 slower than claimed fails; the claim itself and faster decays pass."""
    slower = _fits(-1.0 + 0.15, offset=30_000)
    assert all(not rate_at_least(f, -1.0).passed for f in slower)
    assert _gap_in_se(0.15) >= 10
    assert sum(not rate_at_least(f, -1.0).passed for f in _fits(-1.0, offset=31_000)) <= \
        stats.binom.ppf(0.999, R, 0.01)
    assert all(rate_at_least(f, -1.0).passed for f in _fits(-1.15, offset=32_000))
    for f in slower[:3]:  # the side: a lower bound, open above
        low, high = rate_at_least(f, -1.0).ci
        assert high == np.inf and low <= f.exponent.value


def test_constant_below_rejects_a_constant_just_above_the_bound():
    """C = 1.5 × bound fails; C = bound passes at rate ≥ 1 − α; the interval is a lower bound."""
    above = _fits(-1.0, constant=3.0, offset=40_000)
    assert all(not constant_below(f, 2.0).passed for f in above)
    at = _fits(-1.0, constant=2.0, offset=41_000)
    assert sum(not constant_below(f, 2.0).passed for f in at) <= stats.binom.ppf(0.999, R, 0.01)
    for f in above[:3]:
        low, high = constant_below(f, 2.0).ci
        assert high == np.inf and low <= f.constant.value


def test_fit_adequate_rejects_a_missing_term_just_above_the_noise():
    """A second term 2/L² next to 1/L (relative size 2/L: 50 % at L = 4, 0.2 % at L = 1024) fitted by
    the one-term claim C L^-1 fails the F test; the two-term claim passes."""
    table = {"L": L9}
    law = 1.0 / L9 + 2.0 / L9**2
    for r in range(R):
        errors = _data(law, 50_000 + r, sigma=0.2)
        assert not fit_adequate(fit_rate_claim("L^-1", table, errors, n_boot=200, seed=r)).passed
        assert fit_adequate(fit_rate_claim("L^-1 + L^-2", table, errors, n_boot=200, seed=r), 0.001).passed


# ------------------------------------------------------------------------------------------------
# The experiments' declared tolerances
# ------------------------------------------------------------------------------------------------


def documented_tolerances() -> dict[str, float]:
    """``{"experiment/check": tolerance}`` from the "Declared tolerances" table of docs/verification.md."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### Declared tolerances", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`([\w-]+)`\s*\|\s*`([\w]+)`[^|]*\|\s*([0-9.]+)\s*\|", line)
        if m:
            out[f"{m.group(1)}/{m.group(2)}"] = float(m.group(3))
    return out


def declared_tolerances() -> dict[str, float]:
    """The tolerances the experiment modules use (their module-level constants)."""
    from transformer_limits.verify.experiments import (
        adamw_box,
        attention_depth_width,
        lions_taylor,
        sde_limit,
        token_independence,
    )

    return {
        "attention-depth-width/exponent_L": attention_depth_width.TOLERANCE,
        "attention-depth-width/exponent_H": attention_depth_width.TOLERANCE,
        "attention-depth-width/trained_exponent_L": attention_depth_width.TOLERANCE,
        "attention-depth-width/trained_exponent_H": attention_depth_width.TOLERANCE,
        "sde-limit/exponent_L": sde_limit.EXPONENT_L.tolerance,
        "sde-limit/exponent_m": sde_limit.EXPONENT_M.tolerance,
        "token-independence/slope_in_log_N": token_independence.TOLERANCE,
        "adamw-box/blockwise_dimension_free": adamw_box.BLOCKWISE_DIMENSION_FREE.tolerance,
        "adamw-box/coordinatewise_exponent": adamw_box.COORDINATEWISE_EXPONENT.tolerance,
        "lions-taylor/lions_taylor_rate": lions_taylor.TAYLOR_STEPS["tolerance"],
    }


def test_declared_tolerances_match_the_docs():
    documented = documented_tolerances()
    declared = declared_tolerances()
    assert set(documented) == set(declared), (sorted(documented), sorted(declared))
    for key, value in declared.items():
        assert value == documented[key], f"{key}: code declares {value}, docs/verification.md justifies {documented[key]}"


DOC = documented_tolerances()


def _experiment_power(verdict, levels, claim, tolerance, *, n_seeds=64, sigma=0.2, offset=0):
    """Rejections of data at claim ± 1.5 tol and passes at the claim, with the experiment's verdict.
    ``tolerance`` is the *documented* one: the verdict uses the experiment's declared value, so a
    declared tolerance grown past 1.5 × the documented one accepts these data and fails the test."""
    rejected = passed = 0
    for r in range(R):
        for sign in (+1, -1):
            q = claim + sign * 1.5 * tolerance
            rejected += not verdict(levels, _data(levels**q, offset + 2 * r + (sign > 0), n_seeds, sigma), r).passed
        passed += verdict(levels, _data(levels**claim, offset + 10_000 + r, n_seeds, sigma), r).passed
    return rejected, passed


def test_attention_depth_width_rejects_just_outside():
    from transformer_limits.verify.experiments import attention_depth_width as adw

    for name, param, key, claim in (("exponent_L", "L", "L_levels", -1.0), ("exponent_H", "H", "H_levels", -0.5)):
        levels = np.array(adw.SETTINGS["full"][key], dtype=float)

        def verdict(lv, errors, seed):
            return adw.exponent_check(name, param, lv, errors, claim, seed)[0]

        rejected, passed = _experiment_power(verdict, levels, claim, DOC[f"attention-depth-width/{name}"],
                                              offset=60_000)
        assert (rejected, passed) == (2 * R, R), name


def test_sde_limit_rejects_just_outside():
    from transformer_limits.verify.experiments import sde_limit

    def verdict(levels, errors, seed):  # the call sde_limit.run makes
        fit = fit_power_law({"L": levels}, errors, expected=-1.0, window="all", seed=seed)
        return exponent_equals(fit, -1.0, sde_limit.EXPONENT_L.alpha, tolerance=sde_limit.EXPONENT_L.tolerance)

    for key in ("L_levels", "m_levels"):
        levels = np.array(sde_limit.SETTINGS["full"][key], dtype=float)
        rejected, passed = _experiment_power(verdict, levels, -1.0, DOC["sde-limit/exponent_L"], offset=70_000)
        assert (rejected, passed) == (2 * R, R), key


def test_token_independence_rejects_just_outside():
    from transformer_limits.verify.experiments import token_independence as ti

    log_n = np.log(np.array(ti.SETTINGS["full"]["N_levels"], dtype=float))

    def verdict(levels, errors, seed):  # the call token_independence.run makes (p = log N, paired)
        fit = fit_power_law({"log N": levels}, errors, window="all", resample="paired", seed=seed)
        return slope_zero(fit, ti.ALPHA, tolerance=ti.TOLERANCE)

    rejected, passed = _experiment_power(verdict, log_n, 0.0, DOC["token-independence/slope_in_log_N"], sigma=0.1,
                                          offset=80_000)
    assert (rejected, passed) == (2 * R, R)


def test_adamw_box_rejects_just_outside():
    from transformer_limits.verify.experiments import adamw_box

    d = np.array(adamw_box.SETTINGS["full"]["d_levels"], dtype=float)
    tol = declared_tolerances()

    def blockwise(levels, errors, seed):  # the calls adamw_box.run makes
        fit = fit_power_law({"d": levels}, errors, window="all", seed=seed)
        return slope_zero(fit, adamw_box.BLOCKWISE_DIMENSION_FREE.alpha,
                          tolerance=tol["adamw-box/blockwise_dimension_free"])

    def coordinatewise(levels, errors, seed):
        fit = fit_power_law({"d": levels}, errors, window="all", seed=seed)
        return exponent_equals(fit, 0.5, adamw_box.COORDINATEWISE_EXPONENT.alpha,
                               tolerance=tol["adamw-box/coordinatewise_exponent"])

    assert _experiment_power(blockwise, d, 0.0, DOC["adamw-box/blockwise_dimension_free"], sigma=0.1,
                             offset=90_000) == (2 * R, R)
    assert _experiment_power(coordinatewise, d, 0.5, DOC["adamw-box/coordinatewise_exponent"], sigma=0.1,
                             offset=95_000) == (2 * R, R)


def test_lions_taylor_rejects_a_rate_just_outside():
    """taylor_test with the experiment's steps: a remainder decaying like h^{k+1 − 1.5 tol} fails, the
    exact expansion passes (deterministic)."""
    from transformer_limits.verify.experiments.lions_taylor import TAYLOR_STEPS

    tol = DOC["lions-taylor/lions_taylor_rate"]
    x, dx = np.array([0.0]), np.array([1.0])
    for order in (1, 2, 3):
        # f(y) = |y|^{k+1−1.5 tol} at 0: the first k Taylor coefficients vanish and R_k(h) = h^{k+1−1.5 tol}
        rough = lambda y, k=order: np.abs(y) ** (k + 1 - 1.5 * tol)  # noqa: E731
        result = taylor_test(rough, x, dx, [np.zeros(1)] * order, **TAYLOR_STEPS)
        assert not result.passed and result.min_rate == pytest.approx(order + 1 - 1.5 * tol, abs=1e-9)
        smooth = lambda y, k=order: y ** (k + 1)  # noqa: E731  (R_k(h) = h^{k+1} exactly)
        assert taylor_test(smooth, x, dx, [np.zeros(1)] * order, **TAYLOR_STEPS).passed
