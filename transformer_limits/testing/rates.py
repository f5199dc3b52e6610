"""``assert_rate`` for the testing API: :func:`transformer_limits.verify.assertions.assert_rate`, whose
verdicts (pass, inconclusive or fail) ``pytest --tl-report`` collects.

The decision is that of ``verify.assertions.assert_rate``, written once there: the verdict
(:func:`~transformer_limits.verify.assertions.rate_verdict`, which also hands back the fit the
report draws) and what is done with it (:func:`~transformer_limits.verify.assertions.enforce_rate`:
raise, warn or return).  Only the recording is added here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.testing.recording import AssertionRecord, record_safely
from transformer_limits.verify import assertions as _verify_assertions
from transformer_limits.verify.assertions import enforce_rate, format_rate_table, rate_verdict
from transformer_limits.verify.rate.claims import RateClaim
from transformer_limits.verify.stats.power_law import PowerLawFit
from transformer_limits.verify.verdicts import Check

__all__ = ["assert_rate", "rate_verdict"]

#: verify's assert_rate as imported here (the plugin may route verify's name through this module)
_verify_assert_rate = _verify_assertions.assert_rate


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
    """Assert that errors over one refinement parameter obey ``claim``:
    :func:`transformer_limits.verify.assert_rate` (same arguments, same decision, same
    ``AssertionError`` table and :class:`~transformer_limits.verify.InconclusiveWarning`), with the
    verdict collected by ``pytest --tl-report``.

    ``params``: shape ``(n_levels,)`` or ``{"L": values}``; ``errors``: shape ``(n_levels, n_seeds)``;
    ``claim``: a claim string (``"L^-1 + L^-1/3 H^-1/2"``; its slowest exponent in ``param`` is
    tested), a :class:`~transformer_limits.verify.RateClaim` or an exponent; ``check``:
    ``"at_least"``, ``"equals"`` (with ``tolerance``) or ``"zero"``; false-failure rate ``alpha``;
    ``alternative``: the exponent distance of the violation whose power the Check states (default
    ``max(0.25, 2 × tolerance)``); ``fit_options`` go to
    :func:`~transformer_limits.verify.fit_power_law`.  Returns the
    :class:`~transformer_limits.verify.Check`.
    """
    fit, result, expected = rate_verdict(params, errors, claim, param=param, check=check, alpha=alpha,
                                         tolerance=tolerance, alternative=alternative, **fit_options)
    record_safely("assert_rate", lambda: _record(fit, result, expected))
    return enforce_rate(fit, result, strict=strict, stacklevel=3)  # warnings point at the caller


def _record(fit: PowerLawFit, check: Check, expected: float | None) -> AssertionRecord:
    """The report's view of one rate assertion: the Check, the fit it was decided on and its figure."""
    table = [{"level": i, fit.param: float(p), "error": float(e),
              "local_order": None if i == 0 else float(fit.local_orders.orders[i - 1]),
              "used": i in fit.window.used} for i, (p, e) in enumerate(zip(fit.params, fit.level_errors))]
    errs = np.asarray(fit.errors, dtype=np.float64)

    def figure(name: str) -> Any:
        from transformer_limits.verify.rate.plots import RateSeries, rate_figure

        series = RateSeries("errors", fit.params, errs, fit, claimed_exponent=expected)
        return rate_figure(name, f"Errors vs {fit.param} (log-log), the fit over its window and the claimed "
                                 "slope (dashed).", [series], xlabel=fit.param)

    return AssertionRecord("assert_rate", check, table, fit.to_dict(), figure, [format_rate_table(fit, check)])
