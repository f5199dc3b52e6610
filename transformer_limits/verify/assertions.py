"""``assert_rate``: put a rate claim in a pytest test.

::

    from transformer_limits.verify.assertions import assert_rate

    def test_euler_rate():
        L = 2 ** np.arange(3, 10)
        errors = np.stack([run_error(L_i, seeds=range(16)) for L_i in L])   # (n_levels, n_seeds)
        assert_rate({"L": L}, errors, "L^-1")            # rate at least L^-1, false-failure rate 1 %

On failure it raises ``AssertionError`` with a table of levels, errors, local orders, the fitted
exponent with its CI and the verdict; on success it returns the :class:`~transformer_limits.verify.verdicts.Check`.
A check that is not contradicted but had power below 0.8 against its alternative (an exponent
``alternative`` away from the claim) is INCONCLUSIVE: an :class:`InconclusiveWarning` by default,
an ``AssertionError`` with ``strict=True`` (as ``--strict`` on the command line).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.verify.rate.claims import RateClaim, parse_rate_claim
from transformer_limits.verify.stats.power_law import PowerLawFit, fit_power_law
from transformer_limits.verify.verdicts import Check, exponent_equals, rate_at_least, slope_zero

__all__ = ["InconclusiveWarning", "assert_rate", "enforce_rate", "format_rate_table", "rate_verdict"]

CHECKS = ("at_least", "equals", "zero")
#: the violation assert_rate must detect by default: an exponent this far from the claim
DEFAULT_ALTERNATIVE = 0.25


class InconclusiveWarning(UserWarning):
    """A rate assertion that the data did not contradict, with power below 0.8 against its alternative."""


def format_rate_table(fit: PowerLawFit, check: Check | None = None) -> str:
    """Readable account of a power-law fit (and of a verdict on it): one row per level with its
    p, aggregate error, local order from the previous level with bootstrap interval, and whether the
    level was in the fitting window (or why not)."""
    lo_conf = fit.confidence
    orders = fit.local_orders
    header = f"{'level':>5}  {fit.param:>10}  {'error':>10}  {'local order [' + f'{lo_conf:.0%}' + ' CI]':>28}  used"
    lines = [header]
    for i, (p, e) in enumerate(zip(fit.params, fit.level_errors)):
        if i == 0:
            order = ""
        elif np.isfinite(orders.low[i - 1]):
            order = f"{orders.orders[i - 1]:7.3f} [{orders.low[i - 1]:7.3f}, {orders.high[i - 1]:7.3f}]"
        else:
            order = f"{orders.orders[i - 1]:7.3f}"
        used = "yes" if i in fit.window.used else "no: " + fit.window.excluded.get(i, "")
        lines.append(f"{i:>5}  {p:>10.6g}  {e:>10.4g}  {order:>28}  {used}")
    settings = fit.settings
    lines.append(
        f"fitted exponent q = {fit.exponent.value:.4g} (OLS of log error on log {fit.param} over levels "
        f"{list(fit.window.used)}; {settings.get('n_seeds')} seeds, {settings.get('n_boot')} bootstrap "
        f"resamples, aggregate {settings.get('aggregate')}, resample {settings.get('resample')})"
    )
    for method in ("conservative", "percentile", "bca", "t"):
        try:
            low, high = fit.exponent.interval(fit.confidence, "two-sided", method)
        except ValueError:
            continue
        lines.append(f"  {fit.confidence:.0%} CI of q ({method}): [{low:.4g}, {high:.4g}]")
    q = fit.quality
    lines.append(f"fit quality: max |relative residual| {q.max_abs_relative_residual:.3%}, "
                 f"lack-of-fit F {q.f_statistic:.3g} on ({q.dof}, {q.dof_noise}) dof (p = {q.p_value:.3g})")
    lines.extend("window: " + r for r in fit.window.reasons)
    if check is not None:
        low, high = check.ci
        lines.append(f"verdict {check.name}: {check.state.upper()} — claim {check.claim}; "
                     f"{check.statistics.get('h0', '')}; CI used [{low:.4g}, {high:.4g}] "
                     f"({check.statistics.get('sides')}, {check.statistics.get('method')}); "
                     f"false-failure rate {check.false_failure_rate:g}")
        if check.power is not None:
            lines.append(f"  power {check.power:.2f} against {check.alternative}")
        if check.note:
            lines.append("  " + check.note)
    return "\n".join(lines)


def assert_rate(
    params: Any,
    errors: Any,
    claim: str | RateClaim | float,
    *,
    param: str | None = None,
    check: str = "at_least",
    alpha: float = 0.01,
    tolerance: float = 0.0,
    alternative: float | None = None,
    strict: bool = False,
    **fit_options: Any,
) -> Check:
    """Assert that errors over one refinement parameter obey ``claim``.

    ``params``: shape ``(n_levels,)`` or ``{"L": values}``; ``errors``: shape ``(n_levels, n_seeds)``.
    ``claim``: a claim string (``"L^-1 + L^-1/3 H^-1/2"``), a :class:`RateClaim` — its slowest claimed
    exponent in ``param`` is tested — or a number (the exponent).  ``check``: ``"at_least"``
    (:func:`~transformer_limits.verify.verdicts.rate_at_least`, one-sided), ``"equals"``
    (:func:`~transformer_limits.verify.verdicts.exponent_equals` with ``tolerance``, two-sided) or
    ``"zero"`` (:func:`~transformer_limits.verify.verdicts.slope_zero`; ``claim`` is ignored, may be 0).
    The check fails a true claim with probability ≤ ``alpha``.  ``fit_options`` go to
    :func:`~transformer_limits.verify.stats.power_law.fit_power_law` (``noise_floor``, ``window``, ``n_boot``,
    ``seed``, ``method``, ``resample``, ``aggregate``, window rules).  ``alternative``: the exponent
    distance a > 0 of the violation to detect (default ``max(0.25, 2 × tolerance)``): q_claim + a for
    ``at_least``, q_claim ± a for ``equals`` and ±a for ``zero``; its power is on the Check.

    Returns the :class:`Check`; raises ``AssertionError`` with a table when it fails (or, with
    ``strict``, when it is INCONCLUSIVE; else it warns with
    :class:`~transformer_limits.verify.InconclusiveWarning`).
    """
    fit, result, _ = rate_verdict(params, errors, claim, param=param, check=check, alpha=alpha,
                                  tolerance=tolerance, alternative=alternative, **fit_options)
    return enforce_rate(fit, result, strict=strict, stacklevel=3)


def rate_verdict(params: Any, errors: Any, claim: str | RateClaim | float, *, param: str | None = None,
                 check: str = "at_least", alpha: float = 0.01, tolerance: float = 0.0,
                 alternative: float | None = None, **fit_options: Any) -> tuple[PowerLawFit, Check, float | None]:
    """The fit, the :class:`Check` and the claimed exponent (None for ``check="zero"``) that
    :func:`assert_rate` decides on, without deciding (same arguments; the report of
    ``pytest --tl-report`` draws the fit)."""
    if check not in CHECKS:
        raise ValueError(f"check must be one of {', '.join(CHECKS)}; got {check!r}")
    distance = max(DEFAULT_ALTERNATIVE, 2 * tolerance) if alternative is None else float(alternative)
    if not (np.isfinite(distance) and distance > 0):
        raise ValueError(f"alternative must be a finite exponent distance > 0, got {alternative!r}")
    if isinstance(params, dict) and len(params) == 1 and param is None:
        param = next(iter(params))
    if isinstance(claim, str):
        claim = parse_rate_claim(claim)
    if isinstance(claim, RateClaim):
        if param is None:
            if len(claim.parameters) != 1:
                raise ValueError(f"param is required: claim {claim.expression()!r} has parameters "
                                 f"{list(claim.parameters)}")
            param = claim.parameters[0]
        expected = float(claim.leading_exponent(param))
    else:
        expected = float(claim)
    if isinstance(params, dict):
        params = {param: params[param]} if param in params else params
    fit = fit_power_law(params, errors, param=param, expected=None if check == "zero" else expected,
                        **fit_options)
    if check == "at_least":
        result = rate_at_least(fit, claim, alpha, alternative=expected + distance)
    elif check == "equals":
        result = exponent_equals(fit, claim, alpha, tolerance=tolerance, alternative=expected + distance)
    else:
        result = slope_zero(fit, alpha, tolerance=tolerance, alternative=distance)
    return fit, result, None if check == "zero" else expected


def enforce_rate(fit: PowerLawFit, result: Check, *, strict: bool = False, stacklevel: int = 2) -> Check:
    """:func:`assert_rate`'s decision on a verdict: ``AssertionError`` with the table when it failed (or,
    with ``strict``, when it is INCONCLUSIVE), an :class:`InconclusiveWarning` (at ``stacklevel``) when it
    is INCONCLUSIVE, else ``result``."""
    import warnings

    if not result.passed:
        raise AssertionError("rate claim failed\n" + format_rate_table(fit, result))
    if result.state == "inconclusive":
        text = "rate claim inconclusive (not contradicted, too little power)\n" + format_rate_table(fit, result)
        if strict:
            raise AssertionError(text)
        warnings.warn(text, InconclusiveWarning, stacklevel=stacklevel)
    return result
