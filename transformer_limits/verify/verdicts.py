"""Verdicts: decide a rate claim from a fit by a test with a stated false-failure rate.

Every verdict is a hypothesis test whose null hypothesis is *the claim holds*; the check fails only
when the data contradict the claim at level ``alpha``, so a true claim fails with probability at
most ``alpha`` (the *false-failure rate*, up to the accuracy of the interval method).  Conventions:
errors decay, so exponents are negative, and "faster" means "more negative".

==================  ==========================  ==============================================  =========
verdict             H0 (claim)                  fails when                                      sides
==================  ==========================  ==============================================  =========
rate_at_least       q ≤ q_claim                 lower (1−α) bound of q  >  q_claim               one
exponent_equals     |q − q₀| ≤ tol              two-sided (1−α) CI misses [q₀ − tol, q₀ + tol]   two
constant_below      C ≤ bound                   lower (1−α) bound of C  >  bound                 one
slope_zero          |q| ≤ tol                   two-sided (1−α) CI misses [−tol, tol]            two
fit_adequate        the law fits within noise   F lack-of-fit p-value < α                        one
==================  ==========================  ==============================================  =========

The intervals come from the fit (:mod:`transformer_limits.verify.stats`).  The default for a
power-law fit is ``"conservative"``: the union of the seed-bootstrap percentile interval and the OLS
t-interval, so a check fails only when both methods reject and its false-failure rate is at most α
whenever either method is valid.  ``method="percentile"``, ``"bca"`` or ``"t"`` select one.  Measured
false-failure rates of each combination are tabulated in docs/verification.md.  Each verdict returns a
:class:`Check` — a JSON-serialisable record with the interval, the statistics and a note.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from transformer_limits.jsonable import jsonable
from transformer_limits.verify.rate.claims import RateClaim, parse_rate_claim
from transformer_limits.verify.stats.estimate import one_sided_p_value
from transformer_limits.verify.stats.multi_term import MultiTermFit
from transformer_limits.verify.stats.power import POWER_THRESHOLD, bound_power, seeds_factor, two_sided_power
from transformer_limits.verify.stats.power_law import PowerLawFit

__all__ = [
    "CHECK_STATES",
    "Check",
    "attach_power",
    "bonferroni_family",
    "rate_at_least",
    "exponent_equals",
    "constant_below",
    "slope_zero",
    "fit_adequate",
]

DEFAULT_ALPHA = 0.01
#: a check's verdict: contradicted, decided (power >= POWER_THRESHOLD) or not decided
CHECK_STATES = ("pass", "inconclusive", "fail")


@dataclass
class Check:
    """The outcome of one verdict.

    ``claim``: the claim in words/symbols; ``expected``: the claimed value (exponent, bound);
    ``measured``: the point estimate; ``ci``: the interval the decision used, ``(low, high)`` with
    ``±inf`` for the open side of a one-sided test (``null`` in JSON); ``passed``: the test did not
    reject the claim (not contradicted); ``statistics``: the test's numbers, always including
    ``alpha`` (= the false-failure rate), ``sides`` and ``method``; ``power``: the probability that
    the check fails when the truth is the declared ``alternative`` (a violation of the claim of a
    stated size, in words), computed from the same data (``transformer_limits.verify.stats.power``);
    None when not stated.  :attr:`state` is the verdict: ``fail`` (contradicted), ``pass`` (not
    contradicted, power >= 0.8) or ``inconclusive`` (not contradicted, power below 0.8 or unstated).
    """

    name: str
    claim: str
    expected: float | None
    measured: float
    ci: tuple[float, float]
    passed: bool
    statistics: dict = field(default_factory=dict)
    note: str = ""
    power: float | None = None
    alternative: str = ""

    @property
    def false_failure_rate(self) -> float:
        return float(self.statistics.get("alpha", float("nan")))

    @property
    def state(self) -> str:
        """``fail`` when the data contradict the claim; ``pass`` when they do not and the check had
        power >= ``POWER_THRESHOLD`` (0.8, ``transformer_limits.verify.stats.power``) against its
        alternative; ``inconclusive`` otherwise (the data could not have said no)."""
        if not self.passed:
            return "fail"
        if self.power is not None and self.power >= POWER_THRESHOLD:
            return "pass"
        return "inconclusive"

    def to_dict(self) -> dict[str, Any]:
        return jsonable(dict(asdict(self), state=self.state))  # ±inf and NaN become null

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Check":
        low, high = data["ci"]
        ci = (-math.inf if low is None else float(low), math.inf if high is None else float(high))
        power = data.get("power")
        return cls(data["name"], data["claim"], data.get("expected"), float(data["measured"]), ci,
                   bool(data["passed"]), dict(data.get("statistics", {})), data.get("note", ""),
                   None if power is None else float(power), data.get("alternative", ""))

    def __str__(self) -> str:
        low, high = self.ci
        power = "power not stated" if self.power is None else f"power {self.power:.2f}"
        return (f"{self.state.upper()} {self.name}: {self.claim}; measured {self.measured:.4g}, "
                f"CI [{low:.4g}, {high:.4g}] ({self.statistics.get('sides', '?')}, "
                f"alpha={self.statistics.get('alpha', float('nan')):g}, {power})"
                + (f" — {self.note}" if self.note else ""))


def attach_power(check: Check, power: float, alternative: str, *, distance: float | None = None,
                 half_width: float | None = None, se: float | None = None, model: str = "shift") -> Check:
    """Record ``power`` against ``alternative`` (words) on ``check`` (in place; returned).

    With the numbers of the deciding bound (``distance`` of the alternative beyond the threshold, the
    bound's ``half_width`` and the standard error ``se``), a check that stays below the threshold
    also records ``seeds_factor`` (how many times the seeds would reach it) and a note saying so."""
    if not (isinstance(power, (int, float)) and 0.0 <= power <= 1.0):
        raise ValueError(f"power must be a number in [0, 1], got {power!r}")
    check.power, check.alternative = float(power), alternative
    check.statistics.update(power=float(power), power_model=model)
    if distance is not None and half_width is not None and se is not None:
        factor = seeds_factor(distance, half_width, se)
        check.statistics["seeds_factor_for_power"] = factor
        if check.passed and power < POWER_THRESHOLD:
            more = (f"about {factor:.1f}x the seeds (or more levels, longer runs) would reach {POWER_THRESHOLD:g}"
                    if math.isfinite(factor) else "no number of seeds reaches it at this design")
            check.note = "; ".join(x for x in (check.note, f"inconclusive: power {power:.2f} < "
                                                            f"{POWER_THRESHOLD:g} against {alternative}; {more}") if x)
    elif check.passed and power < POWER_THRESHOLD:
        check.note = "; ".join(x for x in (check.note, f"inconclusive: power {power:.2f} < {POWER_THRESHOLD:g} "
                                                        f"against {alternative}") if x)
    return check


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")


def _method(fit: Any, method: str | None) -> str:
    return method or fit.method


def _base_statistics(fit: Any, alpha: float, sides: str, method: str, estimate: Any) -> dict[str, Any]:
    stats_ = {
        "alpha": alpha,
        "false_failure_rate": alpha,
        "sides": sides,
        "method": method,
        "standard_error": estimate.standard_error,
        "n_boot": fit.settings.get("n_boot"),
        "n_seeds": fit.settings.get("n_seeds"),
        "fit_quality": fit.quality.to_dict(),
    }
    if isinstance(fit, PowerLawFit):
        stats_["param"] = fit.param
        stats_["window"] = fit.window.to_dict()
        stats_["local_orders"] = [float(q) for q in fit.local_orders.orders]
    return stats_


def _claim_exponent(fit: PowerLawFit, claimed: float | str | RateClaim) -> tuple[float, str]:
    """The claimed exponent of ``fit.param`` and a text for the Check."""
    if isinstance(claimed, str):
        claimed = parse_rate_claim(claimed)
    if isinstance(claimed, RateClaim):
        param = fit.param
        if param not in claimed.parameters and len(claimed.parameters) == 1:
            param = claimed.parameters[0]  # a fit of unnamed levels against a one-parameter claim
        term = claimed.leading_term(param)
        if term.log_powers.get(param):
            # a power-law fit of log(p)^k p^q data has a finite-range slope q + k/log p, not q:
            # testing it against q would fail true claims
            raise ValueError(
                f"claimed: the slowest term of {claimed.expression()!r} in {param} has a log factor; "
                f"divide the errors by log({param})^{term.log_powers[param]} and claim the pure power, "
                "or fit the claim with fit_rate_claim")
        q = claimed.leading_exponent(param)
        return float(q), f"{claimed.expression()} (slowest term in {param}: {param}^{q})"
    return float(claimed), f"err ~ {fit.param}^{float(claimed):g}"


def _require_power_law(fit: Any, verdict: str) -> None:
    if not isinstance(fit, PowerLawFit):
        raise ValueError(f"fit must be a PowerLawFit (from fit_power_law) for {verdict}, got {type(fit).__name__}")


def rate_at_least(fit: PowerLawFit, claimed_exponent: float | str | RateClaim, alpha: float = DEFAULT_ALPHA,
                  *, method: str | None = None, alternative: float | None = None) -> Check:
    """"The error decays at least as fast as p^q_claim": one-sided test of H0 q ≤ q_claim.

    Fails only when the measured decay is significantly *shallower* than claimed, i.e. the lower
    (1 − α) confidence bound of the fitted slope q lies above q_claim (q_claim < 0).  False-failure rate
    ≤ α (one-sided), attained when the true exponent equals the claim.  ``claimed_exponent`` may be a
    number, a claim string or a :class:`RateClaim` (its :meth:`~RateClaim.leading_exponent` in
    ``fit.param`` is used).  ``alternative``: an exponent q₁ > q_claim (a slower decay) the check must
    detect; its power against q₁ is recorded (:func:`~transformer_limits.verify.attach_power`,
    shift model).
    """
    _require_power_law(fit, "rate_at_least")
    _check_alpha(alpha)
    q_claim, text = _claim_exponent(fit, claimed_exponent)
    method = _method(fit, method)
    low, high = fit.exponent.interval(1 - alpha, "lower", method)
    passed = low <= q_claim
    st = _base_statistics(fit, alpha, "one-sided (lower bound of q)", method, fit.exponent)
    st.update(h0=f"q <= {q_claim:g}", margin=q_claim - low,
              p_value=one_sided_p_value(fit.exponent, q_claim, method))
    note = ("" if passed else
            f"decay significantly slower than claimed: q >= {low:.3g} > {q_claim:g} with confidence {1 - alpha:g}")
    check = Check("rate_at_least", text, q_claim, fit.exponent.value, (low, high), passed, st, note)
    if alternative is not None:
        q1 = float(alternative)
        if not q1 > q_claim:
            raise ValueError(f"alternative must be an exponent slower than the claim {q_claim:g}, got {q1!r}")
        d, h, se = q1 - q_claim, fit.exponent.value - low, fit.exponent.standard_error
        attach_power(check, bound_power(d, h, se), f"q = {q1:g} (a decay slower than claimed)", distance=d,
                     half_width=h, se=se)
    return check


def _two_sided(fit: PowerLawFit, name: str, text: str, expected: float, alpha: float, tolerance: float,
               method: str | None, alternative: float | None = None) -> Check:
    _check_alpha(alpha)
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    method = _method(fit, method)
    low, high = fit.exponent.interval(1 - alpha, "two-sided", method)
    passed = low <= expected + tolerance and high >= expected - tolerance
    st = _base_statistics(fit, alpha, "two-sided", method, fit.exponent)
    st.update(h0=f"|q - {expected:g}| <= {tolerance:g}", tolerance=tolerance,
              distance=max(0.0, low - expected - tolerance, expected - tolerance - high))
    notes = []
    if tolerance > 0:
        notes.append(f"tolerance {tolerance:g} declared for pre-asymptotic bias")
    if not passed:
        notes.append(f"CI [{low:.3g}, {high:.3g}] excludes [{expected - tolerance:.3g}, {expected + tolerance:.3g}]")
    check = Check(name, text, expected, fit.exponent.value, (low, high), passed, st, "; ".join(notes))
    if alternative is not None:
        offset = abs(float(alternative) - expected)
        if not offset > tolerance:
            raise ValueError(f"alternative must lie outside [{expected - tolerance:g}, {expected + tolerance:g}] "
                             f"(the accepted region), got {alternative!r}")
        q = fit.exponent.value
        h = (q - low, high - q)
        se = fit.exponent.standard_error
        attach_power(check, two_sided_power(offset, tolerance, h, se),
                     f"q = {expected - offset:g} or {expected + offset:g} (off the claim by {offset:g})",
                     distance=offset - tolerance, half_width=max(h), se=se)
    return check


def exponent_equals(fit: PowerLawFit, expected: float | str | RateClaim, alpha: float = DEFAULT_ALPHA, *,
                    tolerance: float = 0.0, method: str | None = None, alternative: float | None = None) -> Check:
    """"The exponent is q₀": two-sided test of H0 ``|q − q₀| ≤ tolerance``.

    Passes when the two-sided (1 − α) CI of q meets [q₀ − tol, q₀ + tol].  ``tolerance`` is an explicit
    allowance for pre-asymptotic bias (0 by default: a plain CI test).  False-failure rate ≤ α
    (two-sided; α/2 per side at the boundary).  ``alternative``: an exponent q₁ outside the accepted
    region; the power against ``q₀ ± |q₁ − q₀|`` (the smaller side) is recorded.
    """
    _require_power_law(fit, "exponent_equals")
    q0, text = _claim_exponent(fit, expected)
    return _two_sided(fit, "exponent_equals", text, q0, alpha, tolerance, method, alternative)


def slope_zero(fit: PowerLawFit, alpha: float = DEFAULT_ALPHA, *, tolerance: float = 0.0,
               method: str | None = None, alternative: float | None = None) -> Check:
    """"The error does not depend on p" (e.g. N-independence of a sup-over-inputs error): two-sided
    test of H0 ``|q| ≤ tolerance`` on the log-log slope.  False-failure rate ≤ α (two-sided).
    ``alternative``: a slope outside ``[−tol, tol]`` whose power is recorded (both signs)."""
    _require_power_law(fit, "slope_zero")
    return _two_sided(fit, "slope_zero", f"err independent of {fit.param} (slope 0)", 0.0, alpha, tolerance,
                      method, alternative)


def constant_below(fit: PowerLawFit | MultiTermFit, bound: float, alpha: float = DEFAULT_ALPHA, *,
                   coefficient: str | None = None, method: str | None = None,
                   alternative: float | None = None) -> Check:
    """"The constant is at most ``bound``" (a derived bound such as 16 K₂K₃(4T+T²)e^{...}): one-sided
    test of H0 C ≤ bound; fails when the lower (1 − α) confidence bound of C exceeds ``bound``.

    ``coefficient``: ``"constant"`` (default) for a power-law fit (C = error at p = 1), a coefficient
    name for a multi-term fit (may be omitted when the claim has one term).  False-failure rate ≤ α
    (one-sided).  ``alternative``: a factor > 1; the power against C = factor × bound is recorded (on
    the log scale: log C is what the bootstrap and the t interval are near-normal in).
    """
    _check_alpha(alpha)
    if not (isinstance(bound, (int, float, np.floating)) and math.isfinite(bound) and bound > 0):
        raise ValueError(f"bound must be a finite positive number (constants are >= 0), got {bound!r}")
    if coefficient is None:
        if isinstance(fit, MultiTermFit):
            if len(fit.constants) != 1:
                raise ValueError(f"coefficient is required: the claim has constants {sorted(fit.constants)}")
            coefficient = next(iter(fit.constants))
        else:
            coefficient = "constant"
    estimate = fit.estimate(coefficient)
    method = _method(fit, method)
    low, high = estimate.interval(1 - alpha, "lower", method)
    passed = low <= bound
    st = _base_statistics(fit, alpha, f"one-sided (lower bound of {coefficient})", method, estimate)
    st.update(h0=f"{coefficient} <= {bound:g}", coefficient=coefficient,
              p_value=one_sided_p_value(estimate, float(bound), method))
    note = "" if passed else f"{coefficient} >= {low:.3g} > bound {bound:g} with confidence {1 - alpha:g}"
    check = Check("constant_below", f"{coefficient} <= {bound:g}", float(bound), estimate.value, (low, high),
                  passed, st, note)
    if alternative is not None:
        factor = float(alternative)
        if not (math.isfinite(factor) and factor > 1):
            raise ValueError(f"alternative must be a factor > 1 (C = factor × bound), got {alternative!r}")
        boot = estimate.bootstrap
        positive = boot[np.isfinite(boot) & (boot > 0)] if boot is not None else np.empty(0)
        se_log = float(np.std(np.log(positive), ddof=1)) if positive.size > 1 else \
            float(estimate.se) if estimate.log_scale and estimate.se is not None else float("nan")
        h = math.log(estimate.value) - math.log(low) if low > 0 and estimate.value > 0 else math.inf
        d = math.log(factor)
        power = bound_power(d, h, se_log) if math.isfinite(se_log) else 0.0
        attach_power(check, power, f"{coefficient} = {factor:g} × {bound:g}", distance=d, half_width=h,
                     se=se_log if math.isfinite(se_log) else math.inf)
    return check


def fit_adequate(fit: PowerLawFit | MultiTermFit, alpha: float = DEFAULT_ALPHA) -> Check:
    """"The fitted law describes the data within seed noise": lack-of-fit F test of the log residuals
    against the pooled seed noise (see :class:`~transformer_limits.verify.stats.fit_quality.FitQuality`).

    Fails when the p-value is below α — a missing term in a multi-term claim, a wrong exponent, or
    pre-asymptotic / plateau levels inside the window.  False-failure rate ≈ α (F approximation for
    log-normal-ish noise).  ``measured`` is the F statistic, ``ci`` is ``(0, F_{dof, dof_noise; 1−α})``.
    """
    _check_alpha(alpha)
    q = fit.quality
    if not math.isfinite(q.f_statistic):
        raise ValueError("fit has no bootstrap (n_seeds < 2) or no residual degrees of freedom: "
                         "fit_adequate cannot be decided")
    critical = float(stats.f.ppf(1 - alpha, q.dof, q.dof_noise))
    passed = q.p_value >= alpha
    st = {"alpha": alpha, "false_failure_rate": alpha, "sides": "one-sided (upper tail of F)",
          "method": "F lack-of-fit", "dof": q.dof, "dof_noise": q.dof_noise, "p_value": q.p_value,
          "fit_quality": q.to_dict(), "n_boot": fit.settings.get("n_boot"), "n_seeds": fit.settings.get("n_seeds")}
    text = fit.claim.expression() if isinstance(fit, MultiTermFit) else f"err ~ C {fit.param}^q"
    note = "" if passed else (f"residuals exceed seed noise (F={q.f_statistic:.3g} > {critical:.3g}, "
                              f"max |relative residual| {q.max_abs_relative_residual:.2%})")
    return Check("fit_adequate", text, None, q.f_statistic, (0.0, critical), passed, st, note)


def bonferroni_family(name: str, claim: str, expected: float | None, members: list[Check], alpha: float,
                      sides: str, labels: list[str]) -> Check:
    """One check from a family of member checks each made at level ``alpha / len(members)``
    (Bonferroni): it fails when any member fails (family-wise false-failure rate ≤ ``alpha``).
    ``measured`` and ``ci`` are those of the member closest to rejecting (the largest lower bound);
    its power against "one member violated" is the smallest member power (None when a member
    states none), against the members' alternative."""
    from transformer_limits.verify.stats.power import family_power

    if not members or len(members) != len(labels):
        raise ValueError("members and labels must be non-empty and of equal length")
    _check_alpha(alpha)
    passed = all(c.passed for c in members)
    worst = max(range(len(members)), key=lambda k: members[k].ci[0])
    st = {"alpha": alpha, "false_failure_rate": alpha, "sides": sides,
          "method": members[worst].statistics.get("method"), "alpha_per_member": alpha / len(members),
          "worst_member": labels[worst], "members": {lab: c.to_dict() for lab, c in zip(labels, members)}}
    note = "" if passed else "; ".join(f"{lab}: {c.note}" for lab, c in zip(labels, members) if not c.passed)
    check = Check(name, claim, expected, members[worst].measured, members[worst].ci, passed, st, note)
    powers = [c.power for c in members if c.power is not None]
    if len(powers) == len(members):
        weakest = min(range(len(members)), key=powers.__getitem__)
        w = members[weakest].statistics
        attach_power(check, family_power(powers), members[weakest].alternative + " (any one member)")
        check.statistics["weakest_member"] = labels[weakest]
        if "seeds_factor_for_power" in w:
            check.statistics["seeds_factor_for_power"] = w["seeds_factor_for_power"]
    return check
