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
from transformer_limits.verify.rate_claims import RateClaim, parse_rate_claim
from transformer_limits.verify.stats.estimate import one_sided_p_value
from transformer_limits.verify.stats.multi_term import MultiTermFit
from transformer_limits.verify.stats.power_law import PowerLawFit

__all__ = [
    "Check",
    "rate_at_least",
    "exponent_equals",
    "constant_below",
    "slope_zero",
    "fit_adequate",
]

DEFAULT_ALPHA = 0.01


@dataclass
class Check:
    """The outcome of one verdict.

    ``claim``: the claim in words/symbols; ``expected``: the claimed value (exponent, bound);
    ``measured``: the point estimate; ``ci``: the interval the decision used, ``(low, high)`` with
    ``±inf`` for the open side of a one-sided test (``null`` in JSON); ``statistics``: the test's
    numbers, always including ``alpha`` (= the false-failure rate), ``sides`` and ``method``.
    """

    name: str
    claim: str
    expected: float | None
    measured: float
    ci: tuple[float, float]
    passed: bool
    statistics: dict = field(default_factory=dict)
    note: str = ""

    @property
    def false_failure_rate(self) -> float:
        return float(self.statistics.get("alpha", float("nan")))

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))  # ±inf and NaN become null

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Check":
        low, high = data["ci"]
        ci = (-math.inf if low is None else float(low), math.inf if high is None else float(high))
        return cls(data["name"], data["claim"], data.get("expected"), float(data["measured"]), ci,
                   bool(data["passed"]), dict(data.get("statistics", {})), data.get("note", ""))

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        low, high = self.ci
        return (f"{verdict} {self.name}: {self.claim}; measured {self.measured:.4g}, "
                f"CI [{low:.4g}, {high:.4g}] ({self.statistics.get('sides', '?')}, "
                f"alpha={self.statistics.get('alpha', float('nan')):g})" + (f" — {self.note}" if self.note else ""))


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
                  *, method: str | None = None) -> Check:
    """"The error decays at least as fast as p^q_claim": one-sided test of H0 q ≤ q_claim.

    Fails only when the measured decay is significantly *shallower* than claimed, i.e. the lower
    (1 − α) confidence bound of the fitted slope q lies above q_claim (q_claim < 0).  False-failure rate
    ≤ α (one-sided), attained when the true exponent equals the claim.  ``claimed_exponent`` may be a
    number, a claim string or a :class:`RateClaim` (its :meth:`~RateClaim.leading_exponent` in
    ``fit.param`` is used).
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
    return Check("rate_at_least", text, q_claim, fit.exponent.value, (low, high), passed, st, note)


def _two_sided(fit: PowerLawFit, name: str, text: str, expected: float, alpha: float, tolerance: float,
               method: str | None) -> Check:
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
    return Check(name, text, expected, fit.exponent.value, (low, high), passed, st, "; ".join(notes))


def exponent_equals(fit: PowerLawFit, expected: float | str | RateClaim, alpha: float = DEFAULT_ALPHA, *,
                    tolerance: float = 0.0, method: str | None = None) -> Check:
    """"The exponent is q₀": two-sided test of H0 ``|q − q₀| ≤ tolerance``.

    Passes when the two-sided (1 − α) CI of q meets [q₀ − tol, q₀ + tol].  ``tolerance`` is an explicit
    allowance for pre-asymptotic bias (0 by default: a plain CI test).  False-failure rate ≤ α
    (two-sided; α/2 per side at the boundary).
    """
    _require_power_law(fit, "exponent_equals")
    q0, text = _claim_exponent(fit, expected)
    return _two_sided(fit, "exponent_equals", text, q0, alpha, tolerance, method)


def slope_zero(fit: PowerLawFit, alpha: float = DEFAULT_ALPHA, *, tolerance: float = 0.0,
               method: str | None = None) -> Check:
    """"The error does not depend on p" (e.g. N-independence of a sup-over-inputs error): two-sided
    test of H0 ``|q| ≤ tolerance`` on the log-log slope.  False-failure rate ≤ α (two-sided)."""
    _require_power_law(fit, "slope_zero")
    return _two_sided(fit, "slope_zero", f"err independent of {fit.param} (slope 0)", 0.0, alpha, tolerance,
                      method)


def constant_below(fit: PowerLawFit | MultiTermFit, bound: float, alpha: float = DEFAULT_ALPHA, *,
                   coefficient: str | None = None, method: str | None = None) -> Check:
    """"The constant is at most ``bound``" (a derived bound such as 16 K₂K₃(4T+T²)e^{...}): one-sided
    test of H0 C ≤ bound; fails when the lower (1 − α) confidence bound of C exceeds ``bound``.

    ``coefficient``: ``"constant"`` (default) for a power-law fit (C = error at p = 1), a coefficient
    name for a multi-term fit (may be omitted when the claim has one term).  False-failure rate ≤ α
    (one-sided).
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
    return Check("constant_below", f"{coefficient} <= {bound:g}", float(bound), estimate.value, (low, high),
                 passed, st, note)


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
