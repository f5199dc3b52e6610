"""``assert_taylor_rate``: a derivative is right when its Taylor remainder has the right order.

If ``jvp = Df(x)[dx]`` (and ``hvp = D²f(x)[dx, dx]``), the remainders

    R_1(h) = ‖f(x + h dx) − f(x) − h·jvp‖                = O(h²),
    R_2(h) = ‖f(x + h dx) − f(x) − h·jvp − (h²/2)·hvp‖   = O(h³),

while a wrong ``jvp`` leaves ``R_1(h) ≈ h ‖Df(x)[dx] − jvp‖``, one order too slow (a wrong ``hvp``
likewise leaves ``R_2 = O(h²)``).  The remainders come from
:func:`~transformer_limits.verify.taylor.taylor_test` on the steps ``h_i = h0 · factor^i``; the
verdict is :func:`~transformer_limits.verify.verdicts.rate_at_least` on a
:func:`~transformer_limits.verify.stats.power_law.fit_power_law` of ``log R`` on ``log(1/h)``
(``R ≈ C (1/h)^q``, so ``q = −order``), the same decision as
:func:`~transformer_limits.verify.assertions.assert_rate`, with its power against a remainder one order
too slow.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np

from transformer_limits.testing.recording import AssertionRecord, record_safely, recording_active
from transformer_limits.verify.assertions import InconclusiveWarning
from transformer_limits.verify.stats.power_law import PowerLawFit, fit_power_law
from transformer_limits.verify.taylor import TaylorResult, taylor_test
from transformer_limits.verify.verdicts import Check, attach_power, rate_at_least

__all__ = ["assert_taylor_rate", "format_taylor_table"]

#: a Taylor term: an array of the shape of f(x), or a callable ``(x, dx) -> array`` returning one
Term = Any


def _term(value: Term, name: str, x: np.ndarray, dx: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` (an array, or a callable of (x, dx)) as a float64 array of the shape of f(x)."""
    out = np.asarray(value(x, dx) if callable(value) else value, dtype=np.float64)
    if out.shape != shape:
        # broadcasting would hide a jvp of the wrong shape (e.g. a gradient instead of a JVP)
        raise ValueError(f"{name} must have the shape of f(x), {shape}, got {out.shape}")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} must be finite")
    return out


def _check_options(order: int, alpha: float, tolerance: float, alternative: float | None, h0: float,
                   levels: int, factor: float, floor_factor: float) -> float:
    """Validate the options; return the alternative remainder order (default ``order − 1``)."""
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order must be an integer >= 1 (the claimed remainder order), got {order!r}")
    if not (isinstance(alpha, (int, float)) and 0.0 < alpha < 0.5):
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if not (isinstance(tolerance, (int, float)) and 0.0 <= tolerance < 1.0):
        raise ValueError(f"tolerance must be in [0, 1) (an allowance on the order), got {tolerance!r}")
    if not (isinstance(h0, (int, float)) and math.isfinite(h0) and h0 > 0):
        raise ValueError(f"h0 must be a finite step > 0, got {h0!r}")
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 4:
        raise ValueError(f"levels must be an integer >= 4 (a fit with an interval needs 3 usable levels), "
                         f"got {levels!r}")
    if not (isinstance(factor, (int, float)) and 0.0 < factor < 1.0):
        raise ValueError(f"factor must be in (0, 1), got {factor!r}")
    if not (isinstance(floor_factor, (int, float)) and math.isfinite(floor_factor) and floor_factor > 0):
        raise ValueError(f"floor_factor must be a finite number > 0, got {floor_factor!r}")
    slow = order - 1.0 if alternative is None else alternative
    if not (isinstance(slow, (int, float)) and math.isfinite(slow) and slow < order - tolerance):
        raise ValueError(f"alternative must be a remainder order below order - tolerance = {order - tolerance:g}, "
                         f"got {alternative!r}")
    return float(slow)


def _remainder_text(n_terms: int, order: int) -> str:
    terms = "h·jvp" if n_terms == 1 else "h·jvp − (h²/2)·hvp"
    return f"|f(x + h dx) − f(x) − {terms}| = O(h^{order})"


def format_taylor_table(result: TaylorResult, kept: np.ndarray, fit: PowerLawFit | None, check: Check,
                        order: int) -> str:
    """Readable account of a Taylor-rate verdict: one row per step h with its remainder, the local
    order ``log(R(h_prev)/R(h)) / log(h_prev/h)`` from the previous step and whether the level was
    fitted (or why not), then the fitted order with its one-sided bound and the verdict."""
    used = set()
    excluded: dict[int, str] = {}
    if fit is not None:
        levels = np.flatnonzero(kept)  # fit level k is step levels[k] (steps fall, 1/h rises)
        used = {int(levels[k]) for k in fit.window.used}
        excluded = {int(levels[k]): why for k, why in fit.window.excluded.items()}
    lines = [f"{'h':>11}  {'remainder':>11}  {'local order':>11}  used"]
    for i, (h, r) in enumerate(zip(result.steps, result.remainders)):
        local = "" if i == 0 else f"{result.rates[i - 1]:11.4f}"
        if not kept[i]:
            status = "no: at the round-off floor"
        elif i in used:
            status = "yes"
        else:
            status = "no: " + excluded.get(i, "outside the window").replace("the window given by the caller",
                                                                                "the finest fit_levels levels")
        lines.append(f"{h:11.4g}  {r:11.4g}  {local:>11}  {status}")
    low_q = check.ci[0]
    if fit is not None:
        lines.append(f"fitted remainder order {-fit.exponent.value:.4g} (OLS of log remainder on log h over "
                     f"{len(fit.window.used)} levels, one direction: t-interval); one-sided "
                     f"{1 - check.false_failure_rate:.0%} upper bound of the order {-low_q:.4g}")
    lines.append(f"verdict {check.name}: {check.state.upper()} — claim {check.claim}; the order must not be "
                 f"significantly below {order:g} − tolerance {check.statistics.get('tolerance', 0):g}; "
                 f"false-failure rate {check.false_failure_rate:g} (t-model of the deviations from the line)")
    if check.power is not None:
        lines.append(f"  power {check.power:.2f} against {check.alternative}")
    if check.note:
        lines.append("  " + check.note)
    if not check.passed and fit is not None and abs(-fit.exponent.value - (order - 1)) < 0.3:
        lines.append(f"  a remainder of order {order - 1} means the term of order {order - 1} is wrong or missing "
                     f"({'jvp' if order == 2 else 'hvp' if order == 3 else 'a coefficient'} does not match f)")
    lines.extend("  " + note for note in result.notes)
    return "\n".join(lines)


def assert_taylor_rate(
    f: Callable[[np.ndarray], Any],
    x: Any,
    dx: Any,
    jvp: Term,
    *,
    order: int | None = None,
    hvp: Term | None = None,
    h0: float = 0.05,
    levels: int = 8,
    fit_levels: int = 5,
    factor: float = 0.5,
    alpha: float = 0.01,
    tolerance: float = 0.1,
    alternative: float | None = None,
    floor_factor: float = 1e3,
    strict: bool = False,
) -> Check:
    """Assert that ``jvp`` (and ``hvp``) are the directional derivatives of ``f`` at ``x`` along ``dx``.

    ``f``: a callable ``array -> array`` (any output shape, e.g. ``(N, d_v)`` attention outputs);
    ``x``, ``dx``: arrays of one shape (the point and the direction; scalars work too); ``jvp``:
    ``Df(x)[dx]``, an array of the shape of ``f(x)`` or a callable ``jvp(x, dx)`` returning one;
    ``hvp``: optionally ``D²f(x)[dx, dx]`` (array or callable), then the remainder also subtracts
    ``(h²/2)·hvp``.  ``order``: the claimed order of the remainder, by default 2 (``jvp`` only) or 3
    (with ``hvp``); the claim is *at least* this order (a faster remainder, e.g. a vanishing second
    derivative, passes).

    Steps ``h_i = h0 · factor^i``, ``i < levels``; remainders at the round-off floor
    (``floor_factor · eps · max(1, ‖f(x)‖)``, as :func:`~transformer_limits.verify.taylor.taylor_test`)
    are left out, and the fit uses the finest ``fit_levels`` of the others (coarser steps may be
    pre-asymptotic: they are tabulated, not judged, as in ``taylor_test``).  Verdict:
    :func:`~transformer_limits.verify.verdicts.rate_at_least` with claim ``q ≤ −(order − tolerance)``
    on the fit ``R ≈ C (1/h)^q`` (t-interval: one direction gives one remainder per step); it fails
    when the one-sided ``1 − alpha`` upper bound of the fitted order lies below ``order − tolerance``.
    The remainders are deterministic: ``alpha`` is the level of the t-test that treats their
    deviations from a line in log-log (pre-asymptotic curvature, round-off) as noise, and
    ``tolerance`` (0.1, as ``taylor_test``) absorbs the pre-asymptotic drift of a right expansion.
    ``alternative``: the remainder order of the violation to detect (default ``order − 1``: a wrong
    ``jvp``/``hvp``); the Check states its power against it.  Every remainder at the floor: the
    expansion is exact to round-off and the check passes (a term wrong by δ would have left
    ``h0·|δ|`` above the floor).

    Returns the :class:`~transformer_limits.verify.Check` (``measured``: the fitted exponent of 1/h,
    i.e. minus the order).  Raises ``AssertionError`` with the table of h, remainders and local orders
    (its attribute ``check`` is the failed Check, e.g. to assert the order a deliberately wrong
    derivative leaves) when the order is contradicted (or, with ``strict``, when the check is inconclusive; otherwise it
    warns with :class:`~transformer_limits.verify.InconclusiveWarning`); ``ValueError`` naming the bad
    argument.
    """
    n_terms = 1 if hvp is None else 2
    order = n_terms + 1 if order is None else order
    slow = _check_options(order, alpha, tolerance, alternative, h0, levels, factor, floor_factor)
    if isinstance(fit_levels, bool) or not isinstance(fit_levels, int) or not 3 <= fit_levels <= levels:
        raise ValueError(f"fit_levels must be an integer in [3, levels = {levels}], got {fit_levels!r}")
    x_arr = np.asarray(x, dtype=np.float64)
    dx_arr = np.asarray(dx, dtype=np.float64)
    if dx_arr.shape != x_arr.shape:
        raise ValueError(f"dx must have the shape of x, {x_arr.shape}, got {dx_arr.shape}")
    if not (np.all(np.isfinite(x_arr)) and np.all(np.isfinite(dx_arr))):
        raise ValueError("x and dx must be finite")
    f0 = np.asarray(f(x_arr), dtype=np.float64)
    if not np.all(np.isfinite(f0)):
        raise ValueError("f(x) must be finite")
    coefficients = [_term(jvp, "jvp", x_arr, dx_arr, f0.shape)]
    if hvp is not None:
        coefficients.append(0.5 * _term(hvp, "hvp", x_arr, dx_arr, f0.shape))
    result = taylor_test(f, x_arr, dx_arr, coefficients, h0=h0, levels=levels, factor=factor,
                         tolerance=tolerance, floor_factor=floor_factor)
    if not np.all(np.isfinite(result.remainders)):
        raise ValueError(f"f is not finite at some x + h dx with h <= h0 = {h0:g}: lower h0")
    floor = floor_factor * np.finfo(np.float64).eps * max(1.0, float(np.linalg.norm(f0)))
    kept = result.remainders > floor
    claim = _remainder_text(n_terms, order)
    fit: PowerLawFit | None = None
    if not kept.any():
        check = _exact_check(claim, order, tolerance, floor, h0, result)
    else:
        if kept.sum() < 3:
            raise ValueError(f"h0: only {int(kept.sum())} of {levels} remainders lie above the round-off floor "
                             f"{floor:.1e}; a fit needs 3: increase h0 (now {h0:g}) or use fewer, coarser levels")
        steps = result.steps[kept]
        # the finest fit_levels usable levels: coarser ones may be pre-asymptotic (a remainder whose
        # leading terms cancel near h0 changes sign there); they are tabulated, not judged
        finest = list(range(max(0, steps.size - fit_levels), steps.size))
        fit = fit_power_law(1.0 / steps, result.remainders[kept], param="1/h", expected=-float(order),
                            window=finest, method="t")
        check = rate_at_least(fit, -(order - tolerance), alpha, method="t", alternative=-slow)
        check.name = "taylor_remainder_rate"
        check.claim = f"{claim} (remainder order >= {order - tolerance:g}: exponent of 1/h <= {-(order - tolerance):g})"
        check.alternative = f"remainder order {slow:g} (exponent of 1/h {-slow:g}: a wrong or missing term)"
        check.statistics.update(remainder_order=order, tolerance=tolerance, steps=result.steps.tolist(),
                                remainders=result.remainders.tolist(), local_orders_h=result.rates.tolist(),
                                round_off_floor=floor, levels_at_floor=int((~kept).sum()))
    if recording_active():
        record_safely("assert_taylor_rate", lambda: _record(result, kept, fit, check, order))
    if not check.passed:
        error = AssertionError("Taylor remainder rate failed: " + claim + "\n"
                               + format_taylor_table(result, kept, fit, check, order))
        setattr(error, "check", check)  # the failed Check, for a test that expects the failure
        raise error
    if check.state == "inconclusive":
        text = ("Taylor remainder rate inconclusive (not contradicted, too little power)\n"
                + format_taylor_table(result, kept, fit, check, order))
        if strict:
            raise AssertionError(text)
        warnings.warn(text, InconclusiveWarning, stacklevel=2)
    return check


def _exact_check(claim: str, order: int, tolerance: float, floor: float, h0: float, result: TaylorResult) -> Check:
    """The check of an expansion exact to round-off (every remainder at the floor)."""
    from transformer_limits.verify.stats.power import deterministic_power

    worst = float(result.remainders.max())
    stats = {"alpha": 0.0, "false_failure_rate": 0.0, "sides": "one-sided (remainder <= round-off floor)",
             "method": "taylor_test: every remainder at the round-off floor", "remainder_order": order,
             "tolerance": tolerance, "round_off_floor": floor, "steps": result.steps.tolist(),
             "remainders": result.remainders.tolist()}
    check = Check("taylor_remainder_rate", f"{claim} (exact to round-off)", -float(order), -math.inf,
                  (0.0, worst), True, stats,
                  f"every remainder is at the round-off floor {floor:.1e}: the expansion is exact to round-off")
    # a term wrong by δ leaves R(h0) ≈ h0 |δ|: above the floor for every |δ| > floor / h0
    return attach_power(check, deterministic_power(True),
                        f"a wrong term, off by more than floor/h0 = {floor / h0:.1e} (deterministic)",
                        model="deterministic")


def _record(result: TaylorResult, kept: np.ndarray, fit: PowerLawFit | None, check: Check,
            order: int) -> AssertionRecord:
    """The report's view of one Taylor verdict: a row per step, the fit in h and a log-log figure."""
    table = [{"h": float(h), "remainder": float(r), "local_order": None if i == 0 else float(result.rates[i - 1]),
              "used": bool(kept[i])} for i, (h, r) in enumerate(zip(result.steps, result.remainders))]
    if fit is None:
        return AssertionRecord("assert_taylor_rate", check, table, None, None, [check.note])
    steps, rem = result.steps[kept], result.remainders[kept]
    # the same line in h (OLS is symmetric under log h -> -log h): the order itself, for the reader
    window = sorted(len(steps) - 1 - k for k in fit.window.used)
    in_h = fit_power_law(steps, rem, param="h", expected=float(order), window=window, method="t")
    summary = in_h.to_dict()

    def figure(name: str) -> Any:
        from transformer_limits.verify.rate.plots import RateSeries, rate_figure

        series = RateSeries("Taylor remainder", steps, rem, in_h, claimed_exponent=float(order), finest="min",
                            replicates="direction")
        return rate_figure(name, f"Taylor remainder vs h (log-log): fitted order {in_h.exponent.value:.3g}, "
                                 f"claimed {order} (dashed); levels at the round-off floor not drawn.",
                           [series], xlabel="step h", ylabel="remainder")

    return AssertionRecord("assert_taylor_rate", check, table, summary, figure,
                           [format_taylor_table(result, kept, fit, check, order)])
